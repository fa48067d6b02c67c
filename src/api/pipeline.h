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
extern void PipelineNotifyChange(int32 pipeline_id);
extern void PipelineDropForStream(int32 stream_id);

/* create_pipeline's implementation, over what it was given (window_api.c) */
struct SgPipelineSpec;
extern void PipelineCreate(struct SgPipelineSpec *spec);

/* SQL functions other files call directly (ownership.c) */
extern Datum sg_drop_pipeline(PG_FUNCTION_ARGS);

#endif							/* SG_API_PIPELINE_H */
