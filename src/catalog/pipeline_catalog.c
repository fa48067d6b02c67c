/*-------------------------------------------------------------------------
 *
 * pipeline_catalog.c
 *		The catalog rows of pipelines that more than one module reads or
 *		writes, in one place: the pipeline's row (its creation, the
 *		changes of alter_pipeline and of the control calls, a worker's
 *		start, its errors), its dead letters and its Kafka positions.
 *
 * Who writes streamguard.pipeline: this file, for everything but a
 * batch's counters (in streamguard.pipeline_stats on a 0.3 catalog:
 * batch.c, sink_kafka.c, and sink_remote.c's count of the dead letters it
 * imports), which are updated in the batch's own transaction by the
 * statements that fence it; the drop of a pipeline (pipeline.c)
 * and the reassignment of its owner (ownership.c), one statement each.
 * streamguard.dead_letter gets its rows only from DeadLetterInsert, from
 * an isolated batch (batchexec.c), a remote sink (sink_remote.c) and a Kafka
 * source (source_kafka_messages.c); streamguard.kafka_position its rows from
 * KafkaPositionsAdd, at create_pipeline and when a topic grows.
 *
 * Results are read by column name (SgColumn), never by position.  The
 * statements name every object fully; callers are connected to SPI and,
 * unless a function says otherwise, run as the data owner with
 * search_path pinned (SgEnterCatalog, SgBecomeDataOwner).
 *
 * The worker's definition (PipelineDefLoad) fills the worker's SgPipeDef:
 * this file takes that struct's type from worker.h and calls nothing of
 * the worker.  The catalog of version 0.1, which the library meets until
 * ALTER EXTENSION UPDATE, has none of 0.2's settings: PipelineInsert and
 * PipelineAlterRow leave them alone when told the call came through a
 * 0.1 signature.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog/pipeline_catalog.h"
#include "io/kafka.h"
#include "pipeline/worker.h"
#include "catalog/sg_catalog.h"
#include "core/util.h"

/* the consumer rows of a pipeline reading a local stream */
char *
PipelineConsumerName(const char *pipeline)
{
	return psprintf("pipeline:%s", pipeline);
}

/* ----------------------------------------------------------- the row */

/*
 * create_pipeline's row: the id of the new pipeline, or 42710 when one of
 * that name exists.  The settings of 0.2 are set by a second statement
 * unless the catalog is 0.1's; the columns that only some pipelines use
 * (an upserting sink's columns, more workers, a Kafka source) by one each,
 * as before there were columns for them.
 */
