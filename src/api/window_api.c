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
 * owner (window.c keeps its rows); create_pipeline's implementation
 * (PipelineCreate, pipeline.c) creates the pipeline itself, with every
 * check it makes, in the same transaction as the window's definition.
 * The expressions are pasted into that SELECT, so they are checked to
 * leave it one SELECT with one output column each.
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
#include "api/pipeline_validate.h"
#include "api/window_api.h"
#include "catalog/pipeline_catalog.h"
#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/compat.h"
#include "core/util.h"
#include "pipeline/batchexec.h"
#include "pipeline/pipeline.h"
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
 * create_window_pipeline's arguments, checked, and what they make: the
 * SELECT over "batch" that evaluates the window's columns, the names and
 * functions of its aggregates, the checked target.
 */
typedef struct SgWindowArgs
{
	char	   *name;
	char	   *source;
	char	   *target;			/* a table, or NULL ... */
	char	   *target_stream;	/* ... and a stream instead */
	SgWindowKind kind;
	int64		size_us;
	int64		slide_us;		/* hopping windows; -1 otherwise */
	bool		append_time;	/* no time expression: the append time */
	char	   *time_expr;
	char	   *key_expr;
	SgWindowEmit emit;
	int64		lateness_us;
	int64		idle_us;		/* -1: no idle_timeout */
	SgWindowLate late;
	char	   *policy;			/* parsed where create_pipeline parses it */
	char	   *start_from;		/* ... and this */
	StringInfoData sql;			/* the evaluation over "batch" */
	int			naggs;
	Datum	   *names;			/* the aggregates' columns (text) */
	Datum	   *funcs;			/* ... and functions (text) */
	char	   *qual_target;	/* the target table, qualified */
} SgWindowArgs;

/*
 * The arguments but the aggregates, each checked, in the order of the
 * signature: the window (kind, size, slide), its time and key, what it
 * emits and how it treats late events, then the pipeline's settings.
 */
static void
sg_window_args(FunctionCallInfo fcinfo, SgWindowArgs *a)
{
	memset(a, 0, sizeof(*a));
	a->slide_us = -1;
	a->idle_us = -1;
	a->name = SgTextArg(fcinfo, WA_NAME, "pipeline name");
	a->source = SgTextArg(fcinfo, WA_SOURCE, "source");
	a->target = PG_ARGISNULL(WA_TARGET) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TARGET));
	a->target_stream = PG_ARGISNULL(WA_TARGET_STREAM) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TARGET_STREAM));
	if ((a->target == NULL) == (a->target_stream == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("give a window pipeline either a target table or a target_stream")));
	a->kind = (SgWindowKind) SgParseWord(&SgWindowKindWords, SgTextArg(fcinfo, WA_KIND, "kind"));
	a->size_us = sg_window_interval(fcinfo, WA_SIZE, a->kind == SG_WINDOW_SESSION ? "gap" : "size", false,
									SG_MAX_WINDOW_LENGTH_US);
	if (a->kind == SG_WINDOW_HOPPING)
	{
		int64		per_event;

		a->slide_us = sg_window_interval(fcinfo, WA_SLIDE, "slide", false, SG_MAX_WINDOW_LENGTH_US);
		if (a->slide_us > a->size_us)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("slide must not be longer than size"),
					 errdetail("Events between two hopping windows would belong to none.")));
		/* each event goes into this many windows (window_apply.c) */
		per_event = (a->size_us + a->slide_us - 1) / a->slide_us;
		if (per_event > sg_max_windows_per_event)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a hopping window of size %s and slide %s puts each event into %lld windows, more than the %d allowed",
							sg_usecs_text(a->size_us), sg_usecs_text(a->slide_us), (long long) per_event,
							sg_max_windows_per_event),
					 errhint("Use a longer slide, or ask a superuser to raise streamguard.max_windows_per_event.")));
	}
	else if (!PG_ARGISNULL(WA_SLIDE))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slide is for hopping windows only")));
	a->append_time = PG_ARGISNULL(WA_TIME);
	a->time_expr = a->append_time ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(WA_TIME));
	a->key_expr = SgTextArg(fcinfo, WA_KEY, "key");
	a->emit = (SgWindowEmit) SgParseWord(&SgWindowEmitWords, SgTextArg(fcinfo, WA_EMIT, "emit"));
	a->lateness_us = sg_window_interval(fcinfo, WA_LATENESS, "allowed_lateness", true, SG_MAX_WINDOW_HORIZON_US);
	if (!PG_ARGISNULL(WA_IDLE))
		a->idle_us = sg_window_interval(fcinfo, WA_IDLE, "idle_timeout", true, SG_MAX_WINDOW_HORIZON_US);
	a->late = (SgWindowLate) SgParseWord(&SgWindowLateWords, SgTextArg(fcinfo, WA_LATE, "late"));
	if (a->append_time && (a->lateness_us != 0 || a->idle_us >= 0 || a->late != SG_LATE_DROP))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("allowed_lateness, idle_timeout and late are for event time"),
				 errdetail("An append-time window closes when the readable horizon of every partition has passed its end: no event is ever late.")));
	if ((a->late == SG_LATE_UPDATE) != !PG_ARGISNULL(WA_KEEP_CLOSED))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep_closed goes with late => 'update', and only with it"),
				 errdetail("It says how long a closed window's state is kept for late events to correct it.")));
	if (a->late == SG_LATE_UPDATE)
		(void) sg_window_interval(fcinfo, WA_KEEP_CLOSED, "keep_closed", false, SG_MAX_WINDOW_HORIZON_US);
	if (PG_ARGISNULL(WA_BATCH_SIZE))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("batch_size must not be NULL")));
	a->policy = SgTextArg(fcinfo, WA_POLICY, "error_policy");
	a->start_from = SgTextArg(fcinfo, WA_START, "start_from");
}

