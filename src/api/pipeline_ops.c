/*-------------------------------------------------------------------------
 *
 * pipeline_ops.c
 *		The operator's tools on a pipeline: dead letters, skipping an event, fault injection.
 *
 * purge_dead_letters and redrive_dead_letters (which re-runs the
 * pipeline's SQL over dead letters as the owner and deletes them in the
 * same transaction), skip_event (a poison event skipped exactly once by the
 * worker, in its batch's transaction) and inject_fault (test-only, for the
 * crash matrix).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "api/pipeline.h"
#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/util.h"
#include "pipeline/batchexec.h"
#include "pipeline/pipeline.h"
#include "shmem/horizon.h"
#include "shmem/pipeline_slots.h"

PG_FUNCTION_INFO_V1(sg_purge_dead_letters);
PG_FUNCTION_INFO_V1(sg_skip_event);
PG_FUNCTION_INFO_V1(sg_redrive_dead_letters);
PG_FUNCTION_INFO_V1(sg_inject_fault);

/*
 * purge_dead_letters(pipeline, older_than) -> rows removed.  Owner only.
 */
Datum
sg_purge_dead_letters(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	Oid			types[2] = {INT4OID, INTERVALOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	int64		removed;

	SgCheckWritable("purge_dead_letters", "it deletes dead letters");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, false);
	values[0] = Int32GetDatum(row.id);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	if (SPI_execute_with_args("DELETE FROM streamguard.dead_letter WHERE pipeline_id = $1 "
							  "AND ($2 IS NULL OR failed_at < now() - $2)",
							  2, types, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "purge_dead_letters failed");
	removed = (int64) SPI_processed;
	SgLeaveCatalog(&save);
	PG_RETURN_INT64(removed);
}

/*
 * skip_event(pipeline, partition, seq): the pipeline passes over exactly
 * this event (counted in skipped) when it reaches it; every other event of
 * its batch is processed.  Owner only.  The worker is fenced, so it
 * restarts and loads the request before its next batch.
 */
Datum
sg_skip_event(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		partition;
	int64		seq;
	SgUserSave	save;
	Oid			caller = GetUserId();
	SgPipeRow	row;
	SgStreamMeta *meta;
	int64		next_seq;
	bool		isnull;

	SgCheckWritable("skip_event", "it moves the pipeline's position");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", PG_ARGISNULL(1) ? "partition" : "seq")));
	partition = PG_GETARG_INT32(1);
	seq = PG_GETARG_INT64(2);
	SgEnterCatalog(&save);
	row = PipelineLock(name, caller, true);
	if (row.stream == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("skip_event is not supported for a pipeline with a remote source"),
				 errhint("Use reset_pipeline with a seq instead.")));
	meta = StreamLookup(row.stream, SG_PRIV_NONE);
	StreamCheckPartition(meta, partition);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	(void) HorizonReadable(meta->ref.slot, partition, &next_seq, NULL);
	if (seq < 1 || seq >= next_seq)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq %lld is out of range for partition %d of stream \"%s\"",
						(long long) seq, partition, row.stream),
				 errdetail("Seqs handed out so far are 1 to %lld.", (long long) (next_seq - 1))));
	{
		Oid			types[3] = {INT4OID, TEXTOID, INT4OID};
		Datum		values[3] = {Int32GetDatum(meta->stream_id),
		CStringGetTextDatum(PipelineConsumerName(name)), Int32GetDatum(partition)};
		int64		position;

		if (SPI_execute_with_args("SELECT position FROM streamguard.consumer "
								  "WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
								  "AND partition OPERATOR(pg_catalog.=) $3",
								  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "position lookup failed");
		position = SPI_processed == 1 ?
			DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) : 0;
		if (seq <= position)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline \"%s\" has already passed seq %lld of partition %d", name,
							(long long) seq, partition),
					 errdetail("Its position in partition %d is %lld.", partition, (long long) position)));
	}
	{
		Oid			types[3] = {INT4OID, INT4OID, INT8OID};
		Datum		values[3] = {Int32GetDatum(row.id), Int32GetDatum(partition), Int64GetDatum(seq)};

		int64		pending;

		/* every batch compares its events with the pending requests */
		if (SPI_execute_with_args("SELECT pg_catalog.count(*) FROM streamguard.pipeline_skip "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "skip request count failed");
		pending = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (pending >= SG_MAX_PENDING_SKIPS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline \"%s\" already has %lld events to skip, the most allowed is %d",
							name, (long long) pending, SG_MAX_PENDING_SKIPS),
					 errhint("Let the pipeline pass them, or use reset_pipeline to move past a range of events.")));
		SgExec("INSERT INTO streamguard.pipeline_skip (pipeline_id, partition, seq) "
			   "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
			   3, types, values, NULL, SPI_OK_INSERT);
	}
	/* a new epoch: the worker restarts and loads the request */
	PipelineSetState(row.id, row.state, true);
	SgLeaveCatalog(&save);
	PipelineNotifyChange(row.id);
	PG_RETURN_VOID();
}

