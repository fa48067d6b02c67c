/*-------------------------------------------------------------------------
 *
 * running.c
 *		Which pipeline this process runs: a pipeline worker's identity,
 *		for the checks that refuse what a pipeline's own SQL must not do.
 *
 * A pipeline worker says once, when it has loaded its definition
 * (worker.c), which pipeline it runs, which local stream it reads and
 * whether its SQL may append to that stream.  Every other process runs
 * none (pipeline 0, stream 0).  The checks that read it run in the
 * pipeline's SQL as much as in any session: an append to the worker's
 * own source stream (StreamCheckNotOwnSource, catalog.c), drop_stream of
 * it (streams.c), a control call on the worker's own pipeline
 * (PipelineLockExt, pipeline.c).
 *
 * The state is this file's: set through SgRunningPipelineSet, read through
 * the questions below; a process runs one pipeline for its whole life.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/util.h"

static int32 sg_running_pipeline = 0;	/* 0: not a pipeline worker */
static int32 sg_running_source = 0;	/* its local source stream, 0: none */
static bool sg_running_allow_source_append = false;

/* a pipeline worker, once its definition is loaded */
void
SgRunningPipelineSet(int32 pipeline_id, int32 source_stream, bool allow_source_append)
{
	sg_running_pipeline = pipeline_id;
	sg_running_source = source_stream;
	sg_running_allow_source_append = allow_source_append;
}

/* whether this process is the worker of pipeline `pipeline_id` */
bool
SgRunningPipelineIs(int32 pipeline_id)
{
	return pipeline_id == sg_running_pipeline;
}

/* whether this process is a pipeline worker reading stream `stream_id` */
bool
SgRunningSourceIs(int32 stream_id)
{
	return sg_running_source != 0 && stream_id == sg_running_source;
}

/*
 * Whether this process is a pipeline worker reading stream `stream_id`
 * whose SQL may not append to it (allow_source_append false).
 */
bool
SgRunningForbidsAppendTo(int32 stream_id)
{
	return SgRunningSourceIs(stream_id) && !sg_running_allow_source_append;
}
