/*-------------------------------------------------------------------------
 *
 * window_api.c
 *		create_window_pipeline: a pipeline that aggregates its events into
 *		windows and emits each window's row into a table (docs/windows.md).
 *
 * The window is declared, not written as SQL: its kind and size, which
 * time (append time, or an expression over the event), the key and the
 * aggregates.  The user's expressions become one SELECT over "batch" that
 * is stored as the pipeline's SQL and runs, like any pipeline's SQL, as the
 * owner (window.c keeps its rows); create_pipeline creates the pipeline
 * itself, with every check it makes, in the same transaction as the
 * window's definition.  The expressions are pasted into that SELECT, so
 * they are checked to leave it one SELECT with one output column each.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "common/int.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/pipeline.h"
#include "api/window_api.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "pipeline/batchexec.h"
#include "pipeline/window.h"

PG_FUNCTION_INFO_V1(sg_create_window_pipeline);
PG_FUNCTION_INFO_V1(sg_window_time);

int			sg_max_windows_per_event = SG_DEFAULT_WINDOWS_PER_EVENT;

/* the arguments of create_window_pipeline */
enum
{
	WA_NAME, WA_SOURCE, WA_TARGET, WA_SIZE, WA_AGGREGATES, WA_KIND, WA_SLIDE, WA_TIME,
	WA_KEY, WA_EMIT, WA_LATENESS, WA_IDLE, WA_LATE, WA_BATCH_SIZE, WA_POLICY, WA_START,
	WA_TARGET_STREAM, WA_KEEP_CLOSED, WA_NARGS
};

/* an interval of microseconds, as interval_out writes it */
static char *
sg_usecs_text(int64 us)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->day = (int32) (us / USECS_PER_DAY);
	iv->time = us % USECS_PER_DAY;
	return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)));
}

/*
 * A window's interval argument in microseconds: days count as 24 hours,
 * months are refused, and so is anything longer than max_us (bounds.h).
 */
static int64
sg_window_interval(FunctionCallInfo fcinfo, int arg, const char *what, bool zero_ok, int64 max_us)
{
	Interval   *iv;
	int64		us;
	bool		overflow;

	if (PG_ARGISNULL(arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", what)));
	iv = PG_GETARG_INTERVAL_P(arg);
	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be given in months or years", what),
				 errdetail("A window needs a fixed length; a day counts as 24 hours."),
				 errhint("Give it in days, hours, minutes or seconds.")));
	overflow = pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us);
	if (!overflow && (us < 0 || (us == 0 && !zero_ok)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be %s, got \"%s\"", what, zero_ok ? "zero or more" : "positive",
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv))))));
	if (overflow || us > max_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most %s, got \"%s\"", what, sg_usecs_text(max_us),
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv))))));
	return us;
}

/* one aggregate "func(expr)": its function, and the expression (NULL: *) */
static SgWindowAgg
sg_parse_aggregate(const char *name, const char *def, char **expr)
{
	const char *open = strchr(def, '(');
	const char *close = strrchr(def, ')');
	char	   *fn;
	char	   *inner;
	int			i;

	if (open == NULL || close == NULL || close < open ||
		close[1 + strspn(close + 1, " \t\r\n")] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid aggregate \"%s\": \"%s\"", name, def),
				 errhint("Write an aggregate as \"count(*)\", or count, sum, min, max or avg of an expression over the event, such as \"sum((payload->>'amount')::numeric)\".")));
	fn = pnstrdup(def + strspn(def, " \t\r\n"), open - (def + strspn(def, " \t\r\n")));
	for (i = strlen(fn) - 1; i >= 0 && strchr(" \t\r\n", fn[i]); i--)
		fn[i] = '\0';
	for (i = 0; fn[i]; i++)
		fn[i] = pg_tolower((unsigned char) fn[i]);
	inner = pnstrdup(open + 1, close - open - 1);
	if (strcmp(fn, "count") == 0 && strcmp(inner + strspn(inner, " \t\r\n"), "*") == 0)
	{
		*expr = NULL;
		return SG_AGG_COUNT;
	}
	if (inner[strspn(inner, " \t\r\n")] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("aggregate \"%s\" has no argument", name)));
	*expr = inner;
	return (SgWindowAgg) SgParseWord(&SgWindowAggWords, fn);
}