int32
PipelineInsert(const SgPipelineSpec *spec, int32 stream_id, Oid owner, const char *search_path,
			   bool source_kafka)
{
	Oid			types[15] = {TEXTOID, INT4OID, TEXTOID, TEXTOID, INT4OID, TEXTOID,
	BOOLOID, INTERVALOID, OIDOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[15];
	char		nulls[15];
	bool		isnull;
	int32		id;
	int			ret;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(spec->name);
	/* a remote source: no stream here (NULL; 0 in a 0.1 or 0.2 catalog) */
	values[1] = Int32GetDatum(stream_id);
	nulls[1] = stream_id == 0 && SgPipelineStatsCatalog() ? 'n' : ' ';
	values[2] = CStringGetTextDatum(spec->sql);
	values[3] = SgWordParam("guarantee", SgWordName(&SgGuaranteeWords, spec->guarantee), &types[3]);
	values[4] = Int32GetDatum(spec->batch_size);
	values[5] = SgWordParam("error_policy", SgWordName(&SgErrorPolicyWords, spec->policy), &types[5]);
	values[6] = BoolGetDatum(spec->dedup);
	values[7] = IntervalPGetDatum(spec->dedup_window);
	values[8] = ObjectIdGetDatum(owner);
	values[9] = CStringGetTextDatum(search_path);
	values[10] = spec->source_server ? CStringGetTextDatum(spec->source_server) : (Datum) 0;
	nulls[10] = spec->source_server ? ' ' : 'n';
	values[11] = spec->source_server ? CStringGetTextDatum(spec->source) : (Datum) 0;
	nulls[11] = spec->source_server ? ' ' : 'n';
	values[12] = spec->sink_server ? CStringGetTextDatum(spec->sink_server) : (Datum) 0;
	nulls[12] = spec->sink_server ? ' ' : 'n';
	values[13] = spec->sink_table ? CStringGetTextDatum(spec->sink_table) : (Datum) 0;
	nulls[13] = spec->sink_table ? ' ' : 'n';
	values[14] = SgWordParam("sink_mode",
							 spec->sink_server ? SgWordName(&SgSinkModeWords, spec->sink_mode) : NULL,
							 &types[14]);
	nulls[14] = spec->sink_server ? ' ' : 'n';
	ret = SPI_execute_with_args("INSERT INTO streamguard.pipeline "
								"(name, stream_id, sql, guarantee, batch_size, error_policy, dedup, "
								" dedup_window, owner, search_path, source_server, remote_stream, "
								" sink_server, sink_table, sink_mode) "
								"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) "
								"ON CONFLICT (name) DO NOTHING RETURNING id",
								15, types, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert pipeline: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pipeline \"%s\" already exists", spec->name)));
	id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									 SgColumn(SPI_tuptable->tupdesc, "id"), &isnull));
	if (SgPipelineStatsCatalog())
	{
		/* its counters start at 0 (a 0.2 catalog has them in its row) */
		Oid			ptypes[1] = {INT4OID};
		Datum		pvalues[1] = {Int32GetDatum(id)};

		SgExec("INSERT INTO streamguard.pipeline_stats (pipeline_id) VALUES ($1)",
			   1, ptypes, pvalues, NULL, SPI_OK_INSERT);
	}

	if (!spec->catalog_0_1)
	{
		Oid			stypes[6] = {INT4OID, INTERVALOID, BOOLOID, INT4OID, INTERVALOID, INTERVALOID};
		Datum		svalues[6] = {Int32GetDatum(id), IntervalPGetDatum(spec->batch_timeout),
		BoolGetDatum(spec->allow_source_append), Int32GetDatum(spec->max_attempts),
		IntervalPGetDatum(spec->retry_backoff), IntervalPGetDatum(spec->max_backoff)};

		SgExec("UPDATE streamguard.pipeline SET batch_timeout = $2, allow_source_append = $3, "
			   "max_attempts = $4, retry_backoff = $5, max_backoff = $6 WHERE id = $1",
			   6, stypes, svalues, NULL, SPI_OK_UPDATE);
	}
	if (spec->sink_on_conflict)
	{
		Oid			ctypes[2] = {INT4OID, TEXTARRAYOID};
		Datum		cvalues[2] = {Int32GetDatum(id), PointerGetDatum(spec->sink_on_conflict)};

		SgExec("UPDATE streamguard.pipeline SET sink_on_conflict = $2 WHERE id = $1",
			   2, ctypes, cvalues, NULL, SPI_OK_UPDATE);
	}
	if (spec->workers > 1)
	{
		Oid			wtypes[2] = {INT4OID, INT4OID};
		Datum		wvalues[2] = {Int32GetDatum(id), Int32GetDatum(spec->workers)};

		SgExec("UPDATE streamguard.pipeline SET workers = $2 WHERE id = $1",
			   2, wtypes, wvalues, NULL, SPI_OK_UPDATE);
	}
	if (source_kafka)
	{
		Oid			ktypes[1] = {INT4OID};
		Datum		kvalues[1] = {Int32GetDatum(id)};

		SgExec("UPDATE streamguard.pipeline SET source_kafka = true WHERE id = $1",
			   1, ktypes, kvalues, NULL, SPI_OK_UPDATE);
	}
	return id;
}

/*
 * alter_pipeline's change of the row, with a new epoch (and generation):
 * the running workers step aside and their successors load the new
 * definition.  Through the 0.1 signature only sql, batch_size and
 * error_policy exist (and no generation); otherwise *after gets the
 * settings as they are now, old ones included, for the checks of their
 * combination.
 */
