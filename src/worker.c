/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The pipeline worker and its batch executor.
 *
 * One dynamic background worker per running pipeline, started by the
 * database's maintenance worker (pipeline.c, PipelineSupervise).  It
 * connects as the bootstrap superuser, pins its session settings
 * (SgHardenWorkerSession) and runs the pipeline's SQL as the pipeline's
 * owner in the execution context of batchexec.c.  Catalog work runs as the
 * storage owner.
 *
 * A batch, by guarantee (every transaction begins with the fence: lock
 * the pipeline row, check our epoch and state):
 *	exactly_once	T1: fetch (positions advance), dedup, user SQL,
 *					counters, COMMIT.
 *	at_least_once	T1: fetch (positions stay), dedup, user SQL, counters,
 *					COMMIT; T2: advance positions, COMMIT.  A crash between
 *					redelivers the batch.
 *	at_most_once	T1: fetch (positions advance), counters, COMMIT;
 *					T2: user SQL over the batch kept in memory, COMMIT.
 *					A crash between loses the batch.
 * The batch is visible to the SQL as the ephemeral named relation "batch"
 * (the mechanism of trigger transition tables), so it is never written to
 * a table.
 *
 * Failures: a failed batch is retried with exponential backoff (the
 * pipeline's retry_backoff, doubling up to max_backoff).  Errors that look
 * transient (serialization failures, deadlocks, lock timeouts, cancels) are
 * retried indefinitely; any other error, the batch timeout included, after
 * max_attempts attempts, switches the batch to isolation: each event runs in its
 * own subtransaction and a failing one is handled by the error policy —
 * stop (state failed, nothing skipped), skip (counted) or dead_letter
 * (stored with its error, in the same transaction that moves past it).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "pipeline.h"
#include "remote.h"
#include "streamguard.h"

typedef struct SgPipeDef
{
	int32		id;
	char	   *name;
	char	   *stream;
	char	   *sql;
	SgGuarantee guarantee;
	int			batch_size;
	char	   *policy;
	bool		dedup;
	int64		dedup_window_us;
	Oid			owner;
	char	   *search_path;
	int64		epoch;
	char	   *source_server;	/* remote source, or NULL */
	char	   *remote_stream;
	int			remote_nparts;
	char	   *sink_server;	/* remote sink, or NULL */
	char	   *sink_table;
	bool		two_phase;		/* exactly_once to the sink through 2PC */
	int			batch_timeout_ms;	/* bound on each run of the user's SQL */
	bool		allow_source_append;	/* the SQL may append to the source */
	int			max_attempts;	/* failed attempts before isolation */
	long		retry_backoff_ms;	/* first backoff, doubling ... */
	long		max_backoff_ms; /* ... up to this */
} SgPipeDef;

typedef enum
{
	SG_BATCH_EMPTY,
	SG_BATCH_DONE,
	SG_BATCH_FENCED,
	SG_BATCH_STOPPED			/* error policy stop: pipeline failed */
} SgBatchResult;

static SgPipeDef def;
static SgPipelineSlot *my_slot = NULL;
static TupleDesc event_desc = NULL;
static MemoryContext batch_cxt = NULL;
static SPIPlanPtr user_plan = NULL;
static char *consumer_name = NULL;

/* remote ends */
static SgRemote src_remote;
static SgRemote sink_remote;
static char *copy_sql = NULL;	/* COPY <sink table> (<cols>) FROM STDIN */
static bool need_resolve = true;	/* settle in-doubt work before the next batch */
static char *done_gid = NULL;	/* COMMIT PREPARED done; local record to drop */
static int64 sink_attempts = 0;	/* remote transactions tried by this worker */

static void
sg_forget_done_gid(void)
{
	if (done_gid)
		pfree(done_gid);
	done_gid = NULL;
}

/* events the owner asked to skip (skip_event), loaded at start */
typedef struct SgSkip
{
	int32		partition;
	int64		seq;
} SgSkip;
static SgSkip *skips = NULL;
static int	nskips = 0;

/* per-batch counters of the isolation path */
static int64 batch_skipped = 0;
static int64 batch_dead = 0;
static char *stop_error = NULL;

static void sg_record_error(const char *message, bool fail);

static void
sg_worker_exit(int code, Datum arg)
{
	if (my_slot)
	{
		/* a newer worker may have taken the slot over already */
		SpinLockAcquire(&my_slot->mutex);
		if (my_slot->worker_pid == MyProcPid)
		{
			my_slot->worker_pid = 0;
			my_slot->worker_procno = -1;
		}
		SpinLockRelease(&my_slot->mutex);
	}
}

static void
sg_clean_exit(void)
{
	if (my_slot)
	{
		SpinLockAcquire(&my_slot->mutex);
		my_slot->clean_exit = true;
		SpinLockRelease(&my_slot->mutex);
	}
	proc_exit(0);
}

/* ----------------------------------------------------- fault injection */

/*
 * The "hold" action: wait, interruptibly, until the fault is disarmed
 * (inject_fault(pipeline, 'none')), for at most 60 s.  Lets a test commit
 * a control call inside a window the worker would otherwise cross at once.
 */
static void
sg_fault_hold(SgFaultPoint point)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60000);

	elog(LOG, "streamguard pipeline \"%s\": injected fault, holding", def.name);
	for (;;)
	{
		bool		armed;

		SpinLockAcquire(&my_slot->mutex);
		armed = my_slot->fault_point == point;
		SpinLockRelease(&my_slot->mutex);
		if (!armed || GetCurrentTimestamp() >= until)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	elog(LOG, "streamguard pipeline \"%s\": injected fault, released", def.name);
}

static void
sg_fault(SgFaultPoint point)
{
	SgFaultAction action;
	bool		fire = false;

	SpinLockAcquire(&my_slot->mutex);
	if (my_slot->fault_point == point && my_slot->fault_count > 0)
	{
		fire = true;
		action = my_slot->fault_action;
		/* a hold stays armed until disarmed: it releases its waiters */
		if (--my_slot->fault_count == 0 && action != SG_FAULT_HOLD)
			my_slot->fault_point = SG_FAULT_NONE;
	}
	SpinLockRelease(&my_slot->mutex);
	if (!fire)
		return;
	switch (action)
	{
		case SG_FAULT_KILL:
			elog(LOG, "streamguard pipeline \"%s\": injected fault, killing the worker", def.name);
			kill(MyProcPid, SIGKILL);
			pg_usleep(10 * USECS_PER_SEC);	/* never reached */
			break;
		case SG_FAULT_ERROR:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("injected fault in pipeline \"%s\"", def.name)));
			break;
		case SG_FAULT_EXIT:
			elog(LOG, "streamguard pipeline \"%s\": injected fault, exiting", def.name);
			proc_exit(1);
			break;
		case SG_FAULT_HOLD:
			sg_fault_hold(point);
			break;
	}
}

/* ---------------------------------------------------- transaction steps */

static void
sg_begin(const char *what)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, what);
}

static void
sg_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

