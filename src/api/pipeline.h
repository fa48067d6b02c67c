/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *		The pipeline lifecycle SQL API (api/pipeline.c): what the other
 *		SQL API files share with it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_API_PIPELINE_H
#define SG_API_PIPELINE_H

#include "postgres.h"

#include "fmgr.h"

#define SG_BATCH_SIZE		1000	/* create_pipeline's batch_size by default */
#define SG_KAFKA_SINK_BATCH_SIZE 10000	/* the same, for a Kafka sink */

/* GUCs (registered by streamguard.c) */
extern int	sg_role_max_pipelines;
extern int	sg_database_max_pipelines;

/* a pipeline row as the control calls see it */
typedef struct SgPipeRow
{
	int32		id;
	Oid			owner;
	char	   *stream;
	char	   *state;
	int64		epoch;
	int32		workers;
} SgPipeRow;

extern SgPipeRow PipelineLockExt(const char *name, Oid caller, bool fence, bool missing_ok);
extern SgPipeRow PipelineLock(const char *name, Oid caller, bool fence);
extern void PipelineExec(const char *sql, int nargs, Oid *types, Datum *values, int expect);
extern void PipelineSetState(int32 id, const char *state, bool bump_epoch);
extern void PipelineNotifyChange(int32 pipeline_id);
extern char *PipelineConsumerName(const char *pipeline);
extern void PipelineDropForStream(int32 stream_id);

/* SQL functions other files call directly (window_api.c, ownership.c) */
extern Datum sg_create_pipeline(PG_FUNCTION_ARGS);
extern Datum sg_drop_pipeline(PG_FUNCTION_ARGS);

#endif							/* SG_API_PIPELINE_H */