void
PipelineAlterRow(int32 id, const SgPipelineChange *change, SgPipelineSettings *after)
{
	Oid			types[9] = {INT4OID, TEXTOID, INT4OID, TEXTOID, INTERVALOID, INT4OID, INTERVALOID,
	INTERVALOID, INT4OID};
	Datum		values[9];
	char		nulls[9];
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;

	/* a NULL argument keeps the column (coalesce) */
	values[0] = Int32GetDatum(id);
	nulls[0] = ' ';
	values[1] = change->sql ? CStringGetTextDatum(change->sql) : (Datum) 0;
	nulls[1] = change->sql ? ' ' : 'n';
	values[2] = Int32GetDatum(change->batch_size);
	nulls[2] = change->set_batch_size ? ' ' : 'n';
	values[3] = SgWordParam("error_policy",
							change->set_policy ? SgWordName(&SgErrorPolicyWords, change->policy) : NULL,
							&types[3]);
	nulls[3] = change->set_policy ? ' ' : 'n';
	values[4] = PointerGetDatum(change->batch_timeout);
	nulls[4] = change->batch_timeout ? ' ' : 'n';
	values[5] = Int32GetDatum(change->max_attempts);
	nulls[5] = change->set_max_attempts ? ' ' : 'n';
	values[6] = PointerGetDatum(change->retry_backoff);
	nulls[6] = change->retry_backoff ? ' ' : 'n';
	values[7] = PointerGetDatum(change->max_backoff);
	nulls[7] = change->max_backoff ? ' ' : 'n';
	values[8] = Int32GetDatum(change->workers);
	nulls[8] = change->set_workers ? ' ' : 'n';
	if (change->catalog_0_1)
	{
		if (SPI_execute_with_args("UPDATE streamguard.pipeline SET "
								  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
								  "error_policy = coalesce($4, error_policy), epoch = epoch + 1 "
								  "WHERE id = $1",
								  4, types, values, nulls, false, 0) < 0)
			elog(ERROR, "alter_pipeline failed");
		return;
	}
	if (SPI_execute_with_args("UPDATE streamguard.pipeline SET "
							  "sql = coalesce($2, sql), batch_size = coalesce($3, batch_size), "
							  "error_policy = coalesce($4, error_policy), "
							  "batch_timeout = coalesce($5, batch_timeout), "
							  "max_attempts = coalesce($6, max_attempts), "
							  "retry_backoff = coalesce($7, retry_backoff), "
							  "max_backoff = coalesce($8, max_backoff), workers = coalesce($9, workers), "
							  "epoch = epoch + 1, generation = generation + 1 "
							  "WHERE id = $1 RETURNING max_attempts, retry_backoff, max_backoff, "
							  "workers, source_server, sink_server",
							  9, types, values, nulls, false, 0) < 0)
		elog(ERROR, "alter_pipeline failed");
	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;
	after->max_attempts = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "max_attempts"), &isnull));
	after->retry_backoff = DatumGetIntervalP(SPI_getbinval(t, d, SgColumn(d, "retry_backoff"), &isnull));
	after->max_backoff = DatumGetIntervalP(SPI_getbinval(t, d, SgColumn(d, "max_backoff"), &isnull));
	after->workers = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "workers"), &isnull));
	after->source_server = SPI_getvalue(t, d, SgColumn(d, "source_server"));
	after->sink_server = SPI_getvalue(t, d, SgColumn(d, "sink_server"));
}

/* the search_path a pipeline's SQL was validated under (create, alter) */
void
PipelineSetSearchPath(int32 id, const char *search_path)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2] = {Int32GetDatum(id), CStringGetTextDatum(search_path)};

	SgExec("UPDATE streamguard.pipeline SET search_path = $2 WHERE id = $1",
		   2, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * A control call's change of state; with bump_epoch, a new epoch and
 * generation too (the running workers step aside).
 */
void
PipelineSetState(int32 id, const char *state, bool bump_epoch)
{
	Oid			types[2] = {INT4OID, InvalidOid};
	Datum		values[2];

	values[0] = Int32GetDatum(id);
	values[1] = SgWordParam("pipeline_state", state, &types[1]);
	SgExec(bump_epoch ?
		   "UPDATE streamguard.pipeline SET state = $2, epoch = epoch + 1, generation = generation + 1 "
		   "WHERE id = $1" :
		   "UPDATE streamguard.pipeline SET state = $2 WHERE id = $1",
		   2, types, values, NULL, SPI_OK_UPDATE);
}

/* resume_pipeline: running, a new epoch, and the next start is no restart */
void
PipelineResumeRow(int32 id)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(id)};

	SgExec("UPDATE streamguard.pipeline SET state = 'running', epoch = epoch + 1, "
		   "generation = generation + 1, "
		   "started_once = false WHERE id = $1",
		   1, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * A worker's start: if the pipeline still runs, a new epoch (the fence of
 * every batch the worker runs), a restart counted when there was a start
 * before, and the definition into *def (whose id and worker the caller
 * set), its strings allocated in `cxt`; *stream_id gets the source
 * stream's id (0 for a remote source).  False if the pipeline does not run
 * (any more).
 *
 * A restart counts when the worker had started before, unless this is its
 * first start since a clean server restart (clean_start: the server shut
 * down cleanly, and the last incarnation started before this postmaster
 * did): a planned restart of the server is no failure, and an alert on
 * restarts must not fire during maintenance.  A crash, an immediate
 * shutdown or a worker that stopped or was terminated within a server's
 * life count.
 */
