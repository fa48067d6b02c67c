/*-------------------------------------------------------------------------
 *
 * util.c
 *		Small helpers every module uses, at the bottom of the layers (they
 *		call no other file of ours): the entry checks of the SQL functions,
 *		name and argument checks, the worker session's pinned settings, and
 *		starting a dynamic background worker of ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "lib/stringinfo.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/ps_status.h"
#include "pgstat.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/util.h"

/* set by _PG_init when loaded through shared_preload_libraries */
bool		SgLoaded = false;

/*
 * Settings that our own SQL must not take from anybody else.  A background
 * worker of ours connects as the bootstrap superuser and picks up the
 * database's and role's settings (ALTER DATABASE ... SET, which a database
 * owner may run): a search_path naming a schema of theirs would let their
 * functions and operators stand in for built-in ones in our statements.
 * Session-level values outrank those, and everything a pipeline's SQL sets
 * is rolled back after each batch (worker.c), so these hold for the life
 * of the worker.
 *
 * jit is off for another reason: a worker runs the same small statements
 * batch after batch, and PostgreSQL compiles a plan anew at every
 * execution once its estimated cost passes jit_above_cost -- which the
 * generic plan of a statement over a never-analyzed state table does
 * easily (10-15 ms of compiling for a batch of 100 events).  A pipeline
 * whose SQL gains from it says SET LOCAL jit = on in that SQL.
 */
void
SgHardenWorkerSession(void)
{
	static const char *const settings[][2] = {
		{"search_path", "pg_catalog, pg_temp"},
		{"default_table_access_method", "heap"},
		{"default_tablespace", ""},
		{"temp_tablespaces", ""},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_deferrable", "off"},
		{"transform_null_equals", "off"},
		{"statement_timeout", "0"},
		{"lock_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
		{"datestyle", "ISO, MDY"},
		{"intervalstyle", "postgres"},
		{"extra_float_digits", "3"},
		{"row_security", "on"},
		{"check_function_bodies", "on"},
		{"jit", "off"},
	};
	int			i;

	for (i = 0; i < lengthof(settings); i++)
		SetConfigOption(settings[i][0], settings[i][1], PGC_SUSET, PGC_S_SESSION);
}

/*
 * Every SQL entry point calls this first.
 */
void
StreamguardCheckLoaded(void)
{
	if (!SgLoaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("streamguard must be loaded via shared_preload_libraries"),
				 errhint("Add streamguard to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Reading, seeking and appending need the registry of in-flight appends,
 * which only the primary has: a standby would load its counters once from
 * replayed data and read past appends still open on the primary.
 */
void
SgCheckPrimary(const char *function)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("streamguard.%s() cannot run on a hot standby", function),
				 errdetail("A standby cannot tell which appends are still in flight on the primary."),
				 errhint("Run it on the primary.")));
}

/*
 * An entry point that writes (events, positions, catalog rows) refuses a
 * read-only transaction and a standby up front, with its own name, rather
 * than failing later inside one of its SQL statements ("cannot execute
 * SELECT FOR KEY SHARE in a read-only transaction", with the extension's
 * SQL as context).  what: what the function writes ("it moves the
 * consumer's position").
 */
void
SgCheckWritable(const char *function, const char *what)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("streamguard.%s() cannot run on a hot standby", function),
				 errdetail("It writes to the database: %s.", what),
				 errhint("Run it on the primary.")));
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("streamguard.%s() cannot run in a read-only transaction", function),
				 errdetail("It writes to the database: %s.", what),
				 errhint("Run it in a read-write transaction.")));
}

/*
 * `s` on one line, for a message shown in a view's column: every run of
 * spaces, tabs and line breaks becomes one space, none at either end.
 * palloc'd.
 */
char *
SgOneLine(const char *s)
{
	StringInfoData buf;
	bool		space = false;

	initStringInfo(&buf);
	for (; *s; s++)
	{
		if (*s == '\n' || *s == '\r' || *s == '\t' || *s == ' ')
		{
			space = buf.len > 0;
			continue;
		}
		if (space)
			appendStringInfoChar(&buf, ' ');
		space = false;
		appendStringInfoChar(&buf, *s);
	}
	return buf.data;
}

/*
 * Names of streams and consumers: 1..63 bytes of letters, digits, '_' and
 * '-', starting with a letter or '_'.  They are only ever used as values,
 * but a strict alphabet keeps them safe to print and to quote.
 */