static void
sg_abort(void)
{
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * The fence: lock the pipeline row and check that we still own it.
 */
static bool
sg_fence(void)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(def.id)};
	SgUserSave	save;
	bool		isnull;
	bool		ok;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "SELECT epoch, state FROM streamguard.pipeline "
									  "WHERE id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
									  1, types),
						 values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "fence check failed");
	ok = SPI_processed == 1 &&
		DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) == def.epoch &&
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), "running") == 0;
	SgRestoreUser(&save);
	return ok;
}

static void
sg_count_batch(int64 batches, int64 events_in, int64 rows_out)
{
	Oid			types[7] = {INT4OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID};
	Datum		values[7];
	SgUserSave	save;

	values[6] = Int64GetDatum(batches);
	values[0] = Int32GetDatum(def.id);
	values[1] = Int64GetDatum(events_in);
	values[2] = Int64GetDatum(rows_out);
	values[3] = Int64GetDatum(batch_skipped);
	values[4] = Int64GetDatum(batch_dead);
	values[5] = Int64GetDatum(def.epoch);
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "UPDATE streamguard.pipeline SET batches = batches OPERATOR(pg_catalog.+) $7, "
									  "events_in = events_in OPERATOR(pg_catalog.+) $2, "
									  "rows_out = rows_out OPERATOR(pg_catalog.+) $3, "
									  "skipped = skipped OPERATOR(pg_catalog.+) $4, "
									  "dead_letters = dead_letters OPERATOR(pg_catalog.+) $5, "
									  "last_batch_at = pg_catalog.now() "
									  "WHERE id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.=) $6",
									  7, types),
						 values, NULL, false, 0) != SPI_OK_UPDATE || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("pipeline \"%s\" lost ownership of its batch", def.name)));
	SgRestoreUser(&save);
}

/* --------------------------------------------------------- user SQL */

/*
 * Enter the owner's context for the pipeline's SQL (batchexec.c) and
 * return the prepared (and kept) plan.
 */
static SPIPlanPtr
sg_owner_enter(SgOwnerContext *ctx, Tuplestorestate *store, int64 n)
{
	BatchEnterOwner(ctx, def.owner, def.search_path, def.batch_timeout_ms, store, event_desc, n);
	if (user_plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(def.sql, 0, NULL);

		if (plan == NULL)
			elog(ERROR, "could not prepare the SQL of pipeline \"%s\": %s", def.name,
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		user_plan = plan;
	}
	return user_plan;
}

static void
sg_owner_exit(SgOwnerContext *ctx)
{
	BatchLeaveOwner(ctx);
}

/*
 * Run the pipeline's SQL over `store` as the owner.  Returns rows out.
 */
static int64
sg_run_user_sql(Tuplestorestate *store, int64 n)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan = sg_owner_enter(&ctx, store, n);
	int			ret;
	int64		rows;

	ret = SPI_execute_plan(plan, NULL, NULL, false, 0);
	if (ret < 0)
		elog(ERROR, "the SQL of pipeline \"%s\" failed: %s", def.name, SPI_result_code_string(ret));
	rows = (int64) SPI_processed;
	sg_owner_exit(&ctx);
	return rows;
}

static void
sg_dead_letter(TupleTableSlot *ev, ErrorData *edata)
{
	Oid			types[9] = {INT4OID, TEXTOID, INT4OID, INT8OID, TEXTOID, JSONBOID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			types10[10];
	bool		isnull;
	int			i;
	SgUserSave	save;

	values[0] = Int32GetDatum(def.id);
	values[1] = CStringGetTextDatum(def.name);
	for (i = 0; i < 6; i++)
	{
		values[2 + i] = slot_getattr(ev, i + 1, &isnull);
		if (isnull)
			nulls[2 + i] = 'n';
	}
	values[8] = CStringGetTextDatum(edata->message ? edata->message : "unknown error");
	values[9] = CStringGetTextDatum(unpack_sql_state(edata->sqlerrcode));
	memcpy(types10, types, sizeof(types));
	types10[9] = TEXTOID;
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, key, "
									  "payload, dedup_key, appended_at, error, sqlstate) "
									  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
									  10, types10),
						 values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record a dead letter");
	SgRestoreUser(&save);
}

/*
 * Isolation: run the SQL event by event, each in a subtransaction, and
 * apply the error policy to the ones that fail.  Returns rows out, or -1
 * when the policy is stop and an event failed (stop_error is set).
 */
static int64
sg_run_isolated(Tuplestorestate *store)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(event_desc, &TTSOpsMinimalTuple);
	int64		rows = 0;
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Tuplestorestate *one = tuplestore_begin_heap(false, false, work_mem);
		ErrorData  *edata = NULL;

		tuplestore_puttupleslot(one, ev);
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(oldcxt);
		PG_TRY();
		{
			rows += sg_run_user_sql(one, 1);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(oldcxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(oldcxt);
			CurrentResourceOwner = oldowner;
		}
		PG_END_TRY();
		tuplestore_end(one);

		if (edata == NULL)
			continue;
		if (strcmp(def.policy, "stop") == 0)
		{
			bool		isnull;

			stop_error = MemoryContextStrdup(TopMemoryContext,
											 psprintf("event (partition %d, seq %lld): %s",
													  DatumGetInt32(slot_getattr(ev, 1, &isnull)),
													  (long long) DatumGetInt64(slot_getattr(ev, 2, &isnull)),
													  edata->message));
			ExecDropSingleTupleTableSlot(ev);
			return -1;
		}
		if (strcmp(def.policy, "dead_letter") == 0)
		{
			sg_dead_letter(ev, edata);
			batch_dead++;
		}
		else
			batch_skipped++;
		FreeErrorData(edata);
	}
	ExecDropSingleTupleTableSlot(ev);
	return rows;
}

static void
sg_end_store(void *arg)
{
	tuplestore_end((Tuplestorestate *) arg);
}

/*
 * A store for the batch, in batch_cxt (SPI calls leave CurrentMemoryContext
 * in SPI's procedure context, which dies with the transaction).
 * at_most_once reads the batch in a second transaction, so there the
 * store's temp files must not belong to the first one's resource owner
 * either (they would be closed at its commit); they are closed when
 * batch_cxt is reset instead.
 */
static Tuplestorestate *
sg_batch_store(int max_kbytes)
{
	bool		inter_xact = def.guarantee == SG_AT_MOST_ONCE;
	MemoryContext oldcxt = MemoryContextSwitchTo(batch_cxt);
	Tuplestorestate *ts = tuplestore_begin_heap(false, inter_xact, max_kbytes);

	if (inter_xact)
	{
		MemoryContextCallback *cb = palloc(sizeof(MemoryContextCallback));

		cb->func = sg_end_store;
		cb->arg = ts;
		MemoryContextRegisterResetCallback(batch_cxt, cb);
	}
	MemoryContextSwitchTo(oldcxt);
	return ts;
}

/*
 * Pipeline-level dedup: drop events whose dedup_key this pipeline already
 * processed within its window (and repeats inside the batch), recording
 * the new keys in the same transaction.  Returns the filtered store.
 */
