/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *		The per-database maintenance worker, started by the launcher
 *		(launcher.c), and the pipeline supervisor it runs.
 *
 * A maintenance worker, every streamguard.maintenance_naptime, for each
 * stream of its database, each step in its own short transaction (the
 * stream list says which streams have a rotation or a dedup expiry to do,
 * so that an idle stream costs a round no transaction of its own):
 *	- rotation: once the current segment is segment_interval old and holds
 *	  events, create the next segment table and make it current;
 *	- retention: a sealed segment whose successor took over more than
 *	  `retention` ago is dropped whole.  In the same transaction consumers
 *	  still positioned inside it are moved past it and the events they had
 *	  not read are added to their lost count, and the partition's seq floor
 *	  is raised so seqs are never reused.  It takes the segment's lock with
 *	  lock_timeout, so a reader or late writer delays the drop to a later
 *	  round rather than queueing appenders behind it.  Nothing else is
 *	  locked: appends go to another table, and dropping a table leaves no
 *	  dead tuples behind, so storage does not grow with stream length;
 *	- dedup expiry: append dedup keys older than the window are deleted in
 *	  bounded batches;
 *	- supervision: one pipeline worker per running pipeline, restarted
 *	  with exponential backoff after a crash (SupervisePipelines,
 *	  supervise.c), and one backfill worker per captured table whose backfill is not over
 *	  (CaptureSuperviseBackfills, capture_backfill.c); each start first
 *	  claims a worker unit (worker_units.c), so that one database or one
 *	  role cannot take the server's background worker slots.
 *
 * Every value in the steps' SQL is a parameter; only the statements over
 * a segment table name it in their text, as an identifier
 * (StreamSegmentName, quoted).  Results are read by column name.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "capture/capture.h"
#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/compat.h"
#include "core/util.h"
#include "pipeline/pipeline.h"
#include "shmem/horizon.h"
#include "shmem/launcher_mailbox.h"
#include "shmem/pipeline_slots.h"
#include "shmem/worker_units.h"
#include "workers/maintenance.h"
#include "workers/supervise.h"

PGDLLEXPORT void MaintenanceWorkerMain(Datum arg);

#define SG_DEDUP_BATCH		10000

int			sg_maintenance_naptime_ms = 1000;
int			sg_batch_history = 1000;

/* ------------------------------------------------------ database worker */

typedef struct SgStreamTask
{
	int32		id;
	int64		retention_us;	/* 0 = keep forever */
	int64		segment_us;
	int32		current_seg;
	int32		min_seg;
	bool		young;			/* the current segment is younger than
								 * segment_interval: no rotation this round */
	bool		dedup_due;		/* some dedup key is older than the window */
} SgStreamTask;

typedef void (*SgStep) (SgStreamTask *task);

/*
 * Run one maintenance step in its own transaction.  An error (a lock
 * timeout, typically) is logged and the step is retried next round.
 */
