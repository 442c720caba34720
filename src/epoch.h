/*
 * epoch.h
 *		The options decoding depends on (publications, messages,
 *		message_prefixes) as they were before each alter_pipeline call that
 *		changed them, for the commits before that call.
 */
#ifndef REPLICANT_EPOCH_H
#define REPLICANT_EPOCH_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

typedef struct ReplicantEpoch
{
	XLogRecPtr until;             /* for commits before it; 0: the current options */
	List *publications;           /* of char * */
	XLogRecPtr *publication_lsns; /* per publication: delivered from here on (0: always) */
	bool messages;                /* deliver pg_logical_emit_message() messages */
	List *message_prefixes;       /* of char *; NIL: every non-internal prefix */
} ReplicantEpoch;

/*
 * The options a commit (or a non-transactional message) at lsn is decoded
 * with: the first of epochs (oldest first, the current options last) whose
 * until is past lsn.
 */
extern const ReplicantEpoch *replicant_epoch_at(const List *epochs, XLogRecPtr lsn);

/* Whether one of epochs delivers messages. */
extern bool replicant_epoch_any_messages(const List *epochs);

/* Whether replicant.pipeline_epochs exists (the SQL objects of 0.3.0 on). */
extern bool replicant_epoch_kept(void);

/*
 * alter_pipeline, before it changes any of these options: keeps the
 * current ones for the commits before now, and drops the epochs the
 * checkpoint passed.  Needs an SPI connection with replicant's privileges.
 */
extern void replicant_epoch_record(int32 pipeline_id);

#endif /* REPLICANT_EPOCH_H */