static Tuplestorestate *
sg_dedup_filter(Tuplestorestate *store, int *n)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(event_desc, &TTSOpsMinimalTuple);
	Datum	   *keys = palloc(sizeof(Datum) * (*n));
	int			nk = 0,
				i;
	Tuplestorestate *out;
	HTAB	   *fresh;
	HASHCTL		ctl;
	SgUserSave	save;
	bool		isnull;

	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Datum		k = slot_getattr(ev, 5, &isnull);

		if (!isnull)
			keys[nk++] = datumCopy(k, false, -1);
	}
	if (nk == 0)
	{
		ExecDropSingleTupleTableSlot(ev);
		return store;
	}

	ctl.keysize = NAMEDATALEN * 4;
	ctl.entrysize = NAMEDATALEN * 4;
	ctl.hcxt = CurrentMemoryContext;
	fresh = hash_create("streamguard pipeline keys", nk, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	{
		Oid			types[4] = {INT4OID, TEXTARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
		Datum		values[4];
		TimestampTz now = GetCurrentTimestamp();

		values[0] = Int32GetDatum(def.id);
		values[1] = PointerGetDatum(construct_array(keys, nk, TEXTOID, -1, false, TYPALIGN_INT));
		values[2] = TimestampTzGetDatum(now);
		values[3] = TimestampTzGetDatum(now - def.dedup_window_us);
		SgBecomeDataOwner(&save, false);
		if (SPI_execute_plan(SgPlanCached(NULL,
										  "INSERT INTO streamguard.pipeline_dedup AS d (pipeline_id, dedup_key, seen_at) "
										  "SELECT DISTINCT $1, k, $3 FROM pg_catalog.unnest($2) AS k "
										  "ON CONFLICT (pipeline_id, dedup_key) DO UPDATE SET seen_at = excluded.seen_at "
										  "WHERE d.seen_at OPERATOR(pg_catalog.<) $4 RETURNING d.dedup_key",
										  4, types),
							 values, NULL, false, 0) != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "pipeline dedup failed");
		for (i = 0; i < (int) SPI_processed; i++)
		{
			char		hk[NAMEDATALEN * 4];

			memset(hk, 0, sizeof(hk));
			strlcpy(hk, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1), sizeof(hk));
			hash_search(fresh, hk, HASH_ENTER, NULL);
		}
		SgRestoreUser(&save);
	}

	/* keep events without a key, and the first event of each fresh key */
	out = sg_batch_store(work_mem);
	*n = 0;
	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		Datum		k = slot_getattr(ev, 5, &isnull);
		char		hk[NAMEDATALEN * 4];

		if (!isnull)
		{
			bool		found;

			memset(hk, 0, sizeof(hk));
			strlcpy(hk, TextDatumGetCString(k), sizeof(hk));
			if (hash_search(fresh, hk, HASH_FIND, NULL) == NULL)
				continue;		/* seen before */
			hash_search(fresh, hk, HASH_REMOVE, &found);	/* later repeats drop */
		}
		tuplestore_puttupleslot(out, ev);
		(*n)++;
	}
	ExecDropSingleTupleTableSlot(ev);
	return out;
}

/*
 * Drop the events named by skip_event, counting them as skipped and
 * forgetting the requests in the batch's transaction (one statement per
 * batch, however many of them it met).
 */
