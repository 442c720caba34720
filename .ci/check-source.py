#!/usr/bin/env python3
"""check-source.py -- the shape rules of src/ that a compiler does not check.

    python3 .ci/check-source.py [SRC-DIR]

Fails (exit status 1) when

  - a function in SRC-DIR/*.c is longer than 100 lines, counted from the line
    that names it to its closing brace (PostgreSQL style: the name starts a
    line, the braces stand alone in column 0);
  - src modules include each other in a cycle.  A module is foo.c with
    foo.h; module A depends on module B when A.c or A.h includes "B.h".
    Each cycle is printed as "a -> b -> c -> a".

Prints one line per finding and ends with "source check: ok" or with the
number of findings.
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 100

# A function definition's name line: an identifier and "(" in column 0 that
# does not end in ";" (prototypes put the return type on the same line, and
# PG_FUNCTION_INFO_V1(...); ends in ";").
NAME_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(")
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def long_functions(path):
    """Yields (name, first line number, length) of each function over the limit."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    name = start = None
    in_body = False
    for number, line in enumerate(lines, 1):
        if not in_body:
            match = NAME_LINE.match(line)
            if match and not line.rstrip().endswith(";"):
                name, start = match.group(1), number
            elif line.startswith("{") and name is not None:
                in_body = True
            elif line.startswith(("#", "}")) or line.rstrip().endswith(";"):
                # a macro, a struct or a declaration: not a definition
                if not line.startswith(" ") and not line.startswith("\t"):
                    name = None
        elif line.startswith("}"):
            length = number - start + 1
            if length > MAX_FUNCTION_LINES:
                yield name, start, length
            name = None
            in_body = False


def include_graph(src):
    """Maps each module to the set of modules it includes."""
    files = sorted(os.listdir(src))
    modules = {os.path.splitext(f)[0] for f in files if f.endswith((".c", ".h"))}
    graph = {m: set() for m in modules}
    for f in files:
        module, ext = os.path.splitext(f)
        if ext not in (".c", ".h"):
            continue
        with open(os.path.join(src, f), encoding="utf-8") as text:
            for line in text:
                match = LOCAL_INCLUDE.match(line)
                if not match:
                    continue
                # "replication/slot.h" is the server's, not src/slot.h.
                if "/" in match.group(1):
                    continue
                target = os.path.splitext(match.group(1))[0]
                if match.group(1).endswith(".h") and target in modules and target != module:
                    graph[module].add(target)
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm: the components of more than one module."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def shortest_cycle(graph, start, members):
    """The shortest cycle from start back to start inside one component."""
    paths, seen = [[start]], {start}
    while paths:
        next_paths = []
        for path in paths:
            for w in sorted(graph[path[-1]] & members):
                if w == start:
                    return path + [start]
                if w not in seen:
                    seen.add(w)
                    next_paths.append(path + [w])
        paths = next_paths
    return None


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src")
    findings = 0
    for f in sorted(os.listdir(src)):
        if not f.endswith(".c"):
            continue
        for name, start, length in long_functions(os.path.join(src, f)):
            print(f"src/{f}:{start}: function {name} has {length} lines "
                  f"(at most {MAX_FUNCTION_LINES})")
            findings += 1

    graph = include_graph(src)
    for component in strongly_connected(graph):
        members = set(component)
        # One cycle through each module of the component, each printed once.
        cycles = []
        for module in component:
            cycle = shortest_cycle(graph, module, members)
            turn = cycle[:-1]
            first = turn.index(min(turn))
            canonical = turn[first:] + turn[:first]
            if canonical not in cycles:
                cycles.append(canonical)
        print(f"include cycle among {', '.join(component)}:")
        for cycle in cycles:
            print("  " + " -> ".join(cycle + [cycle[0]]))
            findings += 1

    if findings:
        print(f"source check: {findings} finding(s)")
        return 1
    print("source check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
