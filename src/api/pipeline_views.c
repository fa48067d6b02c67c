/*-------------------------------------------------------------------------
 *
 * pipeline_views.c
 *		The runtime views over the pipeline slots that show what only a
 *		pipeline's owner sees: _pipeline_batches (the checkpoint log) and
 *		_remote_runtime (the remote ends, with their last error).
 *
 * Shared memory hands them copies of this database's slots
 * (PipelineBatchesSnapshot, PipelineRemoteSnapshot in
 * shmem/pipeline_slots_views.c, which take the slots' spinlocks); they
 * filter the copies with the views' rule (PipelineVisibleToCaller,
 * views.c), so that they filter by themselves whoever calls them.  No
 * lock is taken here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "api/views.h"
#include "core/compat.h"
#include "core/util.h"
#include "shmem/pipeline_slots.h"

PG_FUNCTION_INFO_V1(sg_pipeline_batches);
PG_FUNCTION_INFO_V1(sg_remote_runtime);

/*
 * _pipeline_batches() -> the checkpoint log held in shared memory, of the
 * pipelines the caller may see (owner, members, superusers)
 */
Datum
sg_pipeline_batches(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgPipelineBatchesRow *rows;
	int			nrows;
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	nrows = PipelineBatchesSnapshot(&rows);
	for (i = 0; i < nrows; i++)
	{
		int32		id = rows[i].pipeline_id;
		int			k;

		if (!PipelineVisibleToCaller(id))
			continue;
		for (k = 0; k < rows[i].nbatches; k++)
		{
			SgBatchRecord *r = &rows[i].batches[k];
			Datum		values[12];
			bool		nulls[12] = {false};

			values[0] = Int32GetDatum(id);
			values[1] = Int64GetDatum(r->batch_id);
			values[2] = Int64GetDatum(r->epoch);
			values[3] = TimestampTzGetDatum(r->committed_at);
			values[4] = Int32GetDatum(r->events_in);
			values[5] = Int64GetDatum(r->rows_out);
			values[6] = Int32GetDatum(r->partitions);
			values[7] = Int64GetDatum(r->first_seq);
			values[8] = Int64GetDatum(r->last_seq);
			values[9] = Float8GetDatum(r->fetch_us / 1000.0);
			values[10] = Float8GetDatum(r->process_us / 1000.0);
			values[11] = Float8GetDatum(r->commit_us / 1000.0);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * _remote_runtime() -> (pipeline_id, side, server, connected, rtt_ms, last_error);
 * last_error (which can quote event values) only for the pipeline's owner,
 * its members and superusers
 */
Datum
sg_remote_runtime(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgRemoteRuntimeRow *rows;
	int			nrows;
	int			i,
				side;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	nrows = PipelineRemoteSnapshot(&rows);
	for (i = 0; i < nrows; i++)
	{
		SgRemoteSideRow *copy = rows[i].side;
		int32		id = rows[i].pipeline_id;
		bool		visible;

		visible = (copy[0].last_error[0] == '\0' && copy[1].last_error[0] == '\0') ||
			PipelineVisibleToCaller(id);
		for (side = 0; side < 2; side++)
		{
			Datum		values[6];
			bool		nulls[6] = {false};

			if (copy[side].server[0] == '\0')
				continue;
			values[0] = Int32GetDatum(id);
			values[1] = CStringGetTextDatum(side == 0 ? "source" : "sink");
			values[2] = CStringGetTextDatum(copy[side].server);
			values[3] = BoolGetDatum(copy[side].connected);
			values[4] = Float8GetDatum(copy[side].rtt_us / 1000.0);
			nulls[4] = copy[side].rtt_us == 0;
			values[5] = CStringGetTextDatum(copy[side].last_error);
			nulls[5] = copy[side].last_error[0] == '\0' || !visible;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
