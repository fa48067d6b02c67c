/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  sgctl verify: the exactly-once check after an incident.  Compares the
 *	  ids of a stream's events with the ids of a sink table's rows and
 *	  counts duplicates (an id with more rows in the sink than events in
 *	  the stream: more than once, or for an id several events share, more
 *	  than once each), lost ids (in the stream, not in the sink) and
 *	  phantoms (in the sink, not in the stream).
 *
 * The event id is an SQL expression over the event's columns (payload,
 * key, partition, seq, dedup_key, appended_at), the sink id a column or
 * expression over the sink's row; both are compared as text.  These two
 * expressions and the optional filters are SQL fragments written by the
 * caller and run with the caller's privileges, exactly as if typed into
 * psql: sgctl puts them in parentheses inside one statement each (libpq's
 * extended protocol runs one statement per call) inside a READ ONLY
 * transaction, but does not sandbox them.  Every other value (stream name,
 * sink name) travels as a parameter; the sink's name is resolved by the
 * server (to_regclass, the caller's search_path) and spliced in as the
 * server prints the resulting regclass, quoted and schema-qualified.
 *
 * The events are read partition by partition with streamguard.read()
 * (retained events below the readable horizon, read privilege needed)
 * into a temporary table; the sink's ids into another; one query then
 * compares them.  The sink is read in the same REPEATABLE READ snapshot
 * as the comparison; a pipeline still running moves on meanwhile, so
 * verify after it caught up (lag 0) or paused.
 *
 *-------------------------------------------------------------------------
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "sgctl.h"

#define VERIFY_CHUNK "10000"

static void
usage(FILE *out)
{
	fprintf(out,
			"Exactly-once check: compare a stream's events with the rows of its sink table.\n\n"
			"Usage:\n"
			"  sgctl verify --stream=STREAM --sink=TABLE --id=EXPR [OPTIONS]\n\n"
			"Options:\n"
			"  --stream=STREAM         the stream the pipeline reads\n"
			"  --sink=TABLE            the sink table (schema-qualified or on the search_path)\n"
			"  --id=EXPR               SQL expression giving an event's id, over the event's\n"
			"                          columns payload, key, partition, seq, dedup_key, appended_at;\n"
			"                          e.g. \"(payload->>'id')::bigint\"\n"
			"  --sink-id=EXPR          column or expression giving a sink row's id (default: id);\n"
			"  --key=EXPR              the same as --sink-id\n"
			"  --event-where=COND      only events for which COND holds (over the same columns)\n"
			"  --where=COND            only sink rows for which COND holds\n"
			"  --show=N                list up to N example ids of each kind (default 10)\n"
			"  --json                  print the result as one JSON object\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"Ids are compared as text.  The expressions are SQL run with your privileges\n"
			"(in a read-only transaction); give them only trusted text.\n"
			"Exit status: 0 no duplicates, lost events, phantoms or missing ids; 3 some found;\n"
			"1 error; 2 usage.\n");
}

/* the sink's regclass as the server prints it (quoted, qualified), or NULL */
static char *
resolve_sink(PGconn *conn, const char *sink, const char *user_path)
{
	const char *params[1];
	PGresult   *res;
	char	   *oid = NULL;
	char	   *name = NULL;
	static const char *const lookups[] = {
		"SELECT c.oid, c.relkind FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)",
		"SELECT c.oid, c.relkind FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.quote_ident($1))",
		NULL
	};
	int			i;

	/* look the name up on the caller's own search_path */
	params[0] = user_path;
	res = SgExecOk(conn, "SELECT pg_catalog.set_config('search_path', $1, false)", 1, params);
	if (res == NULL)
		return NULL;
	PQclear(res);
	for (i = 0; lookups[i] && oid == NULL; i++)
	{
		params[0] = sink;
		/* a name that is not valid SQL syntax fails the first lookup: fine */
		res = SgExec(conn, lookups[i], 1, params);
		if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		{
			char		kind = PQgetvalue(res, 0, 1)[0];

			if (strchr("rvmpf", kind) == NULL)
			{
				SgError("\"%s\" is not a table or view", sink);
				PQclear(res);
				return NULL;
			}
			oid = strdup(PQgetvalue(res, 0, 0));
		}
		PQclear(res);
	}
	res = SgExecOk(conn, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)", 0, NULL);
	if (res == NULL)
		return NULL;
	PQclear(res);
	if (oid == NULL)
	{
		SgError("sink table \"%s\" does not exist", sink);
		return NULL;
	}
	params[0] = oid;
	res = SgExecOk(conn, "SELECT $1::pg_catalog.oid::pg_catalog.regclass::pg_catalog.text", 1, params);
	free(oid);
	if (res == NULL)
		return NULL;
	name = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return name;
}

static bool
exec_ok(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = SgExecOk(conn, sql, n, params);

	if (res == NULL)
		return false;
	PQclear(res);
	return true;
}

/*
 * Evaluate the sink id over no rows of the sink: a column that does not
 * exist fails here, with a message that names the sink and the option.
 */
static bool
probe_sink_id(PGconn *conn, const char *sink_name, const char *sink_id, bool given)
{
	StrBuf		sql;
	PGresult   *res;
	bool		ok;

	if (!exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL))
		return false;
	SbInit(&sql);
	SbAppendf(&sql, "SELECT (%s)::pg_catalog.text FROM %s AS sink LIMIT 0", sink_id, sink_name);
	res = SgExec(conn, sql.data, 0, NULL);
	SbFree(&sql);
	if (res == NULL)
		return false;
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (!given && state != NULL && strcmp(state, "42703") == 0)
			SgError("sink %s has no column \"id\": name the sink's id column or expression with --sink-id",
					sink_name);
		else if (!(sg_interrupted && SgResultIsCancel(res)))
			SgReportResult("--sink-id", res);
	}
	PQclear(res);
	(void) exec_ok(conn, "ROLLBACK", 0, NULL);
	return ok;
}

