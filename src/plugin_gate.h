/*
 * plugin_gate.h
 *		Which decoding contexts may use replicant's output plugin: only those
 *		replicant creates itself (a pipeline worker's, a pipeline's slot).
 */
#ifndef REPLICANT_PLUGIN_GATE_H
#define REPLICANT_PLUGIN_GATE_H

/*
 * With true, lets the next decoding context this process creates (or the
 * slot it creates) use the plugin; replicant calls it right before it
 * creates one, and with false right after, also when that failed.
 */
extern void replicant_plugin_gate_open(bool open);

/* The plugin's startup: whether the gate was open for it; closes it. */
extern bool replicant_plugin_gate_pass(void);

/*
 * Whether the server lets replicant's library be an output plugin at all:
 * from 15.19 on, only the libraries output_plugin_libraries lists.
 */
extern bool replicant_plugin_gate_server_allows(void);

#endif /* REPLICANT_PLUGIN_GATE_H */
