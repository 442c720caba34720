/*
 * format.c
 *		The list of wire formats, and which one a pipeline uses.
 */
#include "postgres.h"

#include "format.h"

static const ReplicantFormat *const formats[] = {
	&replicant_format_replicant,
	&replicant_format_clickhouse,
};

const ReplicantFormat *
replicant_format_lookup(const char *name)
{
	int			i;

	for (i = 0; i < lengthof(formats); i++)
		if (strcmp(formats[i]->name, name) == 0)
			return formats[i];
	return NULL;
}

/* Pipelines have no format option yet: all deliver replicant's own. */
const ReplicantFormat *
replicant_format_of(const ReplicantPipeline *pipeline)
{
	return replicant_format_lookup("replicant");
}