bool
PipelineDefLoad(SgPipeDef *def, bool clean_start, MemoryContext cxt, int32 *stream_id)
{
	Oid			types[3] = {INT4OID, INT4OID, BOOLOID};
	Datum		values[3] = {Int32GetDatum(def->id), Int32GetDatum(def->worker), BoolGetDatum(clean_start)};
	HeapTuple	t;
	TupleDesc	d;
	bool		isnull;
	char	   *s;
	Datum		conf;
	MemoryContext old;

	if (SPI_execute_with_args("UPDATE streamguard.pipeline p SET epoch = p.epoch OPERATOR(pg_catalog.+) 1, "
							  "restarts = p.restarts OPERATOR(pg_catalog.+) CASE WHEN p.started_once AND EXISTS "
							  "(SELECT 1 FROM streamguard.pipeline_worker w WHERE w.pipeline_id OPERATOR(pg_catalog.=) p.id "
							  "AND w.worker OPERATOR(pg_catalog.=) $2 AND NOT ($3 AND w.started_at "
							  "OPERATOR(pg_catalog.<) pg_catalog.pg_postmaster_start_time())) THEN 1 ELSE 0 END, "
							  "started_once = true "
							  "WHERE p.id OPERATOR(pg_catalog.=) $1 AND p.state OPERATOR(pg_catalog.=) 'running' "
							  "RETURNING p.name, (SELECT s.name FROM streamguard.stream s "
							  "WHERE s.id OPERATOR(pg_catalog.=) p.stream_id) AS stream, "
							  "p.sql, p.guarantee, p.batch_size, p.error_policy, p.dedup, "
							  "pg_catalog.date_part('epoch', p.dedup_window)::float8 AS dedup_window_s, "
							  "p.owner, p.search_path, p.epoch, p.stream_id, "
							  "p.source_server, p.remote_stream, p.sink_server, p.sink_table, p.sink_mode, "
							  "(SELECT pg_catalog.count(*) FROM streamguard.remote_position rp "
							  "WHERE rp.pipeline_id OPERATOR(pg_catalog.=) p.id)::int AS remote_nparts, "
							  "(pg_catalog.date_part('epoch', p.batch_timeout) OPERATOR(pg_catalog.*) 1000)::float8 "
							  "AS batch_timeout_ms, "
							  "p.allow_source_append, p.max_attempts, "
							  "(pg_catalog.date_part('epoch', p.retry_backoff) OPERATOR(pg_catalog.*) 1000)::float8 "
							  "AS retry_backoff_ms, "
							  "(pg_catalog.date_part('epoch', p.max_backoff) OPERATOR(pg_catalog.*) 1000)::float8 "
							  "AS max_backoff_ms, "
							  "p.generation, p.workers, p.sink_on_conflict, p.source_kafka",
							  3, types, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not load pipeline %d", def->id);
	if (SPI_processed != 1)
		return false;

	t = SPI_tuptable->vals[0];
	d = SPI_tuptable->tupdesc;
	old = MemoryContextSwitchTo(cxt);
	def->name = SPI_getvalue(t, d, SgColumn(d, "name"));
	def->stream = SPI_getvalue(t, d, SgColumn(d, "stream"));
	def->sql = SPI_getvalue(t, d, SgColumn(d, "sql"));
	def->guarantee = (SgGuarantee) SgParseWord(&SgGuaranteeWords, SPI_getvalue(t, d, SgColumn(d, "guarantee")));
	def->batch_size = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "batch_size"), &isnull));
	def->policy = (SgErrorPolicy) SgParseWord(&SgErrorPolicyWords,
											  SPI_getvalue(t, d, SgColumn(d, "error_policy")));
	def->dedup = DatumGetBool(SPI_getbinval(t, d, SgColumn(d, "dedup"), &isnull));
	def->dedup_window_us =
		(int64) (DatumGetFloat8(SPI_getbinval(t, d, SgColumn(d, "dedup_window_s"), &isnull)) * 1e6);
	def->owner = DatumGetObjectId(SPI_getbinval(t, d, SgColumn(d, "owner"), &isnull));
	def->search_path = SPI_getvalue(t, d, SgColumn(d, "search_path"));
	def->epoch = DatumGetInt64(SPI_getbinval(t, d, SgColumn(d, "epoch"), &isnull));
	*stream_id = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "stream_id"), &isnull));
	s = SPI_getvalue(t, d, SgColumn(d, "source_server"));
	if (s)
	{
		def->source_server = s;
		def->remote_stream = SPI_getvalue(t, d, SgColumn(d, "remote_stream"));
		def->remote_nparts = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "remote_nparts"), &isnull));
	}
	s = SPI_getvalue(t, d, SgColumn(d, "sink_server"));
	if (s)
	{
		def->sink_server = s;
		def->sink_table = SPI_getvalue(t, d, SgColumn(d, "sink_table"));
		def->two_phase = SgParseWord(&SgSinkModeWords, SPI_getvalue(t, d, SgColumn(d, "sink_mode")))
			== SG_SINK_TWO_PHASE;
		def->sink_kafka = KafkaIsKafkaServer(def->sink_server);
	}
	def->batch_timeout_ms =
		(int) Min(DatumGetFloat8(SPI_getbinval(t, d, SgColumn(d, "batch_timeout_ms"), &isnull)), (double) INT_MAX);
	def->allow_source_append = DatumGetBool(SPI_getbinval(t, d, SgColumn(d, "allow_source_append"), &isnull));
	def->max_attempts = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "max_attempts"), &isnull));
	def->retry_backoff_ms = (long) DatumGetFloat8(SPI_getbinval(t, d, SgColumn(d, "retry_backoff_ms"), &isnull));
	def->max_backoff_ms = (long) DatumGetFloat8(SPI_getbinval(t, d, SgColumn(d, "max_backoff_ms"), &isnull));
	def->generation = DatumGetInt64(SPI_getbinval(t, d, SgColumn(d, "generation"), &isnull));
	def->nworkers = DatumGetInt32(SPI_getbinval(t, d, SgColumn(d, "workers"), &isnull));
	conf = SPI_getbinval(t, d, SgColumn(d, "sink_on_conflict"), &isnull);
	if (!isnull)
	{
		Datum	   *elems;
		int			i;

		deconstruct_array(DatumGetArrayTypePCopy(conf), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, NULL, &def->sink_nconflict);
		def->sink_conflict = palloc(sizeof(char *) * def->sink_nconflict);
		for (i = 0; i < def->sink_nconflict; i++)
			def->sink_conflict[i] = TextDatumGetCString(elems[i]);
	}
	def->source_kafka = def->source_server &&
		DatumGetBool(SPI_getbinval(t, d, SgColumn(d, "source_kafka"), &isnull));
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * The error of a worker's failed batch (and with fail, the failed state
 * and a new epoch), in the current transaction; nothing if a control call
 * changed the pipeline since the worker loaded it (`generation`).  SPI
 * connected; switches to the data owner itself.
 */
