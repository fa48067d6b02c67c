/*-------------------------------------------------------------------------
 *
 * pipeline_validate.c
 *		Checking what create_pipeline / alter_pipeline / reset_pipeline are given.
 *
 * A pipeline's SQL is parsed and refused at creation when it contains a
 * statement that can never run inside a batch; a remote sink's table,
 * columns and bookkeeping tables, and a remote source's stream, are
 * checked on the remote server with the owner's user mapping; settings
 * are range-checked.  Nothing here changes local state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "utils/timestamp.h"

#include "api/pipeline_validate.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "io/kafka.h"
#include "io/remote.h"
#include "pipeline/batchexec.h"

/*
 * Statements that can never run in a pipeline's batch: the worker commits
 * each batch itself, runs the SQL as the owner inside a security-
 * restricted operation and rolls back its settings after each batch.
 * Refusing them at creation beats a pipeline that fails at run time.
 * Returns why, or NULL.  (Statements inside functions are found only when
 * they run.)
 */
static const char *
sg_statement_refused(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		case T_TransactionStmt:
		case T_CallStmt:
		case T_VacuumStmt:
			return "streamguard commits each batch itself.";
		case T_DoStmt:
			return "A DO block cannot see the batch and may run transaction control; use a function called from the SQL.";
		case T_CopyStmt:
			return "COPY cannot run in a background worker's batch; use INSERT ... SELECT.";
		case T_AlterSystemStmt:
		case T_CreatedbStmt:
		case T_DropdbStmt:
		case T_CreateTableSpaceStmt:
		case T_DropTableSpaceStmt:
		case T_ReindexStmt:
		case T_ClusterStmt:
		case T_LoadStmt:
		case T_DiscardStmt:
			return "It cannot run inside the batch's transaction, or changes the server or the worker's session.";
		case T_DeclareCursorStmt:
		case T_PrepareStmt:
		case T_DeallocateStmt:
			return "Cursors and prepared statements would outlive the batch.";
		case T_IndexStmt:
			if (((IndexStmt *) stmt)->concurrent)
				return "CREATE INDEX CONCURRENTLY cannot run inside a transaction.";
			return NULL;
		case T_VariableSetStmt:
			{
				VariableSetStmt *v = (VariableSetStmt *) stmt;

				if (v->name && (strcmp(v->name, "role") == 0 ||
								strcmp(v->name, "session_authorization") == 0))
					return "The SQL runs as the pipeline's owner and cannot change role.";
				if (v->kind == VAR_SET_MULTI)
					return "Transaction characteristics are the worker's to set.";
				return NULL;
			}
		default:
			return NULL;
	}
}

/*
 * Parse and analyze the pipeline's SQL against an empty batch, as the
 * current user with the current search_path: syntax and reference errors
 * are reported now, with their position.  SPI connected.
 */
void
PipelineValidateSql(const char *sql)
{
	PipelineValidateSqlFor(sql, false);
}

/* ... against the batch of a Kafka source (kafka) or of a stream */
void
PipelineValidateSqlFor(const char *sql, bool kafka)
{
	TupleDesc	desc = kafka ? KafkaEventTupleDesc() : SgEventTupleDesc();
	Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
	SPIPlanPtr	plan;
	List	   *sources;
	ListCell   *lc;

	if (sql[strspn(sql, " \t\r\n;")] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pipeline SQL must not be empty")));
	PipelineRegisterBatch(store, desc, 0);
	plan = SPI_prepare(sql, 0, NULL);
	if (plan == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("invalid pipeline SQL: %s", SPI_result_code_string(SPI_result))));
	sources = SPI_plan_get_plan_sources(plan);
	foreach(lc, sources)
	{
		CachedPlanSource *ps = lfirst(lc);
		const char *why;

		if (ps->raw_parse_tree == NULL)
			continue;
		why = sg_statement_refused(ps->raw_parse_tree->stmt);
		if (why)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pipeline SQL must not contain %s", ps->commandTag == CMDTAG_UNKNOWN ?
							"transaction control" : GetCommandTagName(ps->commandTag)),
					 errdetail("%s", why)));
	}
	SPI_freeplan(plan);
	SPI_unregister_relation("batch");
	tuplestore_end(store);
}

/*
 * The output columns of the pipeline's SQL, quoted and comma-separated (the
 * COPY column list of a remote sink), or NULL when the SQL is not a single
 * SELECT.
 */
char *
PipelineOutputColumns(const char *sql)
{
	List	   *names = PipelineOutputNames(sql);
	StringInfoData cols;
	ListCell   *lc;

	if (names == NIL)
		return NULL;
	initStringInfo(&cols);
	foreach(lc, names)
		appendStringInfo(&cols, "%s%s", cols.len ? ", " : "", quote_identifier(lfirst(lc)));
	return cols.data;
}