void
SgCheckName(const char *what, const char *name)
{
	size_t		len = strlen(name);
	const char *c;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s name must not be empty", what)));
	if (len > SG_MAX_NAME_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s name \"%s\" is too long", what, name),
				 errdetail("The name is %zu bytes; the limit is %d.", len, SG_MAX_NAME_LEN)));
	for (c = name; *c; c++)
	{
		bool		ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			*c == '_' || (c != name && ((*c >= '0' && *c <= '9') || *c == '-'));

		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid %s name \"%s\"", what, name),
					 errdetail("Names may contain letters, digits, \"_\" and \"-\", and must start with a letter or \"_\".")));
	}
}

/*
 * A required text argument: NULL is refused with the parameter's name.
 */
char *
SgTextArg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", what)));
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The signature a C symbol that both the 0.1 and the 0.2 scripts bind
 * (create_pipeline, alter_pipeline, poll) is called with: true for 0.1's,
 * false for 0.2's, an internal error for any other.  The symbol's SQL
 * declaration is the only thing that tells the two apart, and it shows
 * only in the number of arguments (pg_stat_statements tells its 1.0 and
 * 1.1, which share a symbol too, apart the same way: by the number of
 * columns the declaration returns).  The 0.3 scripts bind a symbol of
 * their own to each function, which knows its signature: this is the one
 * place that counts a call's arguments.
 */
bool
SgCalledAs01(FunctionCallInfo fcinfo, const char *function, int nargs_0_1, int nargs_0_2)
{
	int			nargs = PG_NARGS();

	if (nargs == nargs_0_1)
		return true;
	if (nargs != nargs_0_2)
		elog(ERROR, "%s called with %d arguments, expected %d (0.1) or %d (0.2)",
			 function, nargs, nargs_0_1, nargs_0_2);
	return false;
}

/*
 * Add a valid OID to a set kept as an array of at most `max` (no repeats);
 * returns the new count.
 */
int
SgAddOid(Oid *set, int n, int max, Oid oid)
{
	int			i;

	if (!OidIsValid(oid))
		return n;
	for (i = 0; i < n; i++)
		if (set[i] == oid)
			return n;
	if (n < max)
		set[n++] = oid;
	return n;
}

/*
 * Start a dynamic worker of ours that connects to the current or a given
 * database; its handle lives in TopMemoryContext (it outlives transactions).
 * Returns NULL, having logged why, when no worker slot is free.
 */
/*
 * Name this worker for people: the process title (ps, top) and
 * application_name in pg_stat_activity both say what it works on, e.g.
 * "streamguard pipeline order_totals" or "streamguard maintenance db=shop".
 * application_name is cut at NAMEDATALEN - 1 bytes, the title is not.
 */
void
SgSetWorkerTitle(const char *title)
{
	init_ps_display(title);
	pgstat_report_appname(title);
}

BackgroundWorkerHandle *
SgStartDynamicWorker(const char *function, const char *type, const char *name,
					 Datum arg, Oid dbid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	MemoryContext oldcxt;
	bool		ok;

	/* pg_upgrade's servers run no worker of ours (see _PG_init) */
	if (IsBinaryUpgrade)
		return NULL;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "streamguard");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
	worker.bgw_main_arg = arg;
	memcpy(worker.bgw_extra, &dbid, sizeof(Oid));
	worker.bgw_notify_pid = MyProcPid;
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ok = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(oldcxt);
	if (!ok)
	{
		/* retried every round: say so once a minute, not every round */
		static TimestampTz last_report = 0;
		TimestampTz now = GetCurrentTimestamp();

		if (last_report == 0 ||
			TimestampDifferenceExceeds(last_report, now, 60 * 1000))
		{
			last_report = now;
			ereport(LOG,
					(errmsg("%s could not be started: no background worker slot is free", name),
					 errhint("Raise max_worker_processes; each database with streamguard needs one worker slot and each running pipeline one more.")));
		}
		return NULL;
	}
	return handle;
}

/* --------------------------------------------------------------- quotas */

/*
 * Creating a stream or pipeline: see ownership.c for why a create takes a
 * self-conflicting lock on the owning role.
 */

/*
 * Serialize creations for one role, and against DROP ROLE of it.  Fails if
 * the role was dropped meanwhile.
 */
void
SgLockRoleForCreate(Oid roleid)
{
	LockSharedObject(AuthIdRelationId, roleid, 0, ShareUpdateExclusiveLock);
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(roleid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", roleid)));
}

void
SgCheckRoleQuota(const char *what, Oid roleid, int64 have, int64 adding, int limit,
				 const char *guc)
{
	if (limit < 0 || superuser_arg(roleid) || have + adding <= limit)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("role \"%s\" may own at most %d %s in this database",
					GetUserNameFromId(roleid, false), limit, what),
			 errdetail("The role owns %lld; this would add %lld.",
					   (long long) have, (long long) adding),
			 errhint("A superuser can raise %s for the role with ALTER ROLE ... SET.", guc)));
}

