/*-------------------------------------------------------------------------
 *
 * pipeline_catalog.h
 *		The rows of a pipeline that several modules read or write: its row
 *		in streamguard.pipeline, its dead letters, its Kafka positions
 *		(pipeline_catalog.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_PIPELINE_CATALOG_H
#define SG_PIPELINE_CATALOG_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/array.h"

#include "pipeline/pipeline.h"

/*
 * What create_pipeline was given, checked and parsed: every closed
 * vocabulary is its C enum here.  The SQL entry points (pipeline.c) fill it
 * from their arguments, create_window_pipeline (window_api.c) from its own.
 */
typedef struct SgPipelineSpec
{
	char	   *name;
	char	   *source;			/* a local stream, or what source_server names */
	char	   *sql;
	SgGuarantee guarantee;
	int32		batch_size;		/* -1: the sink's default */
	SgErrorPolicy policy;
	bool		dedup;
	Interval   *dedup_window;
	SgStartFrom start_from;
	char	   *source_server;	/* NULL: a local stream */
	char	   *sink_server;	/* NULL: no remote sink */
	char	   *sink_table;
	SgSinkMode	sink_mode;

	/*
	 * Reached through the 0.1 signature: the catalog is 0.1's, without the
	 * columns of the settings below (which then keep their defaults, and
	 * workers is 1).
	 */
	bool		catalog_0_1;
	Interval   *batch_timeout;
	bool		allow_source_append;
	int32		max_attempts;
	Interval   *retry_backoff;
	Interval   *max_backoff;
	int32		workers;
	ArrayType  *sink_on_conflict;	/* NULL: not an upserting sink */
} SgPipelineSpec;

/*
 * What alter_pipeline changes: a NULL pointer or a false set_* keeps the
 * setting.
 */
typedef struct SgPipelineChange
{
	bool		catalog_0_1;	/* the 0.1 signature: sql, batch_size, error_policy */
	char	   *sql;
	bool		set_batch_size;
	int32		batch_size;
	bool		set_policy;
	SgErrorPolicy policy;
	Interval   *batch_timeout;
	bool		set_max_attempts;
	int32		max_attempts;
	Interval   *retry_backoff;
	Interval   *max_backoff;
	bool		set_workers;
	int32		workers;
} SgPipelineChange;

/* the settings of a pipeline after alter_pipeline changed some of them */
typedef struct SgPipelineSettings
{
	int32		max_attempts;
	Interval   *retry_backoff;
	Interval   *max_backoff;
	int32		workers;
	char	   *source_server;
	char	   *sink_server;
} SgPipelineSettings;

struct SgPipeDef;

extern char *PipelineConsumerName(const char *pipeline);
extern int32 PipelineInsert(const SgPipelineSpec *spec, int32 stream_id, Oid owner,
							const char *search_path, bool source_kafka);
extern void PipelineAlterRow(int32 id, const SgPipelineChange *change, SgPipelineSettings *after);
extern void PipelineSetSearchPath(int32 id, const char *search_path);
extern void PipelineSetState(int32 id, const char *state, bool bump_epoch);
extern void PipelineResumeRow(int32 id);
extern bool PipelineDefLoad(struct SgPipeDef *def, bool clean_start, MemoryContext cxt,
							int32 *stream_id);
extern void PipelineRecordError(int32 id, int64 generation, const char *message, bool fail);
extern void PipelineFlagAllErrors(const char *message);
extern void PipelineClearErrorsLike(const char *pattern);

extern void DeadLetterInsert(int32 pipeline_id, const char *pipeline, const Datum *event,
							 const bool *isnull, const char *error, const char *sqlstate);

extern void KafkaPositionsAdd(int32 pipeline_id, int nparts, int64 next_offset);

#endif							/* SG_PIPELINE_CATALOG_H */
