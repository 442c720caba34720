/*
 * guc_pin.c
 *		Pinning a table of settings, for the rest of a process or until a
 *		GUC nest level is left.
 */
#include "postgres.h"

#include "utils/guc.h"

#include "guc_pin.h"

void
replicant_guc_pin(const ReplicantSetting *settings, int nsettings)
{
	int i;

	for (i = 0; i < nsettings; i++)
		SetConfigOption(settings[i].name, settings[i].value,
						PGC_SUSET, PGC_S_OVERRIDE);
}

int
replicant_guc_pin_local(const ReplicantSetting *settings, int nsettings)
{
	int level = NewGUCNestLevel();
	int i;

	for (i = 0; i < nsettings; i++)
	{
		const char *current = GetConfigOption(settings[i].name, false, false);

		/*
		 * Setting a value, even the same one, runs its check and assign
		 * hooks twice (set and restore; setlocale() for lc_monetary), which
		 * costs more than encoding a small row.
		 */
		if (current != NULL && strcmp(current, settings[i].value) == 0)
			continue;

		(void) set_config_option(settings[i].name, settings[i].value,
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	return level;
}