/*
 * Serialize the creations of this database that count against a
 * per-database cap (every role's): a self-conflicting lock on the
 * extension, which DROP EXTENSION also waits for.  Taken after the role's
 * lock (SgLockRoleForCreate), never before.
 */
void
SgLockDatabaseForCreate(void)
{
	LockDatabaseObject(ExtensionRelationId, get_extension_oid("streamguard", false), 0,
					   ShareUpdateExclusiveLock);
}

/* a per-database cap of -1: three quarters of the server-wide size */
int
SgDatabaseCap(int setting, int server_size)
{
	if (setting >= 0)
		return setting;
	return Max(server_size * 3 / 4, 1);
}

/*
 * A per-database cap on a server-wide shared-memory table: `have` in this
 * database, `adding` more.  Superusers are not exempt: the table is the
 * server's.
 */
void
SgCheckDatabaseCap(const char *what, int64 have, int64 adding, int cap, const char *guc)
{
	if (have + adding <= cap)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("database \"%s\" may hold at most %d %s", get_database_name(MyDatabaseId), cap, what),
			 errdetail("The database holds %lld; this would add %lld.  The %s are shared by every database of the server.",
					   (long long) have, (long long) adding, what),
			 errhint("A superuser can raise %s for the database with ALTER DATABASE ... SET.", guc)));
}

/*
 * The enum value of `word` in a closed vocabulary, or an error that lists
 * the valid words.
 */
int
SgParseWord(const SgWordList *list, const char *word)
{
	StringInfoData valid;
	int			n;
	int			i;

	for (n = 0; list->words[n] != NULL; n++)
		if (strcmp(list->words[n], word) == 0)
			return n;
	initStringInfo(&valid);
	for (i = 0; i < n; i++)
		appendStringInfo(&valid, "%s\"%s\"", i == 0 ? "" : i == n - 1 ? " and " : ", ",
						 list->words[i]);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s \"%s\"", list->what, word),
			 errhint("Valid %s are %s.", list->plural, valid.data)));
	return -1;					/* keep compiler quiet */
}

const char *
SgWordName(const SgWordList *list, int value)
{
	int			i;

	for (i = 0; list->words[i] != NULL; i++)
		if (i == value)
			return list->words[i];
	elog(ERROR, "no %s with value %d", list->what, value);
	return NULL;				/* keep compiler quiet */
}

/*
 * The first two arguments of the consumer functions (stream, consumer),
 * checked, after the entry checks; `function` names a function that
 * writes (refused on a standby), NULL for one that may run anywhere.
 */
void
SgConsumerArgs(FunctionCallInfo fcinfo, const char *function, char **stream, char **consumer)
{
	StreamguardCheckLoaded();
	if (function)
		SgCheckPrimary(function);
	*stream = SgTextArg(fcinfo, 0, "stream name");
	*consumer = SgTextArg(fcinfo, 1, "consumer name");
	SgCheckName("consumer", *consumer);
}

/*
 * A word of a closed vocabulary as a query parameter for the column that
 * stores it: of the column's enum type streamguard.<typname>, or text
 * under a 0.1 schema, which the 0.2 library serves until ALTER EXTENSION
 * ... UPDATE.  *type gets the parameter's type; word NULL gives a NULL
 * of that type ((Datum) 0).
 */
Datum
SgWordParam(const char *typname, const char *word, Oid *type)
{
	Oid			nsp = get_namespace_oid("streamguard", false);
	Oid			typid = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
										CStringGetDatum(typname), ObjectIdGetDatum(nsp));

	if (!OidIsValid(typid))
	{
		*type = TEXTOID;
		return word ? CStringGetTextDatum(word) : (Datum) 0;
	}
	*type = typid;
	return word ? DirectFunctionCall2(enum_in, CStringGetDatum(word), ObjectIdGetDatum(typid)) : (Datum) 0;
}

/* "major.minor" as one number, or -1 */
static int
sg_version_number(const char *v)
{
	int			major,
				minor;
	char		rest;

	if (v == NULL || sscanf(v, "%d.%d%c", &major, &minor, &rest) != 2 ||
		major < 0 || minor < 0 || minor >= 1000)
		return -1;
	return major * 1000 + minor;
}

/*
 * NULL if this library serves the SQL objects of version `extversion`;
 * else what is wrong (an error message) and, in *hint, what to do.
 */