/*
 * The generated SELECT must be what we built: one plain SELECT from batch
 * with our columns.  A user expression that closed our parentheses and
 * went on (a second statement, a comment, a UNION) changes that shape.
 */
static void
sg_check_eval_shape(const char *sql, int ncols)
{
	List	   *stmts = raw_parser(sql, RAW_PARSE_DEFAULT);
	SelectStmt *sel;

	if (list_length(stmts) == 1 && IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
	{
		sel = (SelectStmt *) ((RawStmt *) linitial(stmts))->stmt;
		if (sel->op == SETOP_NONE && list_length(sel->targetList) == ncols &&
			list_length(sel->fromClause) == 1 && sel->whereClause == NULL &&
			sel->groupClause == NIL && sel->havingClause == NULL && sel->windowClause == NIL &&
			sel->sortClause == NIL && sel->limitCount == NULL && sel->limitOffset == NULL &&
			sel->lockingClause == NIL && sel->withClause == NULL && sel->distinctClause == NIL &&
			sel->intoClause == NULL)
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the window's expressions must each be one SQL expression over the event"),
			 errdetail("The expressions of time, key and aggregates are placed into one SELECT over relation \"batch\".")));
}

static void
sg_check_agg_name(const char *name)
{
	if (name[0] == '\0' || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid aggregate name \"%s\"", name),
				 errdetail("An aggregate's name is the target column it is written to.")));
	if (strcmp(name, "window_start") == 0 || strcmp(name, "window_end") == 0 || strcmp(name, "key") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("aggregate name \"%s\" is taken by a window column", name),
				 errdetail("The target gets window_start, window_end and key besides the aggregates.")));
}

/*
 * With emit => 'on_update' rows are upserted by (window_start, key): a NULL
 * key (NULL keys form one group) must find its row again.  True when the
 * target's key column is NOT NULL, or a unique index on exactly these two
 * columns, without a predicate, treats NULLs as equal (NULLS NOT DISTINCT).
 */
static bool
sg_target_upserts_null_keys(Oid relid)
{
	AttrNumber	ws = get_attnum(relid, "window_start");
	AttrNumber	k = get_attnum(relid, "key");
	HeapTuple	tup;
	Relation	rel;
	List	   *indexes;
	ListCell   *lc;
	bool		ok = false;

	if (ws == InvalidAttrNumber || k == InvalidAttrNumber)
		return true;			/* the statement check reports it */
	tup = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid), Int16GetDatum(k));
	if (HeapTupleIsValid(tup))
	{
		ok = ((Form_pg_attribute) GETSTRUCT(tup))->attnotnull;
		ReleaseSysCache(tup);
	}
	if (ok)
		return true;
	rel = table_open(relid, AccessShareLock);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Form_pg_index idx;

		tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		if (!HeapTupleIsValid(tup))
			continue;
		idx = (Form_pg_index) GETSTRUCT(tup);
		if (idx->indisunique && idx->indisvalid && idx->indnullsnotdistinct && idx->indnkeyatts == 2 &&
			heap_attisnull(tup, Anum_pg_index_indpred, NULL) &&
			((idx->indkey.values[0] == ws && idx->indkey.values[1] == k) ||
			 (idx->indkey.values[0] == k && idx->indkey.values[1] == ws)))
			ok = true;
		ReleaseSysCache(tup);
		if (ok)
			break;
	}
	list_free(indexes);
	table_close(rel, AccessShareLock);
	return ok;
}

/*
 * The target table, resolved now as the caller: its schema-qualified,
 * quoted name, and a check, by planning the statements that will write it
 * (privileges, columns, types, and for on_update the unique index they
 * need), while the definition is at hand.  SPI connected.
 */