/*
 * The conflict columns of an upserting remote sink (sink_on_conflict): each
 * an output column of the SELECT, each once, none NULL.  The SELECT may not
 * have columns named streamguard_*: the staging table's own columns.
 * Returns them quoted and comma-separated, for ON CONFLICT (...).
 */
char *
PipelineCheckSinkConflict(const char *sql, ArrayType *arr)
{
	List	   *names = PipelineOutputNames(sql);
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i,
				j;
	ListCell   *lc;
	StringInfoData buf;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_on_conflict must be a one-dimensional array of column names")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_on_conflict must name at least one column")));
	foreach(lc, names)
	{
		if (strncmp((char *) lfirst(lc), "streamguard_", 12) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the SQL of an upserting pipeline may not return a column named \"%s\"",
							(char *) lfirst(lc)),
					 errdetail("Names starting with streamguard_ are taken by the staging table on the sink.")));
	}
	initStringInfo(&buf);
	for (i = 0; i < n; i++)
	{
		char	   *name;
		bool		found = false;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("sink_on_conflict must not contain NULL")));
		name = TextDatumGetCString(elems[i]);
		for (j = 0; j < i; j++)
			if (!nulls[j] && strcmp(name, TextDatumGetCString(elems[j])) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("column \"%s\" appears twice in sink_on_conflict", name)));
		foreach(lc, names)
			found |= strcmp(name, (char *) lfirst(lc)) == 0;
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("sink_on_conflict column \"%s\" is not an output column of the pipeline's SQL", name),
					 errhint("Name the columns as the SELECT returns them; the names are case-sensitive.")));
		appendStringInfo(&buf, "%s%s", i ? ", " : "", quote_identifier(name));
	}
	return buf.data;
}

char *
PipelineValidateSelect(const char *sql)
{
	char	   *cols = PipelineOutputColumns(sql);

	if (cols == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the SQL of a pipeline with a remote sink must be a single SELECT"),
				 errdetail("Its rows are copied into the remote table, matched by column name.")));
	return cols;
}

/* "schema.table" or "table", each part quoted */
char *
PipelineQuoteTable(const char *name)
{
	List	   *parts = stringToQualifiedNameList(name);
	StringInfoData buf;
	ListCell   *lc;

	if (list_length(parts) > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid sink table name \"%s\"", name)));
	initStringInfo(&buf);
	foreach(lc, parts)
		appendStringInfo(&buf, "%s%s", buf.len ? "." : "", quote_identifier(strVal(lfirst(lc))));
	return buf.data;
}

/*
 * Check a remote sink now, as the creating role: reachable, table there
 * with the columns the SQL produces, and 2PC available if asked for.
 */
static void sg_check_remote_sink_on(SgRemote *rp, const char *server, const char *table,
									const char *cols, SgSinkMode mode, const char *conflict);

/*
 * The bookkeeping tables of ours a sink mode needs on the remote: created
 * now if the remote role may; if it may not, one error names every table
 * that is missing and the hint gives everything a remote administrator
 * runs (not one table per attempt).
 */
typedef struct SgRemoteTable
{
	const char *relname;
	const char *ddl;
} SgRemoteTable;

static void
sg_ensure_remote_tables(SgRemote *rp, const char *server, const SgRemoteTable *tables, int n)
{
	StringInfoData missing,
				ddl,
				names;
	bool		may_create = false;
	bool	   *exists = palloc(sizeof(bool) * n);
	int			nmissing = 0;
	int			i;

	initStringInfo(&missing);
	initStringInfo(&ddl);
	initStringInfo(&names);
	for (i = 0; i < n; i++)
	{
		const char *params[1] = {tables[i].relname};
		SgRemoteResult *res;

		res = RemoteExec(rp, "SELECT pg_catalog.to_regclass($1) IS NOT NULL, "
						 "pg_catalog.has_schema_privilege('public', 'CREATE')", 1, params);
		exists[i] = strcmp(RemoteGetValue(res, 0, 0), "t") == 0;
		may_create = strcmp(RemoteGetValue(res, 0, 1), "t") == 0;
		if (!exists[i])
		{
			appendStringInfo(&missing, "%s%s", nmissing ? " and " : "", tables[i].relname);
			appendStringInfo(&names, "%s%s", nmissing ? ", " : "", tables[i].relname);
			appendStringInfo(&ddl, "%s;%s", tables[i].ddl, " ");
			nmissing++;
		}
		RemoteClear(res);
	}
	if (nmissing == 0)
		return;
	if (!may_create)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s %s %s not exist on remote server \"%s\" and its user may not create %s",
						nmissing > 1 ? "tables" : "table", missing.data, nmissing > 1 ? "do" : "does",
						server, nmissing > 1 ? "them" : "it"),
				 errhint("On the remote, as a role with CREATE on schema public, run: %s"
						 "then GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO the pipeline's remote user.",
						 ddl.data, names.data)));
	for (i = 0; i < n; i++)
		if (!exists[i])
			RemoteExecOk(rp, tables[i].ddl);
}

