/*
 * format.c
 *		The list of wire formats, and which one a pipeline uses.
 */
#include "postgres.h"

#include "format.h"
#include "sink_nats_url.h"

static const ReplicantFormat *const formats[] = {
	&replicant_format_replicant,
	&replicant_format_cloudevents,
	&replicant_format_clickhouse,
};

const ReplicantFormat *
replicant_format_lookup(const char *name)
{
	int i;

	for (i = 0; i < lengthof(formats); i++)
		if (strcmp(formats[i]->name, name) == 0)
			return formats[i];
	return NULL;
}

void
replicant_format_check_name(const char *name)
{
	StringInfoData names;
	int i;

	if (replicant_format_lookup(name) != NULL)
		return;
	initStringInfo(&names);
	for (i = 0; i < lengthof(formats); i++)
		appendStringInfo(&names, "%s\"%s\"", i > 0 ? ", " : "", formats[i]->name);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown format \"%s\"", name),
			 errhint("The formats are %s.", names.data)));
}

char *
replicant_format_read_webhook_id(const char *pipeline, int64 backfill_id,
								 Oid relfilenode, int64 position, XLogRecPtr read,
								 int part)
{
	if (OidIsValid(relfilenode))
		return psprintf("%s-b" INT64_FORMAT "-%u_" INT64_FORMAT "-" UINT64_FORMAT "-%d",
						pipeline, backfill_id, relfilenode, position, read, part);
	return psprintf("%s-b" INT64_FORMAT "-" INT64_FORMAT "-" UINT64_FORMAT "-%d", pipeline,
					backfill_id, position, read, part);
}

/*
 * The format was checked when it was set; a name this library does not
 * know (a catalog written by a newer one) is not silently replaced.  NATS
 * publishes each change alone: its CloudEvents come framed for that.
 */
const ReplicantFormat *
replicant_format_of(const ReplicantDestination *destination)
{
	const ReplicantFormat *format = replicant_format_lookup(destination->format);

	if (format == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pipeline \"%s\" uses unknown format \"%s\"",
						destination->pipeline_name, destination->format),
				 errhint("Set a known format with replicant.alter_pipeline.")));
	if (format == &replicant_format_cloudevents && replicant_nats_url(destination->sink_url))
		return &replicant_format_cloudevents_nats;
	return format;
}

const ReplicantFormat **
replicant_formats_of(List *destinations, MemoryContext context, int *n)
{
	int max = Max(1, list_length(destinations));
	const ReplicantFormat **distinct = MemoryContextAlloc(context, sizeof(ReplicantFormat *) * max);
	ListCell *lc;

	*n = 0;
	foreach(lc, destinations)
	{
		const ReplicantFormat *format = replicant_format_of(lfirst(lc));
		int i;

		for (i = 0; i < *n && distinct[i] != format; i++)
			;
		if (i == *n)
			distinct[(*n)++] = format;
	}
	return distinct;
}