char *
SgCatalogVersionProblem(const char *extversion, const char *dbname, char **hint)
{
	int			v = sg_version_number(extversion);

	*hint = NULL;
	if (v >= sg_version_number(SG_OLDEST_SQL_VERSION) && v <= sg_version_number(SG_LIBRARY_VERSION))
		return NULL;
	if (v >= 0 && v < sg_version_number(SG_OLDEST_SQL_VERSION))
		*hint = psprintf("Run ALTER EXTENSION streamguard UPDATE in database \"%s\".", dbname);
	else
		*hint = psprintf("Install the streamguard library that the SQL objects of version %s belong to.",
						 extversion ? extversion : "?");
	return psprintf("the streamguard library %s serves SQL versions %s to %s, but database \"%s\" has version %s: "
					"its pipelines and backfills do not run",
					SG_LIBRARY_VERSION, SG_OLDEST_SQL_VERSION, SG_LIBRARY_VERSION, dbname,
					extversion ? extversion : "?");
}

/*
 * Whether streamguard's catalog has table `relname`: an older catalog,
 * which this library serves until ALTER EXTENSION ... UPDATE, may not (and
 * none exists before CREATE EXTENSION).  Syscache look-ups only; asked at
 * each use, since the update may commit while a worker runs.
 */
bool
SgCatalogHas(const char *relname)
{
	Oid			nsp = get_namespace_oid("streamguard", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid(relname, nsp));
}

/*
 * Whether the catalog is 0.3's: a pipeline's counters and last error in
 * streamguard.pipeline_stats, a remote source's stream_id NULL.  A 0.2
 * catalog has them in streamguard.pipeline and 0 for that stream_id.
 */
bool
SgPipelineStatsCatalog(void)
{
	return SgCatalogHas("pipeline_stats");
}

/*
 * The first two arguments of the capture functions (table, stream),
 * checked, after the entry checks of a function that writes.  With
 * stream_required false a NULL stream gives *stream = NULL.
 */
void
SgTableStreamArgs(FunctionCallInfo fcinfo, const char *function, bool stream_required,
				  Oid *relid, char **stream)
{
	StreamguardCheckLoaded();
	SgCheckPrimary(function);
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("tab must not be NULL")));
	*relid = PG_GETARG_OID(0);
	*stream = NULL;
	if (stream_required || !PG_ARGISNULL(1))
	{
		*stream = SgTextArg(fcinfo, 1, "stream name");
		SgCheckName("stream", *stream);
	}
}

/*
 * The six event columns of relation "batch" (and of streamguard.event) as
 * the first attributes of `desc`, which has room for them; a source with
 * more columns (Kafka) adds its own after them.
 */
void
SgEventColumns(TupleDesc desc)
{
	TupleDescInitEntry(desc, 1, "partition", INT4OID, -1, 0);
	TupleDescInitEntry(desc, 2, "seq", INT8OID, -1, 0);
	TupleDescInitEntry(desc, 3, "key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 4, "payload", JSONBOID, -1, 0);
	TupleDescInitEntry(desc, 5, "dedup_key", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 6, "appended_at", TIMESTAMPTZOID, -1, 0);
}

/*
 * The first step of every background worker's loop: exit when the
 * postmaster is gone.  A worker that always has work (a pipeline with a
 * backlog, a backfill of a large table) never reaches the WaitLatch whose
 * WL_EXIT_ON_PM_DEATH would end it, and while it runs the postmaster
 * cannot be started again ("pre-existing shared memory block is still in
 * use").  PostmasterIsAlive is a cheap check of a flag the death signal
 * sets; the crash restart that follows recovers what the worker had not
 * committed.
 */
void
SgExitIfPostmasterDead(void)
{
	if (!PostmasterIsAlive())
		proc_exit(1);
}

/*
 * The first step of each round of a worker's loop that works in a
 * database (pipeline, maintenance, backfill): exit when the postmaster is
 * gone, then report the round's table statistics.  A backend reports them
 * when it goes idle (PostgresMain); a background worker's own loop must do
 * it, or the tables only its workers write (sinks, the checkpoint log,
 * window state, the dedup keys) look untouched to autovacuum, which then
 * never vacuums or analyzes them, until the worker exits.
 * pgstat_report_stat(false) flushes at most about once a second; it must
 * run outside a transaction.
 */
void
SgWorkerLoopTop(void)
{
	SgExitIfPostmasterDead();
	if (!IsTransactionOrTransactionBlock())
		(void) pgstat_report_stat(false);
}

/*
 * Whether the extension is still installed in this database, asked by a
 * worker outside a transaction after a failure: DROP EXTENSION takes the
 * database's pipelines and backfills with it, and a worker whose work went
 * with it exits instead of retrying.
 */
bool
SgExtensionPresent(void)
{
	bool		present;

	Assert(!IsTransactionOrTransactionBlock());
	StartTransactionCommand();
	present = OidIsValid(get_extension_oid("streamguard", true));
	CommitTransactionCommand();
	return present;
}
