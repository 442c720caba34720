/*
 * plugin_gate.c
 *		The output plugin serves replicant's own decoding contexts only.
 *
 * Any role that may create a logical slot can name the "replicant" plugin
 * anywhere a plugin is named (pg_create_logical_replication_slot(),
 * pg_logical_slot_get_changes(), a walsender's START_REPLICATION), with
 * any options; the callbacks, though, need what only a pipeline worker sets
 * up.  So replicant opens this gate, a flag of the process, around its own
 * creation of a context, and the plugin's startup refuses every context
 * that finds it closed.  Nothing else ever opens it.
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "plugin_gate.h"

static bool gate_open = false;

void
replicant_plugin_gate_open(bool open)
{
	gate_open = open;
}

bool
replicant_plugin_gate_pass(void)
{
	bool passed = gate_open;

	gate_open = false;
	return passed;
}

bool
replicant_plugin_gate_server_allows(void)
{
	const char *setting = GetConfigOption("output_plugin_libraries", true, false);
	List *names;
	ListCell *lc;

	if (setting == NULL)
		return true; /* servers before 15.19 load any plugin */
	if (!SplitIdentifierString(pstrdup(setting), ',', &names))
		return false;
	foreach(lc, names)
		if (strcmp(lfirst(lc), "replicant") == 0)
			return true;
	return false;
}