static bool
sg_run_step(SgStep step, SgStreamTask *task, const char *what)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, what);
		step(task);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(LOG,
				(errmsg("streamguard maintenance: %s of stream %d postponed: %s",
						what, task ? task->id : 0, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	return ok;
}

static int64
sg_interval_us(HeapTuple t, TupleDesc d, int col)
{
	bool		isnull;
	Datum		v = SPI_getbinval(t, d, col, &isnull);
	Interval   *iv;

	if (isnull)
		return 0;
	iv = DatumGetIntervalP(v);
	return iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/* round state shared by the steps */
static SgStreamTask *sg_tasks = NULL;
static int	sg_ntasks = 0;
static MemoryContext sg_round_cxt = NULL;

static void
sg_step_list(SgStreamTask *unused)
{
	uint64		i;
	MemoryContext old;
	int			col_id,
				col_retention,
				col_segment,
				col_current,
				col_min,
				col_created,
				col_dedup;
	TimestampTz now = GetCurrentTimestamp();

	/*
	 * With each stream, what its rotation and dedup steps would find, so
	 * that a round over idle streams does not cost two transactions per
	 * stream: the creation time of the current segment (the rotation step
	 * reads it again and decides), and whether any dedup key has expired.
	 * What changes after this read is seen one round later.
	 */
	if (SPI_execute("SELECT s.id, s.retention, s.segment_interval, s.current_seg, s.min_seg, "
					"g.created_at AS current_created, "
					"EXISTS (SELECT 1 FROM streamguard.append_dedup d WHERE d.stream_id = s.id "
					"  AND d.appended_at < pg_catalog.now() - s.dedup_window) AS dedup_due "
					"FROM streamguard.stream s LEFT JOIN streamguard.segment g "
					"  ON g.stream_id = s.id AND g.seg = s.current_seg "
					"ORDER BY s.id", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "stream list failed");
	col_id = SgColumn(SPI_tuptable->tupdesc, "id");
	col_retention = SgColumn(SPI_tuptable->tupdesc, "retention");
	col_segment = SgColumn(SPI_tuptable->tupdesc, "segment_interval");
	col_current = SgColumn(SPI_tuptable->tupdesc, "current_seg");
	col_min = SgColumn(SPI_tuptable->tupdesc, "min_seg");
	col_created = SgColumn(SPI_tuptable->tupdesc, "current_created");
	col_dedup = SgColumn(SPI_tuptable->tupdesc, "dedup_due");
	old = MemoryContextSwitchTo(sg_round_cxt);
	sg_tasks = palloc0(sizeof(SgStreamTask) * Max(SPI_processed, 1));
	MemoryContextSwitchTo(old);
	sg_ntasks = (int) SPI_processed;
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		TupleDesc	d = SPI_tuptable->tupdesc;
		bool		isnull;
		SgStreamTask *task = &sg_tasks[i];

		task->id = DatumGetInt32(SPI_getbinval(t, d, col_id, &isnull));
		task->retention_us = sg_interval_us(t, d, col_retention);
		task->segment_us = sg_interval_us(t, d, col_segment);
		task->current_seg = DatumGetInt32(SPI_getbinval(t, d, col_current, &isnull));
		task->min_seg = DatumGetInt32(SPI_getbinval(t, d, col_min, &isnull));
		{
			Datum		created = SPI_getbinval(t, d, col_created, &isnull);

			/* no segment row: let the rotation step report it */
			task->young = !isnull && now - DatumGetTimestampTz(created) < task->segment_us;
		}
		task->dedup_due = DatumGetBool(SPI_getbinval(t, d, col_dedup, &isnull));

		/* reconcile shared memory with the catalog (both only grow) */
		HorizonRaiseSegments(MyDatabaseId, task->id, task->current_seg, task->min_seg);
	}
}

/*
 * The statements of the steps below: values are parameters; the text
 * varies only where it names a segment table, which StreamSegmentName
 * quotes as an identifier.  A fixed statement that finds its rows by key
 * keeps its plan (SgExecCached, or SPI_execute_plan over SgPlanCached for
 * a read); the bulk deletes (expired dedup keys, the checkpoint log,
 * grants of dropped roles) are planned at each run with their values, as
 * when the values were in the text.
 */

/* (stream id, segment) as the parameters $1 and $2 */
static Oid	sg_seg_types[2] = {INT4OID, INT4OID};

/* start a new segment once the current one is old enough and not empty */
static void
sg_step_rotate(SgStreamTask *task)
{
	char	   *cur = StreamSegmentName(task->id, task->current_seg);
	Datum		values[2] = {Int32GetDatum(task->id), Int32GetDatum(task->current_seg)};
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;
	TimestampTz created;

	if (SPI_execute_with_args(psprintf("SELECT created_at, EXISTS (SELECT 1 FROM %s) AS filled "
									   "FROM streamguard.segment WHERE stream_id = $1 AND seg = $2", cur),
							  2, sg_seg_types, values, NULL, true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "segment %s is not recorded", cur);
	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;
	created = DatumGetTimestampTz(SPI_getbinval(t, d, SgColumn(d, "created_at"), &isnull));
	if (!DatumGetBool(SPI_getbinval(t, d, SgColumn(d, "filled"), &isnull)))
		return;
	if (GetCurrentTimestamp() - created < task->segment_us)
		return;

	SgCreateSegment(task->id, task->current_seg + 1);
	SgExecCached("UPDATE streamguard.segment SET sealed_at = pg_catalog.clock_timestamp() "
				 "WHERE stream_id = $1 AND seg = $2",
				 2, sg_seg_types, values, NULL, SPI_OK_UPDATE);
	values[1] = Int32GetDatum(task->current_seg + 1);
	SgExecCached("UPDATE streamguard.stream SET current_seg = $2 WHERE id = $1",
				 2, sg_seg_types, values, NULL, SPI_OK_UPDATE);

	/* appenders switch once the new segment is committed */
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	HorizonRaiseSegments(MyDatabaseId, task->id, task->current_seg + 1, 0);
	task->current_seg++;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
}

/*
 * Record what sealed segments can hold, so that readers already past one
 * skip it without touching it (and never wait behind its drop).  Any
 * next_seq read once appenders have switched to a later segment bounds
 * the seqs of every earlier one, so segments sealed while the counters
 * were not loaded (or by a worker that died before this step) get bounds
 * at a later round.  Unknown bounds just mean no skipping.
 */
static void
sg_step_bounds(SgStreamTask *task)
{
	int			slot = HorizonFindSlot(MyDatabaseId, task->id);
	int32		cur;
	int64	   *bounds;
	int			nparts;
	Datum	   *elems;
	Oid			types[3] = {INT4OID, INT4OID, INT8ARRAYOID};
	Datum		values[3];
	int			p;

	if (slot < 0)
		return;
	nparts = HorizonSealedBounds(slot, &cur, &bounds);
	if (nparts < 0)
		return;
	elems = palloc(sizeof(Datum) * nparts);
	for (p = 0; p < nparts; p++)
		elems[p] = Int64GetDatum(bounds[p]);
	values[0] = Int32GetDatum(task->id);
	values[1] = Int32GetDatum(cur);
	values[2] = PointerGetDatum(construct_array(elems, nparts, INT8OID, 8, FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	SgExecCached("UPDATE streamguard.segment SET seq_bounds = $3 "
				 "WHERE stream_id OPERATOR(pg_catalog.=) $1 AND seg OPERATOR(pg_catalog.<) $2 "
				 "AND seq_bounds IS NULL",
				 3, types, values, NULL, SPI_OK_UPDATE);
}

/* drop the oldest segment if retention has passed it */
static void
sg_step_drop(SgStreamTask *task)
{
	int32		seg = task->min_seg;
	char	   *rel = StreamSegmentName(task->id, seg);
	Datum		values[2] = {Int32GetDatum(task->id), Int32GetDatum(seg)};
	bool		isnull;
	Datum		sealed;

	if (seg >= task->current_seg)
		return;
	if (SPI_execute_plan(SgPlanCached(NULL, "SELECT sealed_at FROM streamguard.segment "
									  "WHERE stream_id = $1 AND seg = $2", 2, sg_seg_types),
						 values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "segment lookup failed");
	if (SPI_processed == 1)
	{
		sealed = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							   SgColumn(SPI_tuptable->tupdesc, "sealed_at"), &isnull);
		if (isnull || GetCurrentTimestamp() - DatumGetTimestampTz(sealed) < task->retention_us)
			return;
	}

	SgExec("SET LOCAL lock_timeout = '200ms'", 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	{
		char		relname[NAMEDATALEN];
		Oid			ntypes[2] = {NAMEOID, NAMEOID};
		Datum		nvalues[2];

		StreamSegmentRelname(task->id, seg, relname);
		nvalues[0] = DirectFunctionCall1(namein, CStringGetDatum(SG_DATA_SCHEMA));
		nvalues[1] = DirectFunctionCall1(namein, CStringGetDatum(relname));
		if (SPI_execute_plan(SgPlanCached(NULL, "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
										  "ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
										  2, ntypes),
							 nvalues, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "segment lookup failed");
	}
	if (SPI_processed == 1)
	{
		/*
		 * The stream's consumer rows first (the order a poll takes them in:
		 * position, then segment), so that a seek or poll committed while
		 * we waited is what the statements below see: each takes a new
		 * snapshot, and nobody moves these rows again until we commit.
		 * Reading the positions in the UPDATE itself would put a consumer a
		 * committed seek moved back where it was, and count its loss from
		 * there.
		 */
		SgExecCached("SELECT 1 FROM streamguard.consumer WHERE stream_id OPERATOR(pg_catalog.=) $1 "
					 "ORDER BY name, partition FOR UPDATE",
					 1, sg_seg_types, values, NULL, SPI_OK_SELECT);
		SgExec(psprintf("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", rel), 0, NULL, NULL, NULL, SPI_OK_UTILITY);

		/*
		 * An append that took its seq just before the rotation may have
		 * landed after sealed_at.  Now that nobody can write here any more,
		 * make sure the youngest event has reached the retention age.
		 */
		{
			Interval   *retention = palloc0(sizeof(Interval));
			Oid			rtypes[1] = {INTERVALOID};
			Datum		rvalues[1];

			/* what "interval 'N microseconds'" reads as: N in the time field */
			retention->time = task->retention_us;
			rvalues[0] = IntervalPGetDatum(retention);
			if (SPI_execute_with_args(psprintf("SELECT pg_catalog.max(appended_at) >= "
											   "pg_catalog.clock_timestamp() - $1 AS young FROM %s", rel),
									  1, rtypes, rvalues, NULL, true, 0) != SPI_OK_SELECT)
				elog(ERROR, "segment age check failed");
		}
		{
			Datum		young = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											  SgColumn(SPI_tuptable->tupdesc, "young"), &isnull);

			if (!isnull && DatumGetBool(young))
				return;			/* not yet: a later round drops it */
		}
		/* consumers inside the segment: count what they lose, move them past it */
		SgExec(psprintf("WITH m AS (SELECT partition, max(seq) AS maxseq FROM %s GROUP BY partition), "
						"l AS (SELECT c.name, c.partition, m.maxseq, "
						"  (SELECT count(*) FROM %s e WHERE e.partition = c.partition AND e.seq > c.position) AS n "
						"  FROM streamguard.consumer c JOIN m ON m.partition = c.partition "
						"  WHERE c.stream_id = $1 AND c.position < m.maxseq) "
						"UPDATE streamguard.consumer c SET lost = c.lost + l.n, position = l.maxseq "
						"FROM l WHERE c.stream_id = $1 AND c.name = l.name AND c.partition = l.partition",
						rel, rel),
			   1, sg_seg_types, values, NULL, SPI_OK_UPDATE);
		SgExec(psprintf("UPDATE streamguard.stream_partition sp SET seq_floor = m.maxseq "
						"FROM (SELECT partition, max(seq) AS maxseq FROM %s GROUP BY partition) m "
						"WHERE sp.stream_id = $1 AND sp.partition = m.partition AND sp.seq_floor < m.maxseq",
						rel),
			   1, sg_seg_types, values, NULL, SPI_OK_UPDATE);
		SgExec(psprintf("DROP TABLE %s", rel), 0, NULL, NULL, NULL, SPI_OK_UTILITY);

		/*
		 * A change of the partition count whose old-mapping events are all
		 * gone holds back no reader any more, current or future
		 * (repartition.c): forget it.  The floors above keep its seqs from
		 * being handed out again.
		 */
		if (StreamRepartitionCatalog())
			SgExecCached("DELETE FROM streamguard.stream_repartition r WHERE r.stream_id = $1 "
						 "AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(r.switch_seqs) WITH ORDINALITY u(s, i) "
						 " JOIN streamguard.stream_partition sp ON sp.stream_id = r.stream_id "
						 " AND sp.partition = u.i - 1 WHERE u.s > sp.seq_floor)",
						 1, sg_seg_types, values, NULL, SPI_OK_DELETE);
	}
	SgExecCached("DELETE FROM streamguard.segment WHERE stream_id = $1 AND seg = $2",
				 2, sg_seg_types, values, NULL, SPI_OK_DELETE);
	values[1] = Int32GetDatum(seg + 1);
	SgExecCached("UPDATE streamguard.stream SET min_seg = $2 WHERE id = $1",
				 2, sg_seg_types, values, NULL, SPI_OK_UPDATE);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	HorizonRaiseSegments(MyDatabaseId, task->id, 0, seg + 1);
	task->min_seg = seg + 1;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
}

static void
sg_step_dedup(SgStreamTask *task)
{
	Datum		values[2] = {Int32GetDatum(task->id), Int32GetDatum(SG_DEDUP_BATCH)};

	SgExec("DELETE FROM streamguard.append_dedup WHERE ctid = ANY (ARRAY("
		   "SELECT d.ctid FROM streamguard.append_dedup d JOIN streamguard.stream s ON s.id = d.stream_id "
		   "WHERE d.stream_id = $1 AND d.appended_at < pg_catalog.now() - s.dedup_window LIMIT $2))",
		   2, sg_seg_types, values, NULL, SPI_OK_DELETE);
}

static void
sg_step_supervise(SgStreamTask *unused)
{
	uint64		i;

	/*
	 * Grants to roles dropped while connected to another database, where
	 * our DROP ROLE hook could not see them: a role created later with the
	 * same OID must not inherit them.
	 */
	SgExec("DELETE FROM streamguard.stream_grant g WHERE NOT EXISTS "
		   "(SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) g.grantee) "
		   "RETURNING g.stream_id", 0, NULL, NULL, NULL, SPI_OK_DELETE_RETURNING);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		HorizonBumpGenerationAtCommit(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
																  SPI_tuptable->tupdesc, 1, &isnull)));
	}
	SupervisePipelines();
	CaptureSuperviseBackfills();
	/* the checkpoint log keeps the last streamguard.batch_history batches */
	{
		Datum		values[1] = {Int32GetDatum(sg_batch_history)};

		SgExec(SgPipelineStatsCatalog() ?
			   "DELETE FROM streamguard.pipeline_batch b USING streamguard.pipeline_stats p "
			   "WHERE p.pipeline_id OPERATOR(pg_catalog.=) b.pipeline_id "
			   "AND b.batch_id OPERATOR(pg_catalog.<=) (p.batches OPERATOR(pg_catalog.-) $1)" :
			   "DELETE FROM streamguard.pipeline_batch b USING streamguard.pipeline p "
			   "WHERE p.id OPERATOR(pg_catalog.=) b.pipeline_id "
			   "AND b.batch_id OPERATOR(pg_catalog.<=) (p.batches OPERATOR(pg_catalog.-) $1)",
			   1, sg_seg_types, values, NULL, SPI_OK_DELETE);
	}
	SgExec("DELETE FROM streamguard.pipeline_dedup d USING streamguard.pipeline p "
		   "WHERE p.id = d.pipeline_id AND d.seen_at < pg_catalog.now() - p.dedup_window",
		   0, NULL, NULL, NULL, SPI_OK_DELETE);
}

static bool sg_extension_present;

/*
 * The SQL version of the database, as the last extension check saw it, and
 * what is wrong with it for this library (NULL: nothing).  The library
 * serves SG_OLDEST_SQL_VERSION to SG_LIBRARY_VERSION; under another version
 * no pipeline or backfill worker is started (their SQL would fail, or do
 * the wrong thing, against a catalog it was not written for), and that is
 * said loudly: a WARNING when it is first seen and every ten minutes, and
 * in every pipeline's last_error (which streamguard.pipelines shows to the
 * owner), until ALTER EXTENSION streamguard UPDATE.
 */
static char *sg_version_problem = NULL;	/* in TopMemoryContext */
static char *sg_version_hint = NULL;
static char *sg_dbname = NULL;
static char sg_extversion[NAMEDATALEN];
static bool sg_version_flagged = false;	/* pipelines' last_error says so */
static bool sg_version_cleared = false; /* errors of an earlier run cleared */
static TimestampTz sg_version_warned = 0;

#define SG_VERSION_WARN_EVERY_US	(600 * USECS_PER_SEC)

static void
sg_step_check_extension(SgStreamTask *unused)
{
	sg_extension_present = OidIsValid(get_extension_oid("streamguard", true));
	if (sg_extension_present)
	{
		MemoryContext old;
		char	   *version = NULL;
		char	   *hint;
		char	   *problem;

		SgExec("SELECT extversion FROM pg_catalog.pg_extension "
			   "WHERE extname OPERATOR(pg_catalog.=) 'streamguard'", 0, NULL, NULL, NULL, SPI_OK_SELECT);
		if (SPI_processed > 0)
			version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								   SgColumn(SPI_tuptable->tupdesc, "extversion"));
		if (sg_dbname == NULL)
			sg_dbname = MemoryContextStrdup(TopMemoryContext, get_database_name(MyDatabaseId));
		problem = SgCatalogVersionProblem(version, sg_dbname, &hint);
		if (sg_version_problem)
			pfree(sg_version_problem);
		if (sg_version_hint)
			pfree(sg_version_hint);
		old = MemoryContextSwitchTo(TopMemoryContext);
		sg_version_problem = problem ? pstrdup(problem) : NULL;
		sg_version_hint = hint ? pstrdup(hint) : NULL;
		strlcpy(sg_extversion, version ? version : "?", sizeof(sg_extversion));
		MemoryContextSwitchTo(old);
	}
	/* slots of an earlier incarnation (DROP + CREATE EXTENSION) are stale */
	if (sg_extension_present)
		HorizonFreeDatabase(MyDatabaseId, StreamCatalogOid());
}

/*
 * Every pipeline's last_error says why it does not run; once the version is
 * served, the errors of that kind go (also ones written before a restart).
 */
static void
sg_step_flag_version(SgStreamTask *unused)
{
	if (sg_version_problem)
		PipelineFlagAllErrors(psprintf("%s. %s", sg_version_problem, sg_version_hint));
	else
		PipelineClearErrorsLike("the streamguard library % serves SQL versions % to %, but database % has version %: "
								"its pipelines and backfills do not run%");
	sg_version_flagged = (sg_version_problem != NULL);
}

/*
 * Whether this library serves the database's SQL version; if not, say so
 * (log, pipelines' last_error).
 */
static bool
sg_version_served(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (sg_version_problem == NULL)
	{
		if (sg_version_flagged)
			ereport(LOG,
					(errmsg("streamguard maintenance: database \"%s\" is now at SQL version %s, which the library %s serves: its pipelines and backfills start",
							sg_dbname, sg_extversion, SG_LIBRARY_VERSION)));
		if (sg_version_flagged || !sg_version_cleared)
			sg_version_cleared = sg_run_step(sg_step_flag_version, NULL, "version check");
		return true;
	}
	if (sg_version_warned == 0 || now - sg_version_warned >= SG_VERSION_WARN_EVERY_US)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s", sg_version_problem),
				 errdetail("No pipeline or backfill worker starts in this database until its SQL objects are at a version the library serves."),
				 errhint("%s", sg_version_hint)));
		sg_version_warned = now;
	}
	/* every round: a pipeline created meanwhile gets the error too */
	sg_run_step(sg_step_flag_version, NULL, "version check");
	return false;
}