void
PipelineCheckRemoteSink(const char *server, const char *table, const char *cols, SgSinkMode mode,
						const char *conflict)
{
	SgRemote	r;

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, GetUserId());
	PG_TRY();
	{
		sg_check_remote_sink_on(&r, server, table, cols, mode, conflict);
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
}

static void
sg_check_remote_sink_on(SgRemote *rp, const char *server, const char *table, const char *cols,
						SgSinkMode mode, const char *conflict)
{
	SgRemoteResult *res;

	RemoteClear(RemoteExec(rp, psprintf("SELECT %s FROM %s LIMIT 0", cols, table), 0, NULL));
	if (conflict)
	{
		/* the remote plans it only with a unique index on exactly these columns */
		RemoteClear(RemoteExec(rp, psprintf("EXPLAIN INSERT INTO %s (%s) SELECT %s FROM %s WHERE false "
											"ON CONFLICT (%s) DO NOTHING", table, cols, cols, table, conflict),
							   0, NULL));
		res = RemoteExec(rp, "SELECT pg_catalog.has_schema_privilege('public', 'CREATE')", 0, NULL);
		if (strcmp(RemoteGetValue(res, 0, 0), "t") != 0)
		{
			RemoteClear(res);
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("the user of remote server \"%s\" may not create the staging table of an upserting sink",
							server),
					 errdetail("An upserting sink copies each batch into an unlogged table of the pipeline's in schema public of the remote."),
					 errhint("GRANT CREATE ON SCHEMA public to the pipeline's remote user.")));
		}
		RemoteClear(res);
	}
	if (mode == SG_SINK_TWO_PHASE)
	{
		res = RemoteExec(rp, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int", 0, NULL);
		if (atoi(RemoteGetValue(res, 0, 0)) <= 0)
		{
			RemoteClear(res);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("remote server \"%s\" has max_prepared_transactions = 0", server),
					 errdetail("sink_mode two_phase needs prepared transactions on the remote server."),
					 errhint("Set max_prepared_transactions > 0 there and restart it, or use sink_mode => 'offsets'.")));
		}
		RemoteClear(res);
		/* each batch's transaction id, written with its rows (in-doubt resolution) */
		{
			static const SgRemoteTable marker[] = {
				{"public.streamguard_sink_marker",
				"CREATE TABLE public.streamguard_sink_marker (pipeline text PRIMARY KEY, gid text NOT NULL)"},
			};

			sg_ensure_remote_tables(rp, server, marker, lengthof(marker));
		}
	}
	else
	{
		/* the positions, and the dead letters committed with the rows (sink_remote_write.c) */
		static const SgRemoteTable offsets[] = {
			{"public.streamguard_sink_offsets",
				"CREATE TABLE public.streamguard_sink_offsets ("
				"pipeline text NOT NULL, partition int NOT NULL, position bigint NOT NULL,"
			" PRIMARY KEY (pipeline, partition))"},
			{"public.streamguard_sink_dead_letters",
				"CREATE TABLE public.streamguard_sink_dead_letters ("
				"pipeline text NOT NULL, partition int NOT NULL, seq bigint NOT NULL,"
				" key text, payload jsonb, dedup_key text, appended_at timestamptz,"
			" error text, sqlstate text, PRIMARY KEY (pipeline, partition, seq))"},
		};

		sg_ensure_remote_tables(rp, server, offsets, lengthof(offsets));
	}
}

/* the stream on a remote server: its partition count, or an error */
int
PipelineCheckRemoteSource(const char *server, const char *stream)
{
	SgRemote	r;
	SgRemoteResult *res;
	const char *params[1] = {stream};
	int			nparts;

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, GetUserId());
	PG_TRY();
	{
		res = RemoteExec(&r, "SELECT partitions FROM streamguard.streams WHERE stream = $1", 1, params);
		if (RemoteNTuples(res) != 1)
		{
			RemoteClear(res);
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" does not exist on server \"%s\"", stream, server)));
		}
		nparts = atoi(RemoteGetValue(res, 0, 0));
		RemoteClear(res);
		/* the remote checks our read privilege at every read; check it now too */
		RemoteClear(RemoteExec(&r, "SELECT count(*) FROM streamguard.read($1, 0, 0, 1)", 1, params));
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
	return nparts;
}

