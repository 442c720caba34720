/*
 * guc_pin.h
 *		Pinning a table of settings, for the rest of a process or until a
 *		GUC nest level is left.  A leaf: it includes no replicant header.
 */
#ifndef REPLICANT_GUC_PIN_H
#define REPLICANT_GUC_PIN_H

typedef struct ReplicantSetting
{
	const char *name;
	const char *value;
} ReplicantSetting;

/*
 * Sets each setting for the rest of the process.  This outranks ALTER
 * DATABASE/ROLE SET and the configuration file, but not a session-level SET.
 */
extern void replicant_guc_pin(const ReplicantSetting *settings, int nsettings);

/*
 * Same, but only until AtEOXact_GUC(false, level) with the returned nest
 * level; a setting that already has the value is left alone.
 */
extern int replicant_guc_pin_local(const ReplicantSetting *settings,
								   int nsettings);

#endif /* REPLICANT_GUC_PIN_H */