/*
 * The aggregates, {"column": "func(expr)", ...}: each checked, and the
 * SELECT over "batch" that evaluates the window's columns (partition,
 * seq, time, key, then one per aggregate), checked to be one SELECT with
 * that many columns.
 */
static void
sg_window_aggregates(FunctionCallInfo fcinfo, SgWindowArgs *a)
{
	Jsonb	   *aggs;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			maxaggs;

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
	a->names = palloc(sizeof(Datum) * maxaggs);
	a->funcs = palloc(sizeof(Datum) * maxaggs);
	initStringInfo(&a->sql);
	appendStringInfo(&a->sql, "SELECT partition, seq, streamguard._window_time((%s)::pg_catalog.timestamptz), "
					 "(%s)::pg_catalog.text",
					 a->append_time ? "appended_at" : a->time_expr, a->key_expr);
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
		a->names[a->naggs] = CStringGetTextDatum(aname);
		a->funcs[a->naggs] = CStringGetTextDatum(SgWordName(&SgWindowAggWords, agg));
		a->naggs++;
		if (expr == NULL)
			appendStringInfoString(&a->sql, ", 1::pg_catalog.numeric");
		else
			appendStringInfo(&a->sql, ", (%s)::pg_catalog.numeric", expr);
	}
	appendStringInfoString(&a->sql, " FROM batch");
	sg_check_eval_shape(a->sql.data, SG_WEVAL_FIRST_AGG + a->naggs);
}

/*
 * Where the windows go, checked for the owner: a table that fits them
 * (a->qual_target), or a stream the owner may append to that is not the
 * source.  SPI connected.
 */
static void
sg_window_check_target(SgWindowArgs *a, Oid owner)
{
	if (a->target)
		a->qual_target = sg_check_target(a->target, owner, a->emit, a->kind == SG_WINDOW_SESSION,
										 a->late == SG_LATE_UPDATE && a->emit == SG_EMIT_ON_CLOSE,
										 a->naggs, a->names);
	else
	{
		/* the owner appends the windows: it must be allowed to, now and at run time */
		int32		out_id = StreamLookup(a->target_stream, SG_PRIV_APPEND)->stream_id;

		if (StreamLookup(a->source, SG_PRIV_NONE)->stream_id == out_id)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a window pipeline cannot append its windows to its own source stream")));
		a->qual_target = NULL;
	}
}

/*
 * The pipeline, with every check create_pipeline makes, in its order (its
 * own checks of the settings fixed here cannot fail).
 */
static void
sg_window_create_pipeline(const SgWindowArgs *a, int32 batch_size)
{
	SgPipelineSpec spec;

	memset(&spec, 0, sizeof(spec));
	spec.name = a->name;
	SgCheckName("pipeline", a->name);
	spec.source = a->source;
	spec.sql = a->sql.data;
	spec.guarantee = SG_EXACTLY_ONCE;
	spec.batch_size = batch_size;
	PipelineCheckBatchSize(spec.batch_size);
	spec.policy = (SgErrorPolicy) SgParseWord(&SgErrorPolicyWords, a->policy);
	spec.dedup = false;
	spec.dedup_window = DatumGetIntervalP(sg_interval_datum("1 hour"));
	spec.batch_timeout = DatumGetIntervalP(sg_interval_datum("5 min"));
	spec.allow_source_append = false;
	spec.max_attempts = 3;
	spec.retry_backoff = DatumGetIntervalP(sg_interval_datum("100 ms"));
	spec.max_backoff = DatumGetIntervalP(sg_interval_datum("5 s"));
	spec.workers = 1;
	spec.start_from = (SgStartFrom) SgParseWord(&SgStartFromWords, a->start_from);
	spec.sink_mode = SG_SINK_TWO_PHASE;
	PipelineCreate(&spec);
}