/*
 * redrive_dead_letters(pipeline, partition, min_seq, max_seq, sqlstate)
 *		-> dead letters redriven
 *
 * Runs the pipeline's SQL (as its owner, as the worker would) over the
 * selected dead letters and deletes them, all in the caller's transaction:
 * if it commits, each was applied once; if the SQL fails, nothing was
 * applied and the dead letters stay.  Dead letters another redrive holds
 * are skipped, so two redrives never apply the same one.  Owner only.
 */
Datum
sg_redrive_dead_letters(PG_FUNCTION_ARGS)
{
	char	   *name;
	SgUserSave	save;
	Oid			caller = GetUserId();
	int32		id;
	Oid			owner;
	char	   *sql;
	char	   *search_path;
	int			timeout_ms;
	bool		isnull;
	Tuplestorestate *store;
	TupleDesc	desc;
	Datum	   *ctids;
	uint64		n,
				i;
	SgOwnerContext ctx;

	SgCheckWritable("redrive_dead_letters", "it appends the dead letters again");
	StreamguardCheckLoaded();
	name = SgTextArg(fcinfo, 0, "pipeline name");
	SgCheckName("pipeline", name);
	SgEnterCatalog(&save);
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};
		HeapTuple	t;
		TupleDesc	d;

		if (SPI_execute_with_args("SELECT id, owner, sql, search_path, sink_server IS NOT NULL, "
								  "(pg_catalog.date_part('epoch', batch_timeout) OPERATOR(pg_catalog.*) 1000)::float8 "
								  "FROM streamguard.pipeline WHERE name OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline lookup failed");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("pipeline \"%s\" does not exist", name)));
		t = SPI_tuptable->vals[0];
		d = SPI_tuptable->tupdesc;
		id = DatumGetInt32(SPI_getbinval(t, d, 1, &isnull));
		owner = DatumGetObjectId(SPI_getbinval(t, d, 2, &isnull));
		sql = SPI_getvalue(t, d, 3);
		search_path = SPI_getvalue(t, d, 4);
		if (DatumGetBool(SPI_getbinval(t, d, 5, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("pipeline \"%s\" has a remote sink and keeps no dead letters", name)));
		timeout_ms = (int) DatumGetFloat8(SPI_getbinval(t, d, 6, &isnull));
	}
	if (!superuser_arg(caller) && !has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of pipeline \"%s\"", name)));

	/* the dead letters, locked for this transaction */
	{
		Oid			types[5] = {INT4OID, INT4OID, INT8OID, INT8OID, TEXTOID};
		Datum		values[5];
		char		nulls[5];
		int			a;

		values[0] = Int32GetDatum(id);
		nulls[0] = ' ';
		for (a = 1; a < 5; a++)
		{
			nulls[a] = PG_ARGISNULL(a) ? 'n' : ' ';
			values[a] = PG_ARGISNULL(a) ? (Datum) 0 : PG_GETARG_DATUM(a);
		}
		if (SPI_execute_with_args("SELECT ctid, partition, seq, key, payload, dedup_key, appended_at "
								  "FROM streamguard.dead_letter WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND ($2 IS NULL OR partition OPERATOR(pg_catalog.=) $2) "
								  "AND ($3 IS NULL OR seq OPERATOR(pg_catalog.>=) $3) "
								  "AND ($4 IS NULL OR seq OPERATOR(pg_catalog.<=) $4) "
								  "AND ($5 IS NULL OR sqlstate OPERATOR(pg_catalog.=) $5) "
								  "ORDER BY partition, seq FOR UPDATE SKIP LOCKED",
								  5, types, values, nulls, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "dead letter lookup failed");
	}
	SgRestoreUser(&save);
	n = SPI_processed;
	desc = SgEventTupleDesc();
	store = tuplestore_begin_heap(false, false, work_mem);
	ctids = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		Datum		v[6];
		bool		nl[6];
		int			c;

		CHECK_FOR_INTERRUPTS();

		ctids[i] = SPI_getbinval(t, SPI_tuptable->tupdesc, 1, &isnull);
		for (c = 0; c < 6; c++)
			v[c] = SPI_getbinval(t, SPI_tuptable->tupdesc, c + 2, &nl[c]);
		tuplestore_putvalues(store, desc, v, nl);
	}
	if (n > 0)
	{
		int			ret;

		BatchEnterOwner(&ctx, owner, search_path, timeout_ms, store, desc, (int64) n);
		ret = SPI_execute(sql, false, 0);
		if (ret < 0)
			elog(ERROR, "the SQL of pipeline \"%s\" failed: %s", name, SPI_result_code_string(ret));
		BatchLeaveOwner(&ctx);

		SgBecomeDataOwner(&save, true);
		{
			Oid			types[1] = {TIDARRAYOID};
			Datum		values[1];

			values[0] = PointerGetDatum(construct_array(ctids, (int) n, TIDOID, sizeof(ItemPointerData),
														false, TYPALIGN_SHORT));
			SgExec("DELETE FROM streamguard.dead_letter WHERE ctid = ANY ($1)",
				   1, types, values, NULL, SPI_OK_DELETE);
			if (SPI_processed != n)
				elog(ERROR, "redriven dead letters changed under us");
		}
		SgRestoreUser(&save);
	}
	tuplestore_end(store);
	SPI_finish();
	PG_RETURN_INT64((int64) n);
}