static void
sg_unregister_db_worker(int code, Datum arg)
{
	LauncherRegisterWorker(MyDatabaseId, 0);
}

void
MaintenanceWorkerMain(Datum arg)
{
	Oid			dbid = DatumGetObjectId(arg);

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	SgHardenWorkerSession();
	/*
	 * In a deadlock with a user's command (DROP EXTENSION locking our
	 * tables one by one while a step reads them), be the one that gives
	 * way: the step is retried next round.
	 */
	SetConfigOption("deadlock_timeout", "100ms", PGC_SUSET, PGC_S_SESSION);
	pgstat_report_appname("streamguard maintenance");
	{
		char	   *dbname;

		StartTransactionCommand();
		dbname = get_database_name(MyDatabaseId);
		SgSetWorkerTitle(psprintf("streamguard maintenance db=%s", dbname ? dbname : "?"));
		CommitTransactionCommand();
	}

	sg_round_cxt = AllocSetContextCreate(TopMemoryContext, "streamguard maintenance round",
										 ALLOCSET_DEFAULT_SIZES);
	LauncherRegisterWorker(MyDatabaseId, MyProcPid);
	before_shmem_exit(sg_unregister_db_worker, (Datum) 0);
	for (;;)
	{
		int			i;

		SgWorkerLoopTop();
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(sg_round_cxt);

		sg_extension_present = false;
		sg_run_step(sg_step_check_extension, NULL, "extension check");
		if (!sg_extension_present)
		{
			/* DROP EXTENSION: what it held in shared memory goes too */
			HorizonFreeDatabase(MyDatabaseId, InvalidOid);
			PipelineFreeDatabase(MyDatabaseId);
			LauncherMarkAbsent(MyDatabaseId);
			proc_exit(0);
		}

		if (sg_version_served())
			sg_run_step(sg_step_supervise, NULL, "pipeline supervision");

		sg_tasks = NULL;
		sg_ntasks = 0;
		if (sg_run_step(sg_step_list, NULL, "stream list"))
		{
			for (i = 0; i < sg_ntasks; i++)
			{
				SgStreamTask *task = &sg_tasks[i];

				CHECK_FOR_INTERRUPTS();
				if (task->retention_us > 0)
				{
					if (!task->young)
						sg_run_step(sg_step_rotate, task, "segment rotation");
					if (task->current_seg > task->min_seg)
						sg_run_step(sg_step_bounds, task, "segment bounds");
					while (task->min_seg < task->current_seg)
					{
						int32		before = task->min_seg;

						if (!sg_run_step(sg_step_drop, task, "retention") || task->min_seg == before)
							break;
					}
				}
				if (task->dedup_due)
					sg_run_step(sg_step_dedup, task, "dedup expiry");
			}
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sg_maintenance_naptime_ms, sg_wait_event(SG_WE_MAINTENANCE));
		ResetLatch(MyLatch);
	}
}