/* the window's definition, in the transaction that creates its pipeline */
static void
sg_window_def_insert(FunctionCallInfo fcinfo, const SgWindowArgs *a)
{
	Oid			types[15];
	Datum		values[15];
	char		nulls[15];
	SgUserSave	save;
	int			ret;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(a->name);
	types[0] = TEXTOID;
	values[1] = SgWordParam("window_kind", SgWordName(&SgWindowKindWords, a->kind), &types[1]);
	values[2] = PG_GETARG_DATUM(WA_SIZE);
	types[2] = INTERVALOID;
	values[3] = PG_ARGISNULL(WA_SLIDE) ? (Datum) 0 : PG_GETARG_DATUM(WA_SLIDE);
	nulls[3] = PG_ARGISNULL(WA_SLIDE) ? 'n' : ' ';
	types[3] = INTERVALOID;
	values[4] = a->append_time ? (Datum) 0 : CStringGetTextDatum(a->time_expr);
	nulls[4] = a->append_time ? 'n' : ' ';
	types[4] = TEXTOID;
	values[5] = CStringGetTextDatum(a->key_expr);
	types[5] = TEXTOID;
	values[6] = PointerGetDatum(construct_array(a->names, a->naggs, TEXTOID, -1, false, TYPALIGN_INT));
	types[6] = TEXTARRAYOID;
	values[7] = PointerGetDatum(construct_array(a->funcs, a->naggs, TEXTOID, -1, false, TYPALIGN_INT));
	types[7] = TEXTARRAYOID;
	values[8] = a->qual_target ? CStringGetTextDatum(a->qual_target) : (Datum) 0;
	nulls[8] = a->qual_target ? ' ' : 'n';
	types[8] = TEXTOID;
	values[13] = a->target_stream ? CStringGetTextDatum(a->target_stream) : (Datum) 0;
	nulls[13] = a->target_stream ? ' ' : 'n';
	types[13] = TEXTOID;
	values[14] = PG_ARGISNULL(WA_KEEP_CLOSED) ? (Datum) 0 : PG_GETARG_DATUM(WA_KEEP_CLOSED);
	nulls[14] = PG_ARGISNULL(WA_KEEP_CLOSED) ? 'n' : ' ';
	types[14] = INTERVALOID;
	values[9] = SgWordParam("window_emit", SgWordName(&SgWindowEmitWords, a->emit), &types[9]);
	values[10] = PG_GETARG_DATUM(WA_LATENESS);
	types[10] = INTERVALOID;
	values[11] = PG_ARGISNULL(WA_IDLE) ? (Datum) 0 : PG_GETARG_DATUM(WA_IDLE);
	nulls[11] = PG_ARGISNULL(WA_IDLE) ? 'n' : ' ';
	types[11] = INTERVALOID;
	values[12] = SgWordParam("window_late", SgWordName(&SgWindowLateWords, a->late), &types[12]);
	SgBecomeDataOwner(&save, true);
	ret = SPI_execute_with_args("INSERT INTO streamguard.window_def (pipeline_id, kind, size, slide, "
								"time_expr, key_expr, agg_names, agg_funcs, target, emit, "
								"allowed_lateness, idle_timeout, late, target_stream, keep_closed) "
								"SELECT p.id, $2, $3, $4, $5, $6, $7, "
								"$8::text[]::streamguard.window_agg[], $9, $10, $11, $12, $13, $14, $15 "
								"FROM streamguard.pipeline p WHERE p.name OPERATOR(pg_catalog.=) $1",
								15, types, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT || SPI_processed != 1)
		elog(ERROR, "could not record the window of pipeline \"%s\"", a->name);
	SgRestoreUser(&save);
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
	SgWindowArgs a;

	SgCheckWritable("create_window_pipeline", "it creates the pipeline");
	StreamguardCheckLoaded();
	SgCheckPrimary("create_window_pipeline");
	sg_window_args(fcinfo, &a);
	sg_window_aggregates(fcinfo, &a);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sg_window_check_target(&a, GetUserId());
	sg_window_create_pipeline(&a, PG_GETARG_INT32(WA_BATCH_SIZE));
	sg_window_def_insert(fcinfo, &a);
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