/*
 * A reset of a remote source to `seq` (partition < 0: every partition)
 * must stay within the remote stream, as a seek does locally: a position
 * past its end would silently skip the events appended there until the
 * stream catches up.  Asks the remote as the pipeline's owner.
 */
void
PipelineCheckRemoteReset(int32 pipeline_id, Oid owner, int32 partition, int64 seq)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(pipeline_id)};
	char	   *server;
	const char *params[1];
	SgRemote	r;
	SgRemoteResult *res;
	int			i,
				bad = -1;
	int64		bad_next = 0;

	if (SPI_execute_with_args("SELECT source_server, remote_stream FROM streamguard.pipeline "
							  "WHERE id OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pipeline %d vanished", pipeline_id);
	server = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	params[0] = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

	memset(&r, 0, sizeof(r));
	RemoteConnect(&r, server, owner);
	PG_TRY();
	{
		res = RemoteExec(&r, "SELECT partition, next_seq FROM streamguard.stream_partitions "
						 "WHERE stream OPERATOR(pg_catalog.=) $1 ORDER BY partition", 1, params);
		for (i = 0; i < RemoteNTuples(res); i++)
		{
			int			p = atoi(RemoteGetValue(res, i, 0));
			int64		next_seq = strtoll(RemoteGetValue(res, i, 1), NULL, 10);

			if ((partition < 0 || p == partition) && seq > next_seq && bad < 0)
			{
				bad = p;
				bad_next = next_seq;
			}
		}
		RemoteClear(res);
	}
	PG_FINALLY();
	{
		RemoteDisconnect(&r);
	}
	PG_END_TRY();
	if (bad >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seq %lld is out of range for partition %d of stream \"%s\" on server \"%s\"",
						(long long) seq, bad, params[0], server),
				 errdetail("Valid seqs are 1 to %lld.", (long long) bad_next)));
}

void
PipelineCheckBatchSize(int32 n)
{
	if (n < 1 || n > SG_MAX_BATCH_SIZE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_size must be between 1 and %d, got %d", SG_MAX_BATCH_SIZE, n)));
}

/*
 * Retries of a failing batch: how many attempts before isolation (1 to
 * 1000), the first backoff and the longest (10 ms to 1 hour, doubling).
 */
void
PipelineCheckRetry(int32 max_attempts, Interval *backoff, Interval *max_backoff)
{
	int64		b = SgIntervalUsecs(backoff);
	int64		m = SgIntervalUsecs(max_backoff);

	if (max_attempts < 1 || max_attempts > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be between 1 and 1000, got %d", max_attempts)));
	if (b < 10000 || b > 3600 * USECS_PER_SEC || m < 10000 || m > 3600 * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_backoff and max_backoff must be between 10 milliseconds and 1 hour")));
	if (m < b)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_backoff must not be shorter than retry_backoff")));
}

/* a bound on each run of the SQL: 1 second to 24 days (milliseconds in an int) */
void
PipelineCheckBatchTimeout(Interval *iv)
{
	int64		us = SgIntervalUsecs(iv);

	if (us < USECS_PER_SEC || us / 1000 > INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_timeout must be between 1 second and 24 days, got \"%s\"",
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv))))));
}

void
PipelineCheckWorkers(int32 workers)
{
	if (workers < 1 || workers > SG_MAX_PIPELINE_WORKERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("workers must be between 1 and %d, got %d", SG_MAX_PIPELINE_WORKERS, workers)));
}

/*
 * Several workers with a remote end: remote PostgreSQL sources and sinks
 * take them (each worker its own connections and partitions: its remote
 * positions, its partitions' offsets on the sink, its own gids and marker;
 * source_remote.c, sink_remote*.c, twophase.c).  A Kafka source or sink has one client,
 * one set of offsets or one checkpoint per pipeline: it runs with one
 * worker.
 */
void
PipelineCheckWorkersRemote(int32 workers, const char *source_server, const char *sink_server)
{
	if (workers > 1 && ((source_server && KafkaIsKafkaServer(source_server)) ||
						(sink_server && KafkaIsKafkaServer(sink_server))))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a pipeline with a Kafka source or sink runs with one worker"),
				 errhint("Use workers => 1, or a local pipeline feeding several.")));
}

/*
 * A Kafka source: the caller's USAGE on the server, and the topic's
 * partitions from the cluster (an unknown topic or an unreachable cluster
 * is an error now, within streamguard.remote_timeout).
 */
int
PipelineCheckKafkaSource(const char *server, const char *topic)
{
	SgKafka    *k = KafkaConsumerOpen(server, GetUserId(), "streamguard-check");
	int			nparts;

	PG_TRY();
	{
		nparts = KafkaTopicPartitions(k, topic, KafkaDeadline());
	}
	PG_FINALLY();
	{
		KafkaClose(k);
	}
	PG_END_TRY();
	return nparts;
}