void
PipelineRecordError(int32 id, int64 generation, const char *message, bool fail)
{
	Oid			types[4] = {INT4OID, TEXTOID, INT8OID, BOOLOID};
	Datum		values[4];
	SgUserSave	save;

	values[0] = Int32GetDatum(id);
	values[1] = CStringGetTextDatum(message);
	values[2] = Int64GetDatum(generation);
	values[3] = BoolGetDatum(fail);
	SgBecomeDataOwner(&save, true);

	/*
	 * Only while the generation is ours: the pipeline row is locked for
	 * that (a control call that raised it has committed, or waits for us).
	 * A 0.2 catalog keeps the error in the pipeline's row.
	 */
	if (SPI_execute_with_args(SgPipelineStatsCatalog() ?
							  "WITH p AS (SELECT id FROM streamguard.pipeline WHERE id OPERATOR(pg_catalog.=) $1 "
							  "AND generation OPERATOR(pg_catalog.=) $3 FOR NO KEY UPDATE), "
							  "f AS (UPDATE streamguard.pipeline q SET state = 'failed', "
							  "epoch = q.epoch OPERATOR(pg_catalog.+) 1, generation = q.generation OPERATOR(pg_catalog.+) 1 "
							  "FROM p WHERE $4 AND q.id OPERATOR(pg_catalog.=) p.id) "
							  "UPDATE streamguard.pipeline_stats s SET last_error = $2, last_error_at = pg_catalog.now() "
							  "FROM p WHERE s.pipeline_id OPERATOR(pg_catalog.=) p.id" :
							  "UPDATE streamguard.pipeline SET last_error = $2, last_error_at = pg_catalog.now(), "
							  "state = CASE WHEN $4 THEN 'failed' ELSE state END, "
							  "epoch = CASE WHEN $4 THEN epoch OPERATOR(pg_catalog.+) 1 ELSE epoch END, "
							  "generation = CASE WHEN $4 THEN generation OPERATOR(pg_catalog.+) 1 ELSE generation END "
							  "WHERE id OPERATOR(pg_catalog.=) $1 AND generation OPERATOR(pg_catalog.=) $3",
							  4, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the pipeline error");
	SgRestoreUser(&save);
}

/*
 * Every pipeline's last_error, where it says something else (the
 * maintenance worker: why no pipeline of the database runs).  A 0.1 and a
 * 0.2 catalog have these columns in streamguard.pipeline.  As the caller
 * is.
 */
void
PipelineFlagAllErrors(const char *message)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(message)};

	if (SPI_execute_with_args(SgPipelineStatsCatalog() ?
							  "UPDATE streamguard.pipeline_stats SET last_error = $1, last_error_at = pg_catalog.now() "
							  "WHERE last_error IS DISTINCT FROM $1" :
							  "UPDATE streamguard.pipeline SET last_error = $1, last_error_at = pg_catalog.now() "
							  "WHERE last_error IS DISTINCT FROM $1",
							  1, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "pipeline error update failed");
}

/* ... and those errors gone again: last_error LIKE `pattern` cleared */
void
PipelineClearErrorsLike(const char *pattern)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(pattern)};

	if (SPI_execute_with_args(SgPipelineStatsCatalog() ?
							  "UPDATE streamguard.pipeline_stats SET last_error = NULL, last_error_at = NULL "
							  "WHERE last_error OPERATOR(pg_catalog.~~) $1" :
							  "UPDATE streamguard.pipeline SET last_error = NULL, last_error_at = NULL "
							  "WHERE last_error OPERATOR(pg_catalog.~~) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "pipeline error update failed");
}

/* ---------------------------------------------------- dead letters */

/*
 * One event set aside with its error, in the caller's transaction (the one
 * that moves past it).  `event` and `isnull` are the event's first six
 * columns as relation "batch" has them: partition (int4), seq (int8), key
 * (text), payload (jsonb), dedup_key (text), appended_at (timestamptz).
 * SPI connected; switches to the data owner itself (search_path as the
 * caller left it: the statement names nothing it could resolve).
 */
void
DeadLetterInsert(int32 pipeline_id, const char *pipeline, const Datum *event, const bool *isnull,
				 const char *error, const char *sqlstate)
{
	Oid			types[10] = {INT4OID, TEXTOID, INT4OID, INT8OID, TEXTOID, JSONBOID, TEXTOID,
	TIMESTAMPTZOID, TEXTOID, TEXTOID};
	Datum		values[10];
	char		nulls[10];
	int			i;
	SgUserSave	save;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int32GetDatum(pipeline_id);
	values[1] = CStringGetTextDatum(pipeline);
	for (i = 0; i < 6; i++)
	{
		values[2 + i] = isnull[i] ? (Datum) 0 : event[i];
		nulls[2 + i] = isnull[i] ? 'n' : ' ';
	}
	values[8] = CStringGetTextDatum(error);
	values[9] = CStringGetTextDatum(sqlstate);
	SgBecomeDataOwner(&save, false);
	if (SPI_execute_plan(SgPlanCached(NULL,
									  "INSERT INTO streamguard.dead_letter (pipeline_id, pipeline, partition, seq, key, "
									  "payload, dedup_key, appended_at, error, sqlstate) "
									  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
									  10, types),
						 values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record a dead letter");
	SgRestoreUser(&save);
}

/* ------------------------------------------------- Kafka positions */

/*
 * Positions for partitions 0..nparts-1 of a Kafka source that has none
 * yet, at next_offset (-2: the beginning, -1: the end, settled at the
 * first run); partitions that have one keep it.  SPI connected, as the
 * data owner.
 */
void
KafkaPositionsAdd(int32 pipeline_id, int nparts, int64 next_offset)
{
	Oid			types[3] = {INT4OID, INT4OID, INT8OID};
	Datum		values[3] = {Int32GetDatum(pipeline_id), Int32GetDatum(nparts), Int64GetDatum(next_offset)};

	SgExec("INSERT INTO streamguard.kafka_position (pipeline_id, partition, next_offset) "
		   "SELECT $1, g, $3 FROM pg_catalog.generate_series(0, $2 OPERATOR(pg_catalog.-) 1) g "
		   "ON CONFLICT DO NOTHING",
		   3, types, values, NULL, SPI_OK_INSERT);
}
