/*-------------------------------------------------------------------------
 *
 * sink_sql.c
 *		A pipeline without a sink server: its SQL is the sink.
 *
 * The pipeline's SQL runs over the batch as the owner, in the batch's
 * transaction (batchexec.c): whatever it writes in this database commits
 * with the positions, and that is all this sink does.  After max_attempts
 * failed attempts the batch runs event by event, each in a subtransaction,
 * and an event whose run fails meets the error policy (BatchRunIsolated).
 * Nothing to settle, confirm or keep between batches: every other step of
 * the routine is empty.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pipeline/worker.h"

/* rows out, or -1 when the error policy stops (w->stop_error) */
static int64
sg_sql_sink_write(SgWorker *w, SgBatch *b)
{
	if (b->n == 0)
		return b->rows_out;		/* every event filtered out: nothing to run */
	return b->isolate ? BatchRunIsolated(w, b->store, BatchRunSql) : BatchRunSql(w, b->store, b->n);
}

const SgSinkRoutine SgSqlSinkRoutine = {
	.name = "SQL",
	.write = sg_sql_sink_write,
};