/* names of SgFaultPoint and SgFaultAction values, in enum order */
static const char *const sg_fault_points[] = {
	"none", "mid_batch", "before_commit", "between_commits", "after_commit",
	"after_prepare", "after_local_commit", "after_remote_commit", "mid_copy",
	"before_fence", "remote_end_sent", "read_ahead"
};
static const char *const sg_fault_actions[] = {"kill", "error", "exit", "hold"};

/*
 * inject_fault(pipeline, point, action, times): TEST ONLY.  Arms a
 * deterministic fault in the pipeline's worker; superuser only.
 * "hold" keeps the next `times` arrivals at the point waiting until the
 * fault is disarmed with inject_fault(pipeline, 'none'), for at most 60 s.
 */
Datum
sg_inject_fault(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *point;
	char	   *action;
	int32		times;
	SgFaultPoint fp;
	SgFaultAction fa;
	int			i;
	SgUserSave	save;
	SgPipeRow	row;
	SgPipelineSlot *slot;

	StreamguardCheckLoaded();
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may inject faults")));
	name = SgTextArg(fcinfo, 0, "pipeline name");
	point = SgTextArg(fcinfo, 1, "point");
	action = SgTextArg(fcinfo, 2, "action");
	times = PG_ARGISNULL(3) ? 1 : PG_GETARG_INT32(3);
	for (i = 0; i < lengthof(sg_fault_points); i++)
		if (strcmp(point, sg_fault_points[i]) == 0)
			break;
	if (i == lengthof(sg_fault_points))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault point \"%s\"", point),
				 errhint("Valid points are \"mid_batch\", \"before_commit\", \"between_commits\", \"after_commit\", \"after_prepare\", \"after_local_commit\", \"after_remote_commit\", \"mid_copy\", \"before_fence\", \"remote_end_sent\", \"read_ahead\" and \"none\".")));
	fp = (SgFaultPoint) i;
	for (i = 0; i < lengthof(sg_fault_actions); i++)
		if (strcmp(action, sg_fault_actions[i]) == 0)
			break;
	if (i == lengthof(sg_fault_actions))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fault action \"%s\"", action),
				 errhint("Valid actions are \"kill\", \"error\", \"exit\" and \"hold\".")));
	fa = (SgFaultAction) i;

	/*
	 * Arming locks the pipeline row, so a fault is armed between batches.
	 * Disarming ('none') only reads it: a worker held inside its
	 * batch holds the row, and releasing it must not wait for that batch.
	 */
	SgEnterCatalog(&save);
	if (fp != SG_FAULT_NONE)
		row = PipelineLock(name, save.userid, false);
	else
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};
		bool		isnull;

		SgCheckName("pipeline", name);
		if (SPI_execute_with_args("SELECT id, workers FROM streamguard.pipeline WHERE name OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "pipeline lookup failed");
		if (SPI_processed != 1)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("pipeline \"%s\" does not exist", name)));
		row.id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		row.workers = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgLeaveCatalog(&save);
	/* every worker of the pipeline (the supervisor creates their slots) */
	for (i = 0; i < row.workers; i++)
	{
		slot = PipelineSlot(MyDatabaseId, row.id, i, true);
		PipelineSlotArmFault(slot, fp, fa, times);
	}
	PG_RETURN_VOID();
}