int
CmdVerify(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"stream", required_argument, NULL, 's'},
		{"sink", required_argument, NULL, 't'},
		{"id", required_argument, NULL, 'i'},
		{"sink-id", required_argument, NULL, 'k'},
		{"key", required_argument, NULL, 'k'},
		{"where", required_argument, NULL, 'w'},
		{"event-where", required_argument, NULL, 'e'},
		{"show", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	const char *stream = NULL,
			   *sink = NULL,
			   *id_expr = NULL,
			   *sink_id = "id",
			   *where = NULL,
			   *event_where = NULL;
	int64_t		show = 10;
	bool		json = false;
	bool		sink_id_given = false;
	int			opt;
	PGconn	   *conn;
	PGresult   *res;
	char	   *sink_name = NULL;
	char	   *user_path = NULL;
	StrBuf		sql;
	int			nparts,
				p;
	int			rc = SG_EXIT_FAIL;
	char		showbuf[32];

	while ((opt = getopt_long(argc, argv, ":" SG_CONN_SHORTOPTS, longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 's':
				stream = optarg;
				break;
			case 't':
				sink = optarg;
				break;
			case 'i':
				id_expr = optarg;
				break;
			case 'k':
				sink_id = optarg;
				sink_id_given = true;
				break;
			case 'w':
				where = optarg;
				break;
			case 'e':
				event_where = optarg;
				break;
			case 'n':
				if (!SgParseInt64(optarg, &show) || show < 0 || show > 100000)
				{
					SgUsageError("verify", "--show must be between 0 and 100000");
					return SG_EXIT_USAGE;
				}
				break;
			case 'j':
				json = true;
				break;
			default:
				return SgOptionOther("verify", opt, argv, usage);
		}
	}
	if (optind < argc)
	{
		SgUsageError("verify", "unexpected argument \"%s\"", argv[optind]);
		return SG_EXIT_USAGE;
	}
	if (!stream || !sink || !id_expr)
	{
		SgUsageError("verify", "--stream, --sink and --id are required");
		return SG_EXIT_USAGE;
	}
	if (!*id_expr || !*sink_id)
	{
		SgUsageError("verify", "--id and --sink-id must not be empty");
		return SG_EXIT_USAGE;
	}
	snprintf(showbuf, sizeof(showbuf), "%lld", (long long) show);

	conn = SgConnect(copts);
	if (conn == NULL)
		return SG_EXIT_FAIL;
	SbInit(&sql);

	/* the caller's search_path, as it was before sgctl pinned its own */
	res = SgExecOk(conn, "SELECT s.reset_val FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'search_path'", 0, NULL);
	if (res == NULL)
		goto done;
	user_path = strdup(PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "\"$user\", public");
	PQclear(res);

	{
		const char *params[1] = {stream};

		res = SgExecOk(conn, "SELECT s.partitions FROM streamguard.streams s WHERE s.stream OPERATOR(pg_catalog.=) $1", 1, params);
		if (res == NULL)
			goto done;
		if (PQntuples(res) == 0)
		{
			SgError("stream \"%s\" does not exist", stream);
			PQclear(res);
			goto done;
		}
		nparts = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	sink_name = resolve_sink(conn, sink, user_path);
	if (sink_name == NULL)
		goto done;

	/*
	 * Try the sink's id on its own first (read-only, no rows), so that a bad
	 * --sink-id is reported against the sink table, not against verify's own
	 * temporary tables (whose "id" column PostgreSQL would otherwise suggest).
	 */
	if (!probe_sink_id(conn, sink_name, sink_id, sink_id_given))
		goto done;

	if (!exec_ok(conn, "CREATE TEMPORARY TABLE IF NOT EXISTS sgctl_verify_events (id pg_catalog.text)", 0, NULL) ||
		!exec_ok(conn, "CREATE TEMPORARY TABLE IF NOT EXISTS sgctl_verify_sink (id pg_catalog.text)", 0, NULL) ||
		!exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL))
		goto done;

	/* the events' ids, partition by partition, chunk by chunk */
	SbReset(&sql);
	SbAppendf(&sql,
			  "WITH e AS (SELECT * FROM streamguard.read($1, $2::pg_catalog.int4, $3::pg_catalog.int8, " VERIFY_CHUNK ")), "
			  "ins AS (INSERT INTO pg_temp.sgctl_verify_events (id) SELECT (%s)::pg_catalog.text FROM e%s%s%s) "
			  "SELECT pg_catalog.max(e.seq) FROM e",
			  id_expr, event_where ? " WHERE (" : "", event_where ? event_where : "", event_where ? ")" : "");
	for (p = 0; p < nparts; p++)
	{
		char		pbuf[16];
		char		after[32] = "0";

		snprintf(pbuf, sizeof(pbuf), "%d", p);
		for (;;)
		{
			const char *params[3] = {stream, pbuf, after};

			res = SgExecOk(conn, sql.data, 3, params);
			if (res == NULL)
				goto done;
			if (PQgetisnull(res, 0, 0))
			{
				PQclear(res);
				break;
			}
			snprintf(after, sizeof(after), "%s", PQgetvalue(res, 0, 0));
			PQclear(res);
		}
	}

	/* the sink's ids */
	SbReset(&sql);
	SbAppendf(&sql, "INSERT INTO pg_temp.sgctl_verify_sink (id) SELECT (%s)::pg_catalog.text FROM %s AS sink%s%s%s",
			  sink_id, sink_name, where ? " WHERE (" : "", where ? where : "", where ? ")" : "");
	if (!exec_ok(conn, sql.data, 0, NULL))
		goto done;

	{
		const char *params[3] = {stream, sink_name, showbuf};

		res = SgExecOk(conn,
					   "WITH ev AS (SELECT id FROM pg_temp.sgctl_verify_events), "
					   "sk AS (SELECT id FROM pg_temp.sgctl_verify_sink), "
					   /* more rows for an id than the stream has events with it: an
					    * id repeated in the stream (created, then paid) may have a
					    * row per event, or one (an upsert); one more is a duplicate */
					   "skn AS (SELECT id, pg_catalog.count(*) AS n FROM sk WHERE id IS NOT NULL GROUP BY id), "
					   "evn AS (SELECT id, pg_catalog.count(*) AS n FROM ev WHERE id IS NOT NULL GROUP BY id), "
					   "dup AS (SELECT skn.id, skn.n - evn.n + 1 AS n FROM skn JOIN evn USING (id) "
					   "        WHERE skn.n OPERATOR(pg_catalog.>) evn.n), "
					   "lost AS (SELECT id FROM ev WHERE id IS NOT NULL EXCEPT SELECT id FROM sk), "
					   "phantom AS (SELECT id FROM sk WHERE id IS NOT NULL EXCEPT SELECT id FROM ev), "
					   "r AS (SELECT "
					   " (SELECT pg_catalog.count(*) FROM ev) AS events, "
					   " (SELECT pg_catalog.count(*) FROM sk) AS sink_rows, "
					   " (SELECT pg_catalog.count(*) FROM dup) AS duplicates, "
					   " (SELECT COALESCE(pg_catalog.sum(n - 1), 0) FROM dup) AS duplicate_rows, "
					   " (SELECT pg_catalog.count(*) FROM lost) AS lost, "
					   " (SELECT pg_catalog.count(*) FROM phantom) AS phantoms, "
					   " (SELECT pg_catalog.count(*) FROM ev WHERE id IS NULL) AS events_without_id, "
					   " (SELECT pg_catalog.count(*) FROM sk WHERE id IS NULL) AS sink_rows_without_id, "
					   " (SELECT pg_catalog.count(*) FROM evn WHERE n OPERATOR(pg_catalog.>) 1) AS stream_duplicates, "
					   " ARRAY(SELECT id FROM dup ORDER BY id LIMIT $3::pg_catalog.int8) AS ex_duplicates, "
					   " ARRAY(SELECT id FROM lost ORDER BY id LIMIT $3::pg_catalog.int8) AS ex_lost, "
					   " ARRAY(SELECT id FROM phantom ORDER BY id LIMIT $3::pg_catalog.int8) AS ex_phantoms) "
					   "SELECT r.duplicates, r.lost, r.phantoms, r.events_without_id, r.sink_rows_without_id, "
					   " pg_catalog.json_build_object('stream', $1::pg_catalog.text, 'sink', $2::pg_catalog.text, "
					   "  'events', r.events, 'sink_rows', r.sink_rows, 'duplicates', r.duplicates, "
					   "  'duplicate_rows', r.duplicate_rows, 'lost', r.lost, 'phantoms', r.phantoms, "
					   "  'events_without_id', r.events_without_id, 'sink_rows_without_id', r.sink_rows_without_id, "
					   "  'stream_duplicates', r.stream_duplicates, "
					   "  'ok', r.duplicates + r.lost + r.phantoms + r.events_without_id + r.sink_rows_without_id = 0, "
					   "  'examples', pg_catalog.json_build_object('duplicates', r.ex_duplicates, 'lost', r.ex_lost, "
					   "  'phantoms', r.ex_phantoms))::pg_catalog.text, "
					   " pg_catalog.format(E'stream %s: %s events; sink %s: %s rows\\n"
					   "duplicates: %s (ids with more sink rows than events, %s extra rows)%s\\n"
					   "lost:       %s (ids in the stream, not in the sink)%s\\n"
					   "phantoms:   %s (ids in the sink, not in the stream)%s\\n"
					   "%s%s%s', "
					   "  pg_catalog.quote_ident($1), r.events, $2, r.sink_rows, "
					   "  r.duplicates, r.duplicate_rows, CASE WHEN r.duplicates > 0 THEN ': ' || pg_catalog.array_to_string(r.ex_duplicates, ', ') END, "
					   "  r.lost, CASE WHEN r.lost > 0 THEN ': ' || pg_catalog.array_to_string(r.ex_lost, ', ') END, "
					   "  r.phantoms, CASE WHEN r.phantoms > 0 THEN ': ' || pg_catalog.array_to_string(r.ex_phantoms, ', ') END, "
					   "  CASE WHEN r.events_without_id > 0 THEN pg_catalog.format(E'events without an id (--id gave NULL): %s\\n', r.events_without_id) END, "
					   "  CASE WHEN r.sink_rows_without_id > 0 THEN pg_catalog.format(E'sink rows without an id: %s\\n', r.sink_rows_without_id) END, "
					   "  CASE WHEN r.stream_duplicates > 0 THEN pg_catalog.format(E'note: %s ids occur in more than one event of the stream\\n', r.stream_duplicates) END) "
					   "FROM r",
					   3, params);
		if (res == NULL)
			goto done;
		if (json)
			printf("%s\n", PQgetvalue(res, 0, 5));
		else
			fputs(PQgetvalue(res, 0, 6), stdout);
		rc = SG_EXIT_OK;
		for (p = 0; p < 5; p++)
			if (strcmp(PQgetvalue(res, 0, p), "0") != 0)
				rc = SG_EXIT_MISMATCH;
		if (!json)
			printf("%s\n", rc == SG_EXIT_OK ? "OK: exactly once" : "FAILED");
		PQclear(res);
	}
	(void) exec_ok(conn, "COMMIT", 0, NULL);

done:
	if (rc == SG_EXIT_FAIL && sg_interrupted)
		SgError("interrupted");
	free(sink_name);
	free(user_path);
	SbFree(&sql);
	PQfinish(conn);
	return rc;
}