static char *
sg_check_target(const char *target, Oid owner, SgWindowEmit emit, bool session, bool revisions, int naggs,
				Datum *names)
{
	bool		retractions = revisions && session;
	bool		deletes = emit == SG_EMIT_ON_UPDATE && session;
	List	   *qn = stringToQualifiedNameList(target);
	Oid			relid = RangeVarGetRelid(makeRangeVarFromNameList(qn), NoLock, false);
	char		kind = get_rel_relkind(relid);
	char	   *qual;
	StringInfoData cols;
	StringInfoData sql;
	TupleDesc	desc;
	Tuplestorestate *store;
	int			i;

	if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("window target \"%s\" is not a table", target)));
	if (pg_class_aclcheck(relid, owner, ACL_INSERT) != ACLCHECK_OK ||
		(emit == SG_EMIT_ON_UPDATE && pg_class_aclcheck(relid, owner, ACL_UPDATE) != ACLCHECK_OK) ||
		(deletes && pg_class_aclcheck(relid, owner, ACL_DELETE) != ACLCHECK_OK))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", get_rel_name(relid)),
				 errdetail("A window pipeline inserts%s its windows' rows as its owner.",
						   deletes ? ", updates and deletes" :
						   emit == SG_EMIT_ON_UPDATE ? " and updates" : "")));
	qual = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), get_rel_name(relid));

	desc = CreateTemplateTupleDesc(3 + (revisions ? 1 : 0) + (retractions ? 1 : 0) + naggs);
	TupleDescInitEntry(desc, 1, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 2, "window_end", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 3, "key", TEXTOID, -1, 0);
	initStringInfo(&cols);
	appendStringInfoString(&cols, "window_start, window_end, key");
	if (revisions)
	{
		TupleDescInitEntry(desc, 4, "revision", INT4OID, -1, 0);
		appendStringInfoString(&cols, ", revision");
	}
	if (retractions)
	{
		TupleDescInitEntry(desc, 5, "retracted", BOOLOID, -1, 0);
		appendStringInfoString(&cols, ", retracted");
	}
	for (i = 0; i < naggs; i++)
	{
		char	   *n = TextDatumGetCString(names[i]);

		TupleDescInitEntry(desc, 4 + (revisions ? 1 : 0) + (retractions ? 1 : 0) + i, n, NUMERICOID, -1, 0);
		appendStringInfo(&cols, ", %s", quote_identifier(n));
	}
	TupleDescFinalize(desc);
	desc = BlessTupleDesc(desc);
	initStringInfo(&sql);
	appendStringInfo(&sql, "EXPLAIN (COSTS OFF) INSERT INTO %s (%s) SELECT * FROM batch", qual, cols.data);
	if (emit == SG_EMIT_ON_UPDATE)
		appendStringInfoString(&sql, " ON CONFLICT (window_start, key) DO UPDATE SET window_end = excluded.window_end");
	store = tuplestore_begin_heap(false, false, work_mem);
	PipelineRegisterBatch(store, desc, 0);
	if (SPI_execute(sql.data, false, 0) < 0)
		elog(ERROR, "could not check the window target");
	if (emit == SG_EMIT_ON_UPDATE && !sg_target_upserts_null_keys(relid))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("window target \"%s\" would get a new row for a NULL key at every update", target),
				 errdetail("With emit => 'on_update' rows are upserted by (window_start, key), and its unique index "
						   "treats NULL keys as distinct."),
				 errhint("Declare the key column NOT NULL, or the index UNIQUE NULLS NOT DISTINCT (window_start, key).")));
	if (deletes)
	{
		/* merged sessions: the rows of the sessions they took in are deleted */
		resetStringInfo(&sql);
		appendStringInfo(&sql, "EXPLAIN (COSTS OFF) DELETE FROM %s t USING batch b "
						 "WHERE t.window_start = b.window_start AND t.key IS NOT DISTINCT FROM b.key", qual);
		if (SPI_execute(sql.data, false, 0) < 0)
			elog(ERROR, "could not check the window target");
	}
	SPI_unregister_relation("batch");
	tuplestore_end(store);
	return qual;
}

static Datum
sg_interval_datum(const char *s)
{
	return DirectFunctionCall3(interval_in, CStringGetDatum(s), ObjectIdGetDatum(InvalidOid),
							   Int32GetDatum(-1));
}

/*
 * create_window_pipeline(name, source, target, size, aggregates, kind,
 *						  slide, time, key, emit, allowed_lateness,
 *						  idle_timeout, late, batch_size, error_policy,
 *						  start_from)
 */