static Tuplestorestate *
sg_skip_filter(Tuplestorestate *store, int *n)
{
	TupleTableSlot *ev = MakeSingleTupleTableSlot(event_desc, &TTSOpsMinimalTuple);
	Tuplestorestate *out = sg_batch_store(work_mem);
	Datum	   *parts = palloc(sizeof(Datum) * nskips);
	Datum	   *seqs = palloc(sizeof(Datum) * nskips);
	int			nmet = 0;
	bool		isnull;
	int			i;

	*n = 0;
	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, ev))
	{
		int32		p = DatumGetInt32(slot_getattr(ev, 1, &isnull));
		int64		seq = DatumGetInt64(slot_getattr(ev, 2, &isnull));

		for (i = 0; i < nskips; i++)
			if (skips[i].partition == p && skips[i].seq == seq)
				break;
		if (i < nskips && nmet < nskips)
		{
			parts[nmet] = Int32GetDatum(p);
			seqs[nmet++] = Int64GetDatum(seq);
			continue;
		}
		tuplestore_puttupleslot(out, ev);
		(*n)++;
	}
	ExecDropSingleTupleTableSlot(ev);

	if (nmet > 0)
	{
		Oid			types[3] = {INT4OID, INT4ARRAYOID, INT8ARRAYOID};
		Datum		values[3];
		SgUserSave	save;

		values[0] = Int32GetDatum(def.id);
		values[1] = PointerGetDatum(construct_array(parts, nmet, INT4OID, 4, true, TYPALIGN_INT));
		values[2] = PointerGetDatum(construct_array(seqs, nmet, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		SgBecomeDataOwner(&save, false);
		if (SPI_execute_with_args("DELETE FROM streamguard.pipeline_skip s "
								  "USING ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS m(p, q) "
								  "WHERE s.pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND s.partition OPERATOR(pg_catalog.=) m.p "
								  "AND s.seq OPERATOR(pg_catalog.=) m.q",
								  3, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not forget the skipped events");
		SgRestoreUser(&save);
		batch_skipped += nmet;
	}
	return out;
}

/* ------------------------------------------------------------ remotes */

static void
sg_remote_status(int side, SgRemote *r)
{
	SgRemoteStatus *st = &my_slot->remote[side];

	SpinLockAcquire(&my_slot->mutex);
	strlcpy(st->server, r->server_name, sizeof(st->server));
	st->connected = RemoteConnected(r);
	st->rtt_us = r->rtt_us;
	strlcpy(st->last_error, r->last_error, sizeof(st->last_error));
	SpinLockRelease(&my_slot->mutex);
}

static SgRemote *
sg_remote(int side)
{
	SgRemote   *r = side == 0 ? &src_remote : &sink_remote;
	const char *server = side == 0 ? def.source_server : def.sink_server;

	if (!RemoteConnected(r))
	{
		PG_TRY();
		{
			/* as the owner's user mapping, with the password rule */
			RemoteConnect(r, server, def.owner);
			RemoteExecOk(r, "SET datestyle = ISO");
			RemoteExecOk(r, "SET intervalstyle = postgres");
			RemoteExecOk(r, "SET extra_float_digits = 3");
		}
		PG_CATCH();
		{
			strlcpy(r->server_name, server, sizeof(r->server_name));
			if (r->last_error[0] == '\0')
				strlcpy(r->last_error, "connection failed", sizeof(r->last_error));
			sg_remote_status(side, r);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	sg_remote_status(side, r);
	return r;
}


static char *
sg_offsets_key(void)
{
	return PipelineSinkKey(def.id);
}

/*
 * Settle what a crash or error may have left between the two databases.
 * two_phase: a prepared remote transaction whose batch committed locally
 * (recorded in remote_prepared) is committed, any other one of ours is
 * rolled back.  offsets: positions move up to what the sink recorded in
 * the same remote transaction as the rows.  Runs fenced, in a local
 * transaction, before the next batch.  Returns false when the sink lost a
 * batch committed here (stop_error says which).
 */
static bool
sg_resolve(SgStreamMeta *meta)
{
	SgRemote   *r = sg_remote(1);
	SgUserSave	save;
	char	   *lost = NULL;

	if (def.two_phase)
		lost = PipelineResolveInDoubt(r, def.id, def.name);
	else
	{
		const char *params[1];
		PGresult   *res;
		int64	   *pos = palloc(sizeof(int64) * meta->nparts);
		int			i;

		params[0] = sg_offsets_key();
		res = RemoteExec(r, "SELECT partition, position FROM public.streamguard_sink_offsets "
						 "WHERE pipeline = $1", 1, params);
		for (i = 0; i < meta->nparts; i++)
			pos[i] = -1;
		for (i = 0; i < PQntuples(res); i++)
		{
			int			p = atoi(PQgetvalue(res, i, 0));

			if (p >= 0 && p < meta->nparts)
				pos[p] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
		}
		PQclear(res);
		SgBecomeDataOwner(&save, false);
		ConsumerAdvance(meta, consumer_name, pos);
		SgRestoreUser(&save);
	}
	sg_forget_done_gid();
	sg_remote_status(1, r);
	if (lost)
		stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("remote server \"%s\" lost the committed batch of pipeline \"%s\" "
												  "(prepared transaction %s): it is neither prepared nor marked committed there; "
												  "was the server restored or failed over?  Resume to accept the loss, "
												  "or reset_pipeline to replay before resuming",
												  def.sink_server, def.name, lost));
	return lost == NULL;
}

/* COPY text format of one value */
static void
sg_copy_escape(StringInfo buf, const char *v)
{
	for (; *v; v++)
	{
		switch (*v)
		{
			case '\\':
				appendStringInfoString(buf, "\\\\");
				break;
			case '\t':
				appendStringInfoString(buf, "\\t");
				break;
			case '\n':
				appendStringInfoString(buf, "\\n");
				break;
			case '\r':
				appendStringInfoString(buf, "\\r");
				break;
			default:
				appendStringInfoChar(buf, *v);
		}
	}
}

/*
 * Write the batch's output rows to the sink, inside a remote transaction
 * that is prepared (two_phase), or committed together with the positions
 * (offsets), or simply committed (the weaker guarantees).  Returns the
 * global transaction id when one was prepared.
 */
static char *
sg_sink_write(StringInfo data, int64 *first, int64 *last, int nparts)
{
	SgRemote   *r = sg_remote(1);
	char	   *gid = NULL;

	RemoteExecOk(r, "BEGIN");
	if (data->len > 0)
		RemoteCopyIn(r, copy_sql, data->data, data->len);
	sg_fault(SG_FAULT_MID_COPY);
	/* the batch's events must not be lost here once the remote has them */
	HorizonMakeDurable();
	if (def.guarantee == SG_EXACTLY_ONCE && def.two_phase)
	{
		/* one id per attempt: a retry never collides with a delayed PREPARE */
		gid = psprintf("%s%lld:%lld", PipelineGidPrefix(def.id), (long long) def.epoch,
					   (long long) ++sink_attempts);
		PipelineSinkMarker(r, def.id, gid);
		RemoteExecOk(r, psprintf("PREPARE TRANSACTION %s", RemoteLiteral(r, gid)));
		sg_fault(SG_FAULT_AFTER_PREPARE);
	}
	else
	{
		if (def.guarantee == SG_EXACTLY_ONCE)
		{
			/*
			 * The positions go with the rows, and only forward from where
			 * this batch began: if an earlier attempt of the same batch
			 * (a session we gave up on) committed after all, the offsets
			 * are already past `first`, nothing is updated, and this attempt
			 * rolls back; the positions are then taken from the sink.
			 */
			StringInfoData sql;
			int			p,
						moved = 0;
			char	   *key = RemoteLiteral(r, sg_offsets_key());
			PGresult   *res;
			StringInfoData firsts;

			initStringInfo(&sql);
			initStringInfo(&firsts);
			appendStringInfoString(&sql, "INSERT INTO public.streamguard_sink_offsets AS o (pipeline, partition, position) "
								   "VALUES ");
			for (p = 0; p < nparts; p++)
			{
				if (first[p] <= 0)
					continue;
				appendStringInfo(&sql, "%s(%s, %d, %lld)", moved ? ", " : "",
								 key, p, (long long) last[p]);
				appendStringInfo(&firsts, " WHEN %d THEN %lld", p, (long long) first[p]);
				moved++;
			}
			appendStringInfo(&sql, " ON CONFLICT (pipeline, partition) DO UPDATE SET position = excluded.position "
							 "WHERE o.position < CASE excluded.partition%s END RETURNING 1", firsts.data);
			if (moved > 0)
			{
				res = RemoteExec(r, sql.data, 0, NULL);
				if (PQntuples(res) != moved)
				{
					PQclear(res);
					RemoteExecOk(r, "ROLLBACK");
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("the offsets of pipeline \"%s\" on server \"%s\" moved concurrently",
									def.name, def.sink_server),
							 errdetail("An earlier attempt of this batch committed on the sink; positions are taken from there.")));
				}
				PQclear(res);
			}
		}
		RemoteExecOk(r, "COMMIT");
		sg_fault(SG_FAULT_AFTER_REMOTE_COMMIT);
	}
	sg_remote_status(1, r);
	return gid;
}

/* store a remote source position (start_from 'end' settled) */
static void
sg_set_remote_position(int partition, int64 position)
{
	Oid			types[3] = {INT4OID, INT4OID, INT8OID};
	Datum		values[3] = {Int32GetDatum(def.id), Int32GetDatum(partition), Int64GetDatum(position)};
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("UPDATE streamguard.remote_position SET position = $3, updated_at = pg_catalog.now() "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "remote position update failed");
	SgRestoreUser(&save);
}

/*
 * Read a batch from a stream on another streamguard server, after the
 * positions kept here (locked for this transaction).
 */
static int
sg_remote_fetch(Tuplestorestate *store, int64 *first, int64 *last)
{
	SgRemote   *r = sg_remote(0);
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(def.id)};
	int			nparts = def.remote_nparts;
	int64	   *pos = palloc0(sizeof(int64) * nparts);
	SgUserSave	save;
	uint64		i;
	int			remaining = def.batch_size;
	int			k;
	static uint32 rotor = 0;

	SgBecomeDataOwner(&save, false);
	if (SPI_execute_with_args("SELECT partition, position FROM streamguard.remote_position "
							  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 FOR UPDATE",
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "remote position lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (p >= 0 && p < nparts)
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	SgRestoreUser(&save);

	for (k = 0; k < nparts; k++)
	{
		first[k] = 0;
		last[k] = pos[k];
	}
	for (k = 0; k < nparts; k++)
	{
		const char *params[2];
		PGresult   *res;
		int			p = k;

		if (pos[p] < 0)
		{
			/*
			 * start_from 'end', settled once: after every seq below the
			 * remote's readable horizon (a late commit below the last seq is
			 * still read), stored now, with or without events to read.
			 */
			params[0] = def.remote_stream;
			params[1] = psprintf("%d", p);
			res = RemoteExec(r, "SELECT readable_horizon OPERATOR(pg_catalog.-) 1 "
							 "FROM streamguard.stream_partitions WHERE stream OPERATOR(pg_catalog.=) $1 "
							 "AND partition OPERATOR(pg_catalog.=) $2::pg_catalog.int4", 2, params);
			if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
			{
				PQclear(res);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("could not find the end of partition %d of stream \"%s\" on server \"%s\"",
								p, def.remote_stream, def.source_server)));
			}
			pos[p] = Max(strtoll(PQgetvalue(res, 0, 0), NULL, 10), 0);
			PQclear(res);
			last[p] = pos[p];
			sg_set_remote_position(p, pos[p]);
		}
	}
	for (k = 0; k < nparts && remaining > 0; k++)
	{
		int			p = (int) ((rotor + k) % (uint32) nparts);
		const char *params[4];
		PGresult   *res;
		int			row;

		params[0] = def.remote_stream;
		params[1] = psprintf("%d", p);
		params[2] = psprintf("%lld", (long long) pos[p]);
		params[3] = psprintf("%d", remaining);
		res = RemoteExec(r, "SELECT partition, seq, key, payload, dedup_key, appended_at "
						 "FROM streamguard.read($1, $2::int, $3::bigint, $4::int)", 4, params);
		for (row = 0; row < PQntuples(res); row++)
		{
			Datum		v[6];
			bool		n[6];
			int			c;

			for (c = 0; c < 6; c++)
				n[c] = PQgetisnull(res, row, c);
			v[0] = Int32GetDatum(atoi(PQgetvalue(res, row, 0)));
			v[1] = Int64GetDatum(strtoll(PQgetvalue(res, row, 1), NULL, 10));
			v[2] = n[2] ? (Datum) 0 : CStringGetTextDatum(PQgetvalue(res, row, 2));
			v[3] = DirectFunctionCall1(jsonb_in, CStringGetDatum(PQgetvalue(res, row, 3)));
			v[4] = n[4] ? (Datum) 0 : CStringGetTextDatum(PQgetvalue(res, row, 4));
			v[5] = DirectFunctionCall3(timestamptz_in, CStringGetDatum(PQgetvalue(res, row, 5)),
									   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
			tuplestore_putvalues(store, event_desc, v, n);
			if (first[p] == 0)
				first[p] = DatumGetInt64(v[1]);
			last[p] = DatumGetInt64(v[1]);
			remaining--;
		}
		PQclear(res);
	}
	rotor++;
	sg_remote_status(0, r);
	return def.batch_size - remaining;
}

/* move the positions forward: the local consumer, or the remote positions */
static void
sg_advance(SgStreamMeta *meta, int64 *last, int nparts)
{
	SgUserSave	save;

	SgBecomeDataOwner(&save, false);
	if (def.source_server)
	{
		Oid			types[2] = {INT4OID, INT8ARRAYOID};
		Datum		values[2];
		Datum	   *elems = palloc(sizeof(Datum) * nparts);
		int			p;

		for (p = 0; p < nparts; p++)
			elems[p] = Int64GetDatum(last[p]);
		values[0] = Int32GetDatum(def.id);
		values[1] = PointerGetDatum(construct_array(elems, nparts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		if (SPI_execute_with_args("UPDATE streamguard.remote_position "
								  "SET position = ($2)[partition OPERATOR(pg_catalog.+) 1], "
								  "updated_at = pg_catalog.now() "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 "
								  "AND ($2)[partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>) position",
								  2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "remote position update failed");
	}
	else
		ConsumerAdvance(meta, consumer_name, last);
	SgRestoreUser(&save);
}

/*
 * Run the pipeline's SELECT over the batch as the owner and render its
 * rows in COPY text format for the sink.
 */
static StringInfo
sg_run_user_select(Tuplestorestate *store, int64 n, int64 *rows)
{
	SgOwnerContext ctx;
	SPIPlanPtr	plan;
	int			ret;
	uint64		i;
	int			c;
	StringInfo	buf = makeStringInfo();

	plan = sg_owner_enter(&ctx, store, n);
	ret = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "the SQL of pipeline \"%s\" must return rows: %s", def.name, SPI_result_code_string(ret));
	for (i = 0; i < SPI_processed; i++)
	{
		for (c = 1; c <= SPI_tuptable->tupdesc->natts; c++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, c);

			if (c > 1)
				appendStringInfoChar(buf, '\t');
			if (v == NULL)
				appendStringInfoString(buf, "\\N");
			else
				sg_copy_escape(buf, v);
		}
		appendStringInfoChar(buf, '\n');
	}
	*rows = (int64) SPI_processed;
	sg_owner_exit(&ctx);
	return buf;
}

/* ---------------------------------------------------------- the batch */

static SgStreamMeta *
sg_source(void)
{
	Oid			save_user;
	int			save_sec;
	SgStreamMeta *meta;

	/* the owner's privilege on the source is checked every batch */
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(def.owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	meta = StreamLookup(def.stream, SG_PRIV_READ);
	SetUserIdAndSecContext(save_user, save_sec);
	HorizonEnsureSeqReady(meta->ref, meta->stream_id);
	return meta;
}

/*
 * The batch's first and last seq over all partitions, and how many
 * partitions it read.
 */
static void
sg_seq_range(int64 *first, int64 *last, int nparts, int64 *lo, int64 *hi, int32 *nread)
{
	int			p;

	*lo = *hi = 0;
	*nread = 0;
	for (p = 0; p < nparts; p++)
	{
		if (first[p] <= 0)
			continue;
		(*nread)++;
		if (*lo == 0 || first[p] < *lo)
			*lo = first[p];
		if (last[p] > *hi)
			*hi = last[p];
	}
}

/*
 * The durable checkpoint log: one row per batch, written in the transaction
 * that commits the batch's effects (so it survives exactly what the batch
 * survives).  Its id is the pipeline's batch counter, just incremented in
 * the same transaction.  Returns the id.
 */
static int64
sg_log_batch(int events_in, int64 rows_out, int64 *first, int64 *last, int nparts,
			 TimestampTz t0, TimestampTz t1, TimestampTz t2)
{
	Oid			types[10] = {INT4OID, INT8OID, INT4OID, INT8OID, INT4OID, INT8OID, INT8OID,
	FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID};
	Datum		values[10];
	SgUserSave	save;
	int64		lo,
				hi,
				id;
	int32		nread;
	bool		isnull;

	sg_seq_range(first, last, nparts, &lo, &hi, &nread);
	values[0] = Int32GetDatum(def.id);
	values[1] = Int64GetDatum(def.epoch);
	values[2] = Int32GetDatum(events_in);
	values[3] = Int64GetDatum(rows_out);
	values[4] = Int32GetDatum(nread);
	values[5] = Int64GetDatum(lo);
	values[6] = Int64GetDatum(hi);
	values[7] = Float8GetDatum((t1 - t0) / 1000.0);
	values[8] = Float8GetDatum((t2 - t1) / 1000.0);
	values[9] = TimestampTzGetDatum(GetCurrentTimestamp());
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "INSERT INTO streamguard.pipeline_batch (pipeline_id, batch_id, epoch, "
									  "events_in, rows_out, partitions, first_seq, last_seq, fetch_ms, process_ms, "
									  "committed_at) "
									  "SELECT p.id, p.batches, $2, $3, $4, $5, $6, $7, $8, $9, $10 "
									  "FROM streamguard.pipeline p WHERE p.id OPERATOR(pg_catalog.=) $1 "
									  "RETURNING batch_id",
									  10, types),
						 values, NULL, false, 0) != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "could not record the batch in the checkpoint log");
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SgRestoreUser(&save);
	return id;
}

static void
sg_record(int64 batch_id, int64 epoch, int events_in, int64 rows_out, int64 *first, int64 *last,
		  int nparts, TimestampTz t0, TimestampTz t1, TimestampTz t2, TimestampTz t3)
{
	SgBatchRecord r;
	double		secs;

	memset(&r, 0, sizeof(r));
	r.batch_id = batch_id;
	r.epoch = epoch;
	r.committed_at = t3;
	r.events_in = events_in;
	r.rows_out = rows_out;
	sg_seq_range(first, last, nparts, &r.first_seq, &r.last_seq, &r.partitions);
	r.fetch_us = (int32) (t1 - t0);
	r.process_us = (int32) (t2 - t1);
	r.commit_us = (int32) (t3 - t2);

	SpinLockAcquire(&my_slot->mutex);
	secs = my_slot->last_batch_end > 0 ? (t3 - my_slot->last_batch_end) / 1e6 : 0;
	if (secs > 0)
	{
		double		rate = events_in / secs;
		double		w = Min(1.0, secs / 5.0);	/* ~5 s averaging */

		my_slot->events_per_sec = my_slot->events_per_sec * (1 - w) + rate * w;
	}
	my_slot->last_batch_end = t3;
	my_slot->history[my_slot->nhistory % SG_BATCH_HISTORY] = r;
	my_slot->nhistory++;
	PipelineCountDuration(my_slot, (t3 - t0) / 1e6);
	my_slot->failures = 0;
	SpinLockRelease(&my_slot->mutex);
}

static SgBatchResult
sg_batch(bool isolate)
{
	SgStreamMeta *meta = NULL;
	Tuplestorestate *store;
	int			fetched,
				n;
	int64	   *first,
			   *last;
	int64		rows_out = 0;
	TimestampTz t0,
				t1,
				t2,
				t3;
	SgUserSave	save;
	MemoryContext oldcxt;
	int			nparts;
	StringInfo	sink_data = NULL;
	char	   *gid = NULL;
	bool		advance_in_fetch;
	int64		batch_id;

	MemoryContextReset(batch_cxt);
	batch_skipped = batch_dead = 0;

	/* a control call is waiting for the pipeline row: step aside */
	if (my_slot->fence_requested)
		return SG_BATCH_FENCED;
	sg_fault(SG_FAULT_BEFORE_FENCE);

	sg_begin("fetch");
	t0 = GetCurrentTimestamp();
	if (!sg_fence())
	{
		sg_abort();
		return SG_BATCH_FENCED;
	}
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(def.owner)))
	{
		/* dropped from another database, where we could not refuse it */
		sg_abort();
		stop_error = MemoryContextStrdup(TopMemoryContext,
										 psprintf("the owner of the pipeline (role %u) no longer exists", def.owner));
		return SG_BATCH_STOPPED;
	}
	if (!def.source_server)
	{
		if (def.stream == NULL)
		{
			/* the source stream is gone: nothing can run any more */
			sg_abort();
			stop_error = MemoryContextStrdup(TopMemoryContext, "the source stream no longer exists");
			return SG_BATCH_STOPPED;
		}
		meta = sg_source();
		nparts = meta->nparts;
	}
	else
		nparts = def.remote_nparts;

	/* what a crash may have left between this database and the sink */
	if (def.sink_server && need_resolve)
	{
		if (!sg_resolve(meta))
		{
			/* failed with the records dropped, in one transaction */
			sg_record_error(stop_error, true);
			sg_commit();
			return SG_BATCH_STOPPED;
		}
		need_resolve = false;
	}
	if (done_gid)
	{
		Oid			types[2] = {INT4OID, TEXTOID};
		Datum		values[2] = {Int32GetDatum(def.id), CStringGetTextDatum(done_gid)};

		SgBecomeDataOwner(&save, false);
		if (SPI_execute_with_args("DELETE FROM streamguard.remote_prepared "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1 AND gid OPERATOR(pg_catalog.=) $2",
								  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not forget a committed remote transaction");
		SgRestoreUser(&save);
		sg_forget_done_gid();
	}

	oldcxt = MemoryContextSwitchTo(batch_cxt);
	store = sg_batch_store(Max(work_mem, 64 * 1024));
	first = palloc(sizeof(int64) * nparts);
	last = palloc(sizeof(int64) * nparts);
	MemoryContextSwitchTo(oldcxt);

	/*
	 * Positions move inside this first transaction except for
	 * at_least_once, which moves them only after the sink committed.
	 */
	advance_in_fetch = def.guarantee != SG_AT_LEAST_ONCE;
	if (def.source_server)
	{
		fetched = sg_remote_fetch(store, first, last);
		if (fetched > 0 && advance_in_fetch)
			sg_advance(NULL, last, nparts);
	}
	else
	{
		SgBecomeDataOwner(&save, false);
		fetched = ConsumerFetch(meta, consumer_name, def.batch_size, store, event_desc,
								false, advance_in_fetch, first, last);
		SgRestoreUser(&save);
	}
	if (fetched == 0)
	{
		sg_commit();
		return SG_BATCH_EMPTY;
	}
	n = fetched;
	if (nskips > 0)
	{
		oldcxt = MemoryContextSwitchTo(batch_cxt);
		store = sg_skip_filter(store, &n);
		MemoryContextSwitchTo(oldcxt);
	}
	if (def.dedup)
	{
		oldcxt = MemoryContextSwitchTo(batch_cxt);
		store = sg_dedup_filter(store, &n);
		MemoryContextSwitchTo(oldcxt);
	}
	t1 = GetCurrentTimestamp();
	sg_fault(SG_FAULT_MID_BATCH);

	if (def.guarantee == SG_AT_MOST_ONCE)
	{
		/* positions first */
		sg_count_batch(1, fetched, 0);
		sg_commit();
		sg_fault(SG_FAULT_BETWEEN_COMMITS);
		sg_begin("process");
		if (!sg_fence())
		{
			sg_abort();
			return SG_BATCH_FENCED;		/* the batch is lost: at most once */
		}
	}

	pgstat_report_activity(STATE_RUNNING, "process");
	if (def.sink_server)
	{
		oldcxt = MemoryContextSwitchTo(batch_cxt);
		sink_data = sg_run_user_select(store, n, &rows_out);
		MemoryContextSwitchTo(oldcxt);
		gid = sg_sink_write(sink_data, first, last, nparts);
		if (gid)
		{
			Oid			types[3] = {INT4OID, TEXTOID, TEXTOID};
			Datum		values[3] = {Int32GetDatum(def.id), CStringGetTextDatum(gid),
			CStringGetTextDatum(def.sink_server)};

			/* the decision: committed with this transaction, or never */
			SgBecomeDataOwner(&save, false);
			if (SPI_execute_with_args("INSERT INTO streamguard.remote_prepared (pipeline_id, gid, server) "
									  "VALUES ($1, $2, $3)", 3, types, values, NULL, false, 0) != SPI_OK_INSERT)
				elog(ERROR, "could not record the prepared remote transaction");
			SgRestoreUser(&save);
		}
	}
	else if (n > 0)
		rows_out = isolate ? sg_run_isolated(store) : sg_run_user_sql(store, n);
	if (rows_out < 0)
	{
		sg_abort();
		return SG_BATCH_STOPPED;
	}
	t2 = GetCurrentTimestamp();

	if (def.guarantee != SG_AT_MOST_ONCE)
		sg_count_batch(1, fetched, rows_out);
	else
		sg_count_batch(0, 0, rows_out);	/* the batch counted with the positions */
	batch_id = sg_log_batch(fetched, rows_out, first, last, nparts, t0, t1, t2);
	sg_fault(SG_FAULT_BEFORE_COMMIT);
	sg_commit();

	if (gid)
	{
		SgRemote   *r;

		sg_fault(SG_FAULT_AFTER_LOCAL_COMMIT);
		sg_begin("commit prepared");
		r = sg_remote(1);
		HorizonMakeDurable();	/* the decision, whatever synchronous_commit */
		RemoteExecOk(r, psprintf("COMMIT PREPARED %s", RemoteLiteral(r, gid)));
		done_gid = MemoryContextStrdup(TopMemoryContext, gid);
		sg_remote_status(1, r);
		sg_commit();
	}

	if (def.guarantee == SG_AT_LEAST_ONCE)
	{
		/* positions after the sink committed */
		sg_fault(SG_FAULT_BETWEEN_COMMITS);
		sg_begin("advance");
		if (!sg_fence())
		{
			sg_abort();
			return SG_BATCH_FENCED;		/* redelivered later: at least once */
		}
		sg_advance(meta, last, nparts);
		sg_commit();
	}
	t3 = GetCurrentTimestamp();
	sg_fault(SG_FAULT_AFTER_COMMIT);
	sg_record(batch_id, def.epoch, fetched, rows_out, first, last, nparts, t0, t1, t2, t3);
	return SG_BATCH_DONE;
}

/* ------------------------------------------------------ error records */

static bool
sg_transient(ErrorData *edata)
{
	int			sqlerrcode = edata->sqlerrcode;

	/*
	 * The batch timeout (the only statement timeout a worker arms) is the
	 * SQL's own doing, not contention: it counts as a failed attempt, so a
	 * batch that never finishes ends up isolated and under the error policy.
	 */
	if (sqlerrcode == ERRCODE_QUERY_CANCELED && edata->message_id &&
		strcmp(edata->message_id, "canceling statement due to statement timeout") == 0)
		return false;
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_TRANSACTION_ROLLBACK ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION ||
		sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
		sqlerrcode == ERRCODE_QUERY_CANCELED ||
		sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
		sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
}

static void
sg_note_error(const char *message, bool fail)
{
	sg_begin("error");
	sg_record_error(message, fail);
	sg_commit();
}

/* the error (and with fail, the failed state) in the current transaction */
static void
sg_record_error(const char *message, bool fail)
{
	Oid			types[4] = {INT4OID, TEXTOID, INT8OID, BOOLOID};
	Datum		values[4];
	SgUserSave	save;

	values[0] = Int32GetDatum(def.id);
	values[1] = CStringGetTextDatum(message);
	values[2] = Int64GetDatum(def.epoch);
	values[3] = BoolGetDatum(fail);
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("UPDATE streamguard.pipeline SET last_error = $2, last_error_at = pg_catalog.now(), "
							  "state = CASE WHEN $4 THEN 'failed' ELSE state END, "
							  "epoch = CASE WHEN $4 THEN epoch OPERATOR(pg_catalog.+) 1 ELSE epoch END "
							  "WHERE id OPERATOR(pg_catalog.=) $1 AND epoch OPERATOR(pg_catalog.=) $3",
							  4, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the pipeline error");
	SgRestoreUser(&save);
}

/* --------------------------------------------------------------- main */

static bool
sg_load_definition(void)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(def.id)};
	SgUserSave	save;
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;
	MemoryContext old;
	bool		ok = true;

	sg_begin("start");
	SgBecomeDataOwner(&save, true);
	if (SPI_execute_with_args("UPDATE streamguard.pipeline p SET epoch = p.epoch OPERATOR(pg_catalog.+) 1, "
							  "restarts = p.restarts OPERATOR(pg_catalog.+) CASE WHEN p.started_once THEN 1 ELSE 0 END, "
							  "started_once = true "
							  "WHERE p.id OPERATOR(pg_catalog.=) $1 AND p.state OPERATOR(pg_catalog.=) 'running' "
							  "RETURNING p.name, (SELECT s.name FROM streamguard.stream s "
							  "WHERE s.id OPERATOR(pg_catalog.=) p.stream_id), "
							  "p.sql, p.guarantee, p.batch_size, p.error_policy, p.dedup, "
							  "pg_catalog.date_part('epoch', p.dedup_window)::float8, p.owner, p.search_path, "
							  "p.epoch, p.stream_id, "
							  "p.source_server, p.remote_stream, p.sink_server, p.sink_table, p.sink_mode, "
							  "(SELECT pg_catalog.count(*) FROM streamguard.remote_position rp "
							  "WHERE rp.pipeline_id OPERATOR(pg_catalog.=) p.id)::int, "
							  "(pg_catalog.date_part('epoch', p.batch_timeout) OPERATOR(pg_catalog.*) 1000)::float8, "
							  "p.allow_source_append, p.max_attempts, "
							  "(pg_catalog.date_part('epoch', p.retry_backoff) OPERATOR(pg_catalog.*) 1000)::float8, "
							  "(pg_catalog.date_part('epoch', p.max_backoff) OPERATOR(pg_catalog.*) 1000)::float8",
							  1, types, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not load pipeline %d", def.id);
	if (SPI_processed != 1)
		ok = false;
	else
	{
		char	   *g;

		t = SPI_tuptable->vals[0];
		d = SPI_tuptable->tupdesc;
		old = MemoryContextSwitchTo(TopMemoryContext);
		def.name = pstrdup(SPI_getvalue(t, d, 1));
		def.stream = SPI_getvalue(t, d, 2) ? pstrdup(SPI_getvalue(t, d, 2)) : NULL;
		def.sql = pstrdup(SPI_getvalue(t, d, 3));
		g = SPI_getvalue(t, d, 4);
		def.guarantee = strcmp(g, "at_least_once") == 0 ? SG_AT_LEAST_ONCE :
			strcmp(g, "at_most_once") == 0 ? SG_AT_MOST_ONCE : SG_EXACTLY_ONCE;
		def.batch_size = DatumGetInt32(SPI_getbinval(t, d, 5, &isnull));
		def.policy = pstrdup(SPI_getvalue(t, d, 6));
		def.dedup = DatumGetBool(SPI_getbinval(t, d, 7, &isnull));
		def.dedup_window_us = (int64) (DatumGetFloat8(SPI_getbinval(t, d, 8, &isnull)) * 1e6);
		def.owner = DatumGetObjectId(SPI_getbinval(t, d, 9, &isnull));
		def.search_path = pstrdup(SPI_getvalue(t, d, 10));
		def.epoch = DatumGetInt64(SPI_getbinval(t, d, 11, &isnull));
		my_slot->stream_id = DatumGetInt32(SPI_getbinval(t, d, 12, &isnull));
		consumer_name = psprintf("pipeline:%s", def.name);
		if (SPI_getvalue(t, d, 13))
		{
			def.source_server = pstrdup(SPI_getvalue(t, d, 13));
			def.remote_stream = pstrdup(SPI_getvalue(t, d, 14));
			def.remote_nparts = DatumGetInt32(SPI_getbinval(t, d, 18, &isnull));
		}
		if (SPI_getvalue(t, d, 15))
		{
			def.sink_server = pstrdup(SPI_getvalue(t, d, 15));
			def.sink_table = pstrdup(SPI_getvalue(t, d, 16));
			def.two_phase = strcmp(SPI_getvalue(t, d, 17), "two_phase") == 0;
		}
		def.batch_timeout_ms = (int) Min(DatumGetFloat8(SPI_getbinval(t, d, 19, &isnull)), (double) INT_MAX);
		def.allow_source_append = DatumGetBool(SPI_getbinval(t, d, 20, &isnull));
		def.max_attempts = DatumGetInt32(SPI_getbinval(t, d, 21, &isnull));
		def.retry_backoff_ms = (long) DatumGetFloat8(SPI_getbinval(t, d, 22, &isnull));
		def.max_backoff_ms = (long) DatumGetFloat8(SPI_getbinval(t, d, 23, &isnull));
		SgRunningPipelineId = def.id;
		SgRunningSourceStream = my_slot->stream_id;
		SgRunningAllowSourceAppend = def.allow_source_append;
		event_desc = SgEventTupleDesc();
		MemoryContextSwitchTo(old);
	}
	if (ok)
	{
		uint64		i;

		if (SPI_execute_with_args("SELECT partition, seq FROM streamguard.pipeline_skip "
								  "WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not load the events to skip");
		nskips = (int) SPI_processed;
		skips = MemoryContextAlloc(TopMemoryContext, sizeof(SgSkip) * Max(nskips, 1));
		for (i = 0; i < SPI_processed; i++)
		{
			skips[i].partition = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
			skips[i].seq = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	SgRestoreUser(&save);
	sg_commit();
	if (ok && def.sink_server)
	{
		/* the sink's columns are the SELECT's output columns */
		sg_begin("start");
		{
			char	   *cols = PipelineOutputColumns(def.sql);
			MemoryContext old;

			if (cols == NULL)
				elog(ERROR, "the SQL of pipeline \"%s\" must be a single SELECT", def.name);
			old = MemoryContextSwitchTo(TopMemoryContext);
			copy_sql = psprintf("COPY %s (%s) FROM STDIN", def.sink_table, cols);
			MemoryContextSwitchTo(old);
		}
		sg_commit();
	}
	return ok;
}

void
PipelineWorkerMain(Datum arg)
{
	Oid			dbid;
	int			attempts = 0;
	bool		isolate = false;

	memset(&def, 0, sizeof(def));
	def.id = DatumGetInt32(arg);
	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SgHardenWorkerSession();
	pgstat_report_appname("streamguard pipeline");
	/* our commits are durable whatever server, database, role or SQL say */
	SetConfigOption("synchronous_commit", synchronous_commit >= SYNCHRONOUS_COMMIT_REMOTE_FLUSH ?
					pstrdup(GetConfigOption("synchronous_commit", false, false)) : "on",
					PGC_SUSET, PGC_S_OVERRIDE);

	my_slot = PipelineSlot(dbid, def.id, true);
	SpinLockAcquire(&my_slot->mutex);
	my_slot->worker_pid = MyProcPid;
	my_slot->worker_procno = SG_MY_PROC_INDEX;
	my_slot->clean_exit = false;
	SpinLockRelease(&my_slot->mutex);
	before_shmem_exit(sg_worker_exit, (Datum) 0);

	batch_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard batch", ALLOCSET_DEFAULT_SIZES);
	/*
	 * Requests to step aside were for our predecessor; a control call made
	 * from now on sets the flag again and we see it at the first batch.
	 */
	SpinLockAcquire(&my_slot->mutex);
	my_slot->fence_requested = false;
	SpinLockRelease(&my_slot->mutex);
	if (!sg_load_definition())
		sg_clean_exit();
	elog(DEBUG1, "streamguard pipeline \"%s\" started (epoch %lld, %s)",
		 def.name, (long long) def.epoch, GuaranteeName(def.guarantee));

	for (;;)
	{
		SgBatchResult result = SG_BATCH_EMPTY;
		ErrorData  *edata = NULL;
		MemoryContext oldcxt = CurrentMemoryContext;

		ResetLatch(MyLatch);
		/* a cancel (batch timeout, a control call) was for a batch now over */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		PG_TRY();
		{
			result = sg_batch(isolate);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(oldcxt);
			edata = CopyErrorData();
			FlushErrorState();
			disable_all_timeouts(false);
			QueryCancelPending = false;
			sg_abort();
			/* a remote transaction must not outlive the failed batch */
			if (def.sink_server)
			{
				RemoteDisconnect(&sink_remote);
				sg_remote_status(1, &sink_remote);
				need_resolve = true;
			}
			if (def.source_server)
			{
				RemoteDisconnect(&src_remote);
				sg_remote_status(0, &src_remote);
			}
		}
		PG_END_TRY();

		if (edata != NULL && my_slot->fence_requested)
		{
			/* a control call cancelled the batch: it takes over from here */
			FreeErrorData(edata);
			sg_clean_exit();
		}
		if (edata != NULL)
		{
			long		backoff;
			bool		present;

			/* DROP EXTENSION takes the pipelines with it */
			StartTransactionCommand();
			present = OidIsValid(get_extension_oid("streamguard", true));
			CommitTransactionCommand();
			if (!present)
				sg_clean_exit();

			attempts++;
			ereport(LOG,
					(errmsg("streamguard pipeline \"%s\": batch failed (attempt %d): %s",
							def.name, attempts, edata->message)));
			sg_note_error(edata->message, false);
			if (!sg_transient(edata) && attempts >= def.max_attempts)
				isolate = true;
			backoff = Min(def.retry_backoff_ms << Min(attempts - 1, 20), def.max_backoff_ms);
			FreeErrorData(edata);
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, backoff, PG_WAIT_EXTENSION);
			continue;
		}

		switch (result)
		{
			case SG_BATCH_DONE:
				attempts = 0;
				isolate = false;
				break;
			case SG_BATCH_EMPTY:
				attempts = 0;
				isolate = false;
				/* a remote source cannot wake us: poll it */
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 def.source_server ? 100L : 1000L, PG_WAIT_EXTENSION);
				break;
			case SG_BATCH_FENCED:
				sg_clean_exit();
				break;
			case SG_BATCH_STOPPED:
				ereport(LOG,
						(errmsg("streamguard pipeline \"%s\" failed and stopped: %s",
								def.name, stop_error)));
				sg_note_error(stop_error, true);
				sg_clean_exit();
				break;
		}
	}
}
