#!/usr/bin/env python3
"""check-modules.py -- src/ has no include cycle and no function over 100 lines.

A module is foo.c plus foo.h; module A depends on B when A.c or A.h includes
"B.h".  The dependency graph must be acyclic.  A function is counted from the
line holding its name to its closing brace.

    python3 test/check-modules.py [src-dir] [file.c ...]

With file arguments only those files' functions are measured (the cycle check
always covers the whole directory).  Exits 1 on any finding.
"""
import os
import re
import sys

MAX_LINES = 100
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)


def module_graph(src):
    graph = {}
    for name in sorted(os.listdir(src)):
        base, ext = os.path.splitext(name)
        if ext not in ('.c', '.h'):
            continue
        with open(os.path.join(src, name)) as f:
            deps = set(INCLUDE.findall(f.read()))
        graph.setdefault(base, set()).update(
            d for d in deps
            if d != base and os.path.exists(os.path.join(src, d + '.h')))
    return graph


def find_cycles(graph):
    """Every back edge of a depth-first search, as the cycle it closes."""
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = 'open'
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 'open':
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 'done'

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def long_functions(path):
    """(name, first line, length) of each function longer than MAX_LINES."""
    with open(path) as f:
        lines = f.read().split('\n')
    found = []
    i = 0
    while i < len(lines):
        # pgindent style: the name at column 0, "name(", body's "{" at column 0
        m = re.match(r'^([A-Za-z_]\w*)\(', lines[i])
        if m:
            j = i
            while j < len(lines) and lines[j] != '{':
                if lines[j].rstrip().endswith(';'):
                    break
                j += 1
            if j < len(lines) and lines[j] == '{':
                k = j + 1
                while k < len(lines) and lines[k] != '}':
                    k += 1
                length = k - i + 1
                if length > MAX_LINES:
                    found.append((m.group(1), i + 1, length))
                i = k
        i += 1
    return found


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', 'src')
    files = argv[2:] or sorted(
        os.path.join(src, n) for n in os.listdir(src) if n.endswith('.c'))
    failed = False
    for cycle in find_cycles(module_graph(src)):
        print('include cycle: ' + ' -> '.join(cycle))
        failed = True
    for path in files:
        for name, line, length in long_functions(path):
            print('%s:%d: %s is %d lines (limit %d)' % (
                os.path.basename(path), line, name, length, MAX_LINES))
            failed = True
    if not failed:
        print('no include cycle; no function over %d lines' % MAX_LINES)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
