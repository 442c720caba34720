/*
 * pipeline_options.h
 *		The options of create_pipeline and alter_pipeline: read, checked,
 *		and turned into the parameters of the statements that apply them.
 *
 * Adding an option: its id below, its parse function and its line in
 * pipeline_options.c's table (and its SQL argument and column).  A sink
 * option's column is in replicant.destinations (docs/destinations-design.md),
 * or in replicant.pipelines under the SQL objects of 0.2.0 and before.
 */
#ifndef REPLICANT_PIPELINE_OPTIONS_H
#define REPLICANT_PIPELINE_OPTIONS_H

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/jsonb.h"

/*
 * The options, in the order they are validated: their argument order, but
 * that alter_pipeline checks secret_previous_until, which needs the new
 * secret, last.  Option id is parameter REPLICANT_OPTION_PARAM(id) of the
 * statements that apply them.
 */
typedef enum ReplicantPipelineOptionId
{
	OPT_PUBLICATION,
	OPT_SINK_URL,
	OPT_SNAPSHOT,
	OPT_BATCH_MAX_BYTES,
	OPT_BATCH_MAX_TRANSACTIONS,
	OPT_HTTP_TIMEOUT_MS,
	OPT_CONNECT_TIMEOUT_MS,
	OPT_HEADERS,
	OPT_SECRET,
	OPT_CLEAR_SECRET,
	OPT_SNAPSHOT_WORKERS,
	OPT_MESSAGES,
	OPT_MESSAGE_PREFIXES,
	OPT_CA_FILE,
	OPT_FAILOVER,
	OPT_FORMAT,
	OPT_ENABLED,
	OPT_CREATE_TABLES,
	OPT_MAX_RETAINED_WAL,
	OPT_ON_SLOT_LOSS,
	OPT_DESTINATION,
	OPT_SECRET_PREVIOUS_UNTIL,
	NUM_PIPELINE_OPTIONS
} ReplicantPipelineOptionId;

/* The functions that take options. */
typedef enum ReplicantOptionsCall
{
	REPLICANT_CREATE_PIPELINE,
	REPLICANT_ALTER_PIPELINE,
	REPLICANT_ALTER_DESTINATION,
	REPLICANT_ADD_DESTINATION
} ReplicantOptionsCall;

/* The table a statement writes: which options' columns it sets. */
typedef enum ReplicantOptionsTable
{
	REPLICANT_OPTIONS_PIPELINES,    /* the pipeline's own (decoding) options */
	REPLICANT_OPTIONS_DESTINATIONS, /* the sink options */
	REPLICANT_OPTIONS_BOTH          /* all: replicant.pipelines before 0.3.0's objects */
} ReplicantOptionsTable;

/* $1 is the pipeline (its name, or its id), $2 its owner, then the options. */
#define REPLICANT_OPTION_PARAM(id) (3 + (id))
#define REPLICANT_NUM_OPTION_PARAMS (2 + NUM_PIPELINE_OPTIONS)

/* One call's options; an option not given (NULL to alter) is not given. */
typedef struct ReplicantPipelineOptions
{
	Datum values[NUM_PIPELINE_OPTIONS];
	bool given[NUM_PIPELINE_OPTIONS];
} ReplicantPipelineOptions;

/* A text argument that must not be null; argname names it in the error. */
extern char *replicant_pipeline_options_required_text(FunctionCallInfo fcinfo, int argno,
													  const char *argname);

/*
 * Reads and checks the options of a create_pipeline or add_destination
 * (every option but those that take NULL is required), alter_pipeline or
 * alter_destination (NULL leaves it unchanged) call, with the checks that need no catalog
 * access.  Refuses the first invalid option, in option id order.
 */
extern void replicant_pipeline_options_parse(FunctionCallInfo fcinfo, ReplicantOptionsCall call,
											 ReplicantPipelineOptions *o);


/* The checks of the headers option inside catalog access. */
extern void replicant_pipeline_options_check_headers(Jsonb *headers);

/* The publications must exist (inside catalog access). */
extern void replicant_pipeline_options_check_publications_exist(ArrayType *pubs);

/*
 * The SPI parameters of a statement that applies options: $1 the
 * pipeline, $2 its owner, then every option (null when not given); the
 * arrays have REPLICANT_NUM_OPTION_PARAMS elements.
 */
extern void replicant_pipeline_options_params(const ReplicantPipelineOptions *o, Oid pipeline_type,
											  Datum pipeline, Oid owner, Oid *types,
											  Datum *values, char *nulls);

/*
 * Appends ", column" to columns and ", $n" to params for each option the
 * create_pipeline or add_destination function (call) of nargs arguments
 * has and that has a column in table.
 */
extern void replicant_pipeline_options_insert_sql(StringInfo columns, StringInfo params, int nargs,
												  ReplicantOptionsCall call, ReplicantOptionsTable table);

/*
 * Appends " column = ...," for each option the function call of nargs
 * arguments has and that has a column in table: NULL keeps the column.
 */
extern void replicant_pipeline_options_update_sql(StringInfo sql, int nargs, ReplicantOptionsCall call,
												  ReplicantOptionsTable table);

/*
 * The name of the first sink option (a destination's) the call changes, or
 * NULL when it changes none.
 */
extern const char *replicant_pipeline_options_sink_option_given(const ReplicantPipelineOptions *o);

#endif /* REPLICANT_PIPELINE_OPTIONS_H */