Datum
sg_create_window_pipeline(PG_FUNCTION_ARGS)
{
	char	   *name,
			   *source,
			   *target,
			   *target_stream,
			   *time_expr,
			   *key_expr,
			   *policy,
			   *start_from;
	SgWindowKind kind;
	SgWindowEmit emit;
	SgWindowLate late;
	int64		size_us,
				slide_us = -1,
				lateness_us,
				idle_us = -1;
	bool		append_time;
	Jsonb	   *aggs;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			naggs = 0,
				maxaggs;
	Datum	   *names,
			   *funcs;
	StringInfoData sql;
	char	   *qual_target;
	Oid			owner = GetUserId();

	StreamguardCheckLoaded();
	SgCheckPrimary("create_window_pipeline");
	name = SgTextArg(fcinfo, WA_NAME, "pipeline name");
	source = SgTextArg(fcinfo, WA_SOURCE, "source");
	target = PG_ARGISNULL(WA_TARGET) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TARGET));
	target_stream = PG_ARGISNULL(WA_TARGET_STREAM) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TARGET_STREAM));
	if ((target == NULL) == (target_stream == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("give a window pipeline either a target table or a target_stream")));
	kind = (SgWindowKind) SgParseWord(&SgWindowKindWords, SgTextArg(fcinfo, WA_KIND, "kind"));
	size_us = sg_window_interval(fcinfo, WA_SIZE, kind == SG_WINDOW_SESSION ? "gap" : "size", false,
								 SG_MAX_WINDOW_LENGTH_US);
	if (kind == SG_WINDOW_HOPPING)
	{
		int64		per_event;

		slide_us = sg_window_interval(fcinfo, WA_SLIDE, "slide", false, SG_MAX_WINDOW_LENGTH_US);
		if (slide_us > size_us)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("slide must not be longer than size"),
					 errdetail("Events between two hopping windows would belong to none.")));
		/* each event goes into this many windows (window.c) */
		per_event = (size_us + slide_us - 1) / slide_us;
		if (per_event > sg_max_windows_per_event)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a hopping window of size %s and slide %s puts each event into %lld windows, more than the %d allowed",
							sg_usecs_text(size_us), sg_usecs_text(slide_us), (long long) per_event,
							sg_max_windows_per_event),
					 errhint("Use a longer slide, or ask a superuser to raise streamguard.max_windows_per_event.")));
	}
	else if (!PG_ARGISNULL(WA_SLIDE))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slide is for hopping windows only")));
	append_time = PG_ARGISNULL(WA_TIME);
	time_expr = append_time ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TIME));
	key_expr = SgTextArg(fcinfo, WA_KEY, "key");
	emit = (SgWindowEmit) SgParseWord(&SgWindowEmitWords, SgTextArg(fcinfo, WA_EMIT, "emit"));
	lateness_us = sg_window_interval(fcinfo, WA_LATENESS, "allowed_lateness", true, SG_MAX_WINDOW_HORIZON_US);
	if (!PG_ARGISNULL(WA_IDLE))
		idle_us = sg_window_interval(fcinfo, WA_IDLE, "idle_timeout", true, SG_MAX_WINDOW_HORIZON_US);
	late = (SgWindowLate) SgParseWord(&SgWindowLateWords, SgTextArg(fcinfo, WA_LATE, "late"));
	if (append_time && (lateness_us != 0 || idle_us >= 0 || late != SG_LATE_DROP))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("allowed_lateness, idle_timeout and late are for event time"),
				 errdetail("An append-time window closes when the readable horizon of every partition has passed its end: no event is ever late.")));
	if ((late == SG_LATE_UPDATE) != !PG_ARGISNULL(WA_KEEP_CLOSED))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep_closed goes with late => 'update', and only with it"),
				 errdetail("It says how long a closed window's state is kept for late events to correct it.")));
	if (late == SG_LATE_UPDATE)
		(void) sg_window_interval(fcinfo, WA_KEEP_CLOSED, "keep_closed", false, SG_MAX_WINDOW_HORIZON_US);
	if (PG_ARGISNULL(WA_BATCH_SIZE))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("batch_size must not be NULL")));
	policy = SgTextArg(fcinfo, WA_POLICY, "error_policy");
	start_from = SgTextArg(fcinfo, WA_START, "start_from");

	/* aggregates: {"column": "func(expr)", ...} */
	if (PG_ARGISNULL(WA_AGGREGATES))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("aggregates must not be NULL")));
	aggs = PG_GETARG_JSONB_P(WA_AGGREGATES);
	if (!JB_ROOT_IS_OBJECT(aggs) || JB_ROOT_COUNT(aggs) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("aggregates must be a non-empty JSON object"),
				 errhint("For example '{\"orders\": \"count(*)\", \"total\": \"sum((payload->>''amount'')::numeric)\"}'.")));
	maxaggs = JB_ROOT_COUNT(aggs);
	names = palloc(sizeof(Datum) * maxaggs);
	funcs = palloc(sizeof(Datum) * maxaggs);
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT partition, seq, streamguard._window_time((%s)::pg_catalog.timestamptz), "
					 "(%s)::pg_catalog.text",
					 append_time ? "appended_at" : time_expr, key_expr);
	it = JsonbIteratorInit(&aggs->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *aname;
		char	   *def;
		char	   *expr;
		SgWindowAgg agg;

		if (tok != WJB_KEY)
			continue;
		aname = pnstrdup(v.val.string.val, v.val.string.len);
		sg_check_agg_name(aname);
		tok = JsonbIteratorNext(&it, &v, true);
		if (tok != WJB_VALUE || v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("aggregate \"%s\" must be given as a string", aname)));
		def = pnstrdup(v.val.string.val, v.val.string.len);
		agg = sg_parse_aggregate(aname, def, &expr);
		names[naggs] = CStringGetTextDatum(aname);
		funcs[naggs] = CStringGetTextDatum(SgWordName(&SgWindowAggWords, agg));
		naggs++;
		if (expr == NULL)
			appendStringInfoString(&sql, ", 1::pg_catalog.numeric");
		else
			appendStringInfo(&sql, ", (%s)::pg_catalog.numeric", expr);
	}
	appendStringInfoString(&sql, " FROM batch");
	sg_check_eval_shape(sql.data, SG_WEVAL_FIRST_AGG + naggs);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (target)
		qual_target = sg_check_target(target, owner, emit, kind == SG_WINDOW_SESSION,
									  late == SG_LATE_UPDATE && emit == SG_EMIT_ON_CLOSE, naggs, names);
	else
	{
		/* the owner appends the windows: it must be allowed to, now and at run time */
		int32		out_id = StreamLookup(target_stream, SG_PRIV_APPEND)->stream_id;

		if (StreamLookup(source, SG_PRIV_NONE)->stream_id == out_id)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a window pipeline cannot append its windows to its own source stream")));
		qual_target = NULL;
	}

	/* the pipeline, with every check create_pipeline makes */
	{
		LOCAL_FCINFO(cp, 19);
		Datum		args[19];
		int			a;

		InitFunctionCallInfoData(*cp, NULL, 19, InvalidOid, NULL, NULL);
		args[0] = CStringGetTextDatum(name);
		args[1] = CStringGetTextDatum(source);
		args[2] = CStringGetTextDatum(sql.data);
		args[3] = CStringGetTextDatum("exactly_once");
		args[4] = PG_GETARG_DATUM(WA_BATCH_SIZE);
		args[5] = CStringGetTextDatum(policy);
		args[6] = BoolGetDatum(false);
		args[7] = sg_interval_datum("1 hour");
		args[8] = CStringGetTextDatum(start_from);
		args[12] = CStringGetTextDatum("two_phase");
		args[13] = sg_interval_datum("5 min");
		args[14] = BoolGetDatum(false);
		args[15] = Int32GetDatum(3);
		args[16] = sg_interval_datum("100 ms");
		args[17] = sg_interval_datum("5 s");
		args[18] = Int32GetDatum(1);
		for (a = 0; a < 19; a++)
		{
			cp->args[a].isnull = (a >= 9 && a <= 11);
			cp->args[a].value = cp->args[a].isnull ? (Datum) 0 : args[a];
		}
		(void) sg_create_pipeline(cp);
	}

	/* the window's definition, in the same transaction */
	{
		Oid			types[15];
		Datum		values[15];
		char		nulls[15];
		SgUserSave	save;
		int			ret;

		memset(nulls, ' ', sizeof(nulls));
		values[0] = CStringGetTextDatum(name);
		types[0] = TEXTOID;
		values[1] = SgWordParam("window_kind", SgWordName(&SgWindowKindWords, kind), &types[1]);
		values[2] = PG_GETARG_DATUM(WA_SIZE);
		types[2] = INTERVALOID;
		values[3] = PG_ARGISNULL(WA_SLIDE) ? (Datum) 0 : PG_GETARG_DATUM(WA_SLIDE);
		nulls[3] = PG_ARGISNULL(WA_SLIDE) ? 'n' : ' ';
		types[3] = INTERVALOID;
		values[4] = append_time ? (Datum) 0 : CStringGetTextDatum(time_expr);
		nulls[4] = append_time ? 'n' : ' ';
		types[4] = TEXTOID;
		values[5] = CStringGetTextDatum(key_expr);
		types[5] = TEXTOID;
		values[6] = PointerGetDatum(construct_array(names, naggs, TEXTOID, -1, false, TYPALIGN_INT));
		types[6] = TEXTARRAYOID;
		values[7] = PointerGetDatum(construct_array(funcs, naggs, TEXTOID, -1, false, TYPALIGN_INT));
		types[7] = TEXTARRAYOID;
		values[8] = qual_target ? CStringGetTextDatum(qual_target) : (Datum) 0;
		nulls[8] = qual_target ? ' ' : 'n';
		types[8] = TEXTOID;
		values[13] = target_stream ? CStringGetTextDatum(target_stream) : (Datum) 0;
		nulls[13] = target_stream ? ' ' : 'n';
		types[13] = TEXTOID;
		values[14] = PG_ARGISNULL(WA_KEEP_CLOSED) ? (Datum) 0 : PG_GETARG_DATUM(WA_KEEP_CLOSED);
		nulls[14] = PG_ARGISNULL(WA_KEEP_CLOSED) ? 'n' : ' ';
		types[14] = INTERVALOID;
		values[9] = SgWordParam("window_emit", SgWordName(&SgWindowEmitWords, emit), &types[9]);
		values[10] = PG_GETARG_DATUM(WA_LATENESS);
		types[10] = INTERVALOID;
		values[11] = PG_ARGISNULL(WA_IDLE) ? (Datum) 0 : PG_GETARG_DATUM(WA_IDLE);
		nulls[11] = PG_ARGISNULL(WA_IDLE) ? 'n' : ' ';
		types[11] = INTERVALOID;
		values[12] = SgWordParam("window_late", SgWordName(&SgWindowLateWords, late), &types[12]);
		SgBecomeDataOwner(&save, true);
		ret = SPI_execute_with_args("INSERT INTO streamguard.window_def (pipeline_id, kind, size, slide, "
									"time_expr, key_expr, agg_names, agg_funcs, target, emit, "
									"allowed_lateness, idle_timeout, late, target_stream, keep_closed) "
									"SELECT p.id, $2, $3, $4, $5, $6, $7, "
									"$8::text[]::streamguard.window_agg[], $9, $10, $11, $12, $13, $14, $15 "
									"FROM streamguard.pipeline p WHERE p.name OPERATOR(pg_catalog.=) $1",
									15, types, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT || SPI_processed != 1)
			elog(ERROR, "could not record the window of pipeline \"%s\"", name);
		SgRestoreUser(&save);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * _window_time(t): an event's time, which must be known and finite (an
 * error here is the event's: the pipeline's error policy applies).
 */
Datum
sg_window_time(PG_FUNCTION_ARGS)
{
	TimestampTz t;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the event's time is NULL")));
	t = PG_GETARG_TIMESTAMPTZ(0);
	if (TIMESTAMP_NOT_FINITE(t))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("the event's time is infinite")));
	PG_RETURN_TIMESTAMPTZ(t);
}
