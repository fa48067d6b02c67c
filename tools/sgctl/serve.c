/*-------------------------------------------------------------------------
 *
 * serve.c
 *	  sgctl serve: a read-only web console.  One page (HTML, a script and a
 *	  style sheet, built into the binary from console.html, console.js and
 *	  console.css) and JSON snapshots of streamguard's views, which the page
 *	  polls and draws as tables and SVG charts.
 *
 * What it shows is what the role it connects as may see: it reads only
 * the views, which filter by the caller's role themselves (a pipeline's
 * last error, dead letters, windows: the owner; consumers and groups: who
 * may read the stream).  It has no control action: GET only, every
 * snapshot in a READ ONLY transaction with a statement_timeout, each view
 * under a savepoint so that one failing view (a timeout, a missing grant)
 * is reported in "errors" and the others still show.  The JSON comes from
 * the server's json_agg (everything escaped); the page puts values in with
 * textContent only.
 *
 * HTTP: fixed routes, no files; a request head is bounded in size and
 * time (http.c); one connection at a time.  The default address is
 * loopback; another address is used only when --listen names it, with a
 * warning.  On a loopback address the Host header must name loopback too
 * (the address bound, localhost, 127.0.0.1, [::1]): a web page that rebinds its own name to
 * 127.0.0.1 cannot read the console through the browser.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sgctl.h"
#include "console_assets.h"

#define SERVE_DEFAULT_LISTEN "127.0.0.1:19188"
#define SERVE_REQUEST_MAX 8192
#define SERVE_IO_TIMEOUT_MS 5000

/* the views: one JSON array each, under its name */
typedef struct ApiSection
{
	const char *name;
	const char *sql;
} ApiSection;

#define JSON_ROWS(q) "SELECT COALESCE(pg_catalog.json_agg(t), '[]'::pg_catalog.json) FROM (" q ") t"

static const ApiSection api_sections[] = {
	{"streams", JSON_ROWS(
		"SELECT s.stream, s.partitions, s.retention::pg_catalog.text AS retention, "
		"s.retained_events, s.first_seq, s.last_seq, s.readable_horizon, s.in_flight, "
		"s.append_rate, s.segments FROM streamguard.streams s ORDER BY s.stream")},
	{"pipelines", JSON_ROWS(
		"SELECT p.pipeline, p.source, p.state, p.guarantee, p.owner::pg_catalog.text AS owner, "
		"p.workers, p.events_per_sec, p.lag_events, p.lag_seconds, p.batches, p.events_in, "
		"p.restarts, p.dead_letters, p.worker_status, p.last_batch_at, p.last_error, p.last_error_at "
		"FROM streamguard.pipelines p ORDER BY p.pipeline")},
	{"pipeline_workers", JSON_ROWS(
		"SELECT w.pipeline, w.worker, w.worker_pid, w.partitions, w.events_per_sec, "
		"w.lag_events, w.lag_seconds, w.worker_status "
		"FROM streamguard.pipeline_workers w ORDER BY 1, 2")},
	{"consumers", JSON_ROWS(
		"SELECT c.stream, c.consumer, pg_catalog.count(*) AS partitions, "
		"pg_catalog.sum(c.lag_events)::pg_catalog.int8 AS lag_events, "
		"pg_catalog.max(c.lag_seconds) AS lag_seconds, "
		"pg_catalog.sum(c.lost_events)::pg_catalog.int8 AS lost_events, "
		"pg_catalog.max(c.updated_at) AS updated_at "
		"FROM streamguard.consumers c GROUP BY 1, 2 ORDER BY 1, 2")},
	{"consumer_groups", JSON_ROWS(
		"SELECT m.stream, m.consumer, m.member, m.partitions, m.lag_events, "
		"m.last_poll_at, m.lease_expires_at FROM streamguard.consumer_group_members m "
		"ORDER BY 1, 2, 3")},
	{"windows", JSON_ROWS(
		"SELECT w.pipeline, w.kind, w.size::pg_catalog.text AS size, w.emit, w.watermark, "
		"w.open_windows, w.windows_closed, w.late_events, w.corrections "
		"FROM streamguard.windows w ORDER BY 1")},
	{"captures", JSON_ROWS(
		"SELECT c.tab::pg_catalog.text AS tab, c.stream, c.owner::pg_catalog.text AS owner, "
		"c.backfill_state, c.backfill_rows, c.backfill_total, c.backfill_percent, "
		"c.backfill_error FROM streamguard.captures c ORDER BY 1, 2")},
	{"dead_letters", JSON_ROWS(
		"SELECT d.pipeline, d.partition, d.seq, d.sqlstate, d.error, d.failed_at "
		"FROM streamguard.dead_letters d ORDER BY d.failed_at DESC, d.pipeline, d.seq DESC "
		"LIMIT 50")},
	{NULL, NULL}
};

#define SESSION_SQL \
	"SELECT pg_catalog.json_build_object('role', pg_catalog.current_user(), " \
	"'database', pg_catalog.current_database(), 'time', pg_catalog.now(), " \
	"'server_version', pg_catalog.current_setting('server_version'), " \
	"'read_only', pg_catalog.current_setting('transaction_read_only'), " \
	"'statement_timeout', pg_catalog.current_setting('statement_timeout'))"

/* every response carries these */
#define SECURITY_HEADERS \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; " \
	"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; " \
	"frame-ancestors 'none'\r\n" \
	"X-Content-Type-Options: nosniff\r\n" \
	"X-Frame-Options: DENY\r\n" \
	"Referrer-Policy: no-referrer\r\n" \
	"Cache-Control: no-store\r\n"

typedef struct ServeState
{
	PGconn	   *conn;
	int			timeout_ms;		/* statement_timeout of each snapshot */
	bool		pinned;			/* the session's search_path is pinned */
	bool		loopback;		/* bound to a loopback address */
	int			port;
	char		bound[1100];	/* the address as bound, "host:port" */
} ServeState;

static void
usage(FILE *out)
{
	fprintf(out,
			"Serve a read-only web console of streams, pipelines, consumer groups, windows,\n"
			"captures and dead letters, as the connecting role may see them.\n\n"
			"Usage:\n"
			"  sgctl serve [OPTIONS]\n\n"
			"Options:\n"
			"  --listen=HOST:PORT      address to serve on (default " SERVE_DEFAULT_LISTEN ");\n"
			"                          PORT alone means 127.0.0.1:PORT, PORT 0 picks a free\n"
			"                          port; an address that is not loopback warns\n"
			"  --statement-timeout=MS  limit of each snapshot's queries (default 5000)\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"Routes: / (the page), /api/snapshot (every view), /api/NAME (one of streams,\n"
			"pipelines, pipeline_workers, consumers, consumer_groups, windows, captures,\n"
			"dead_letters).  GET only.  Stops on Ctrl-C / SIGTERM.\n"
			"Exit status: 0 stopped, 1 error, 2 usage.\n");
}

static void
respond(int fd, const char *status, const char *ctype, const char *body, size_t len)
{
	SgHttpRespond(fd, status, SECURITY_HEADERS, ctype, body, len);
}

static void
respond_text(int fd, const char *status, const char *body)
{
	respond(fd, status, "text/plain; charset=utf-8", body, strlen(body));
}

/* (re)connect when the connection broke; false when it is still down */
static bool
ensure_connection(ServeState *st)
{
	PGresult   *res;

	if (PQstatus(st->conn) == CONNECTION_OK && st->pinned)
	{
		/* never start a snapshot inside a leftover transaction */
		if (PQtransactionStatus(st->conn) != PQTRANS_IDLE)
			PQclear(SgExec(st->conn, "ROLLBACK", 0, NULL));
		return PQtransactionStatus(st->conn) == PQTRANS_IDLE;
	}
	if (PQstatus(st->conn) != CONNECTION_OK)
		PQreset(st->conn);
	if (PQstatus(st->conn) != CONNECTION_OK)
		return false;
	res = PQexec(st->conn, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)");
	st->pinned = PQresultStatus(res) == PGRES_TUPLES_OK;
	PQclear(res);
	return st->pinned;
}

/* the error message of a failed statement, without trailing newlines */
static void
append_error(StrBuf *sb, PGconn *conn, PGresult *res)
{
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
	size_t		len = strlen(msg);

	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
		len--;
	JsonAppendString(sb, msg, len);
}

static bool
command(PGconn *conn, const char *sql, StrBuf *err)
{
	PGresult   *res = SgExec(conn, sql, 0, NULL);
	bool		ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok && err)
		append_error(err, conn, res);
	PQclear(res);
	return ok;
}

/*
 * Build the JSON snapshot of one section (only != NULL) or of all into
 * out; false when the snapshot as a whole failed (out holds the message).
 */
static bool
build_snapshot_once(ServeState *st, const char *only, StrBuf *out)
{
	PGconn	   *conn = st->conn;
	const ApiSection *s;
	StrBuf		errors;
	StrBuf		sql;
	PGresult   *res;
	bool		first_error = true;

	SbReset(out);
	if (!ensure_connection(st))
	{
		SbAppendStr(out, "{\"error\":");
		append_error(out, st->conn, NULL);
		SbAppendStr(out, "}");
		return false;
	}
	conn = st->conn;
	SbInit(&errors);
	SbInit(&sql);
	SbAppendf(&sql, "SET LOCAL statement_timeout = %d", st->timeout_ms);
	if (!command(conn, "BEGIN TRANSACTION READ ONLY", NULL) ||
		!command(conn, sql.data, NULL))
	{
		SbAppendStr(out, "{\"error\":");
		append_error(out, conn, NULL);
		SbAppendStr(out, "}");
		if (PQstatus(conn) == CONNECTION_OK)
			PQclear(SgExec(conn, "ROLLBACK", 0, NULL));
		SbFree(&errors);
		SbFree(&sql);
		return false;
	}

	SbAppendStr(out, "{\"session\":");
	res = SgExec(conn, SESSION_SQL, 0, NULL);
	if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		SbAppendStr(out, PQgetvalue(res, 0, 0));
	else
		SbAppendStr(out, "null");
	PQclear(res);

	for (s = api_sections; s->name; s++)
	{
		if (only && strcmp(only, s->name) != 0)
			continue;
		if (PQstatus(conn) != CONNECTION_OK)
			break;
		SbAppendf(out, ",\"%s\":", s->name);
		if (!command(conn, "SAVEPOINT section", NULL))
		{
			SbAppendStr(out, "null");
			break;
		}
		res = SgExec(conn, s->sql, 0, NULL);
		if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		{
			SbAppendStr(out, PQgetvalue(res, 0, 0));
			PQclear(res);
			(void) command(conn, "RELEASE SAVEPOINT section", NULL);
			continue;
		}
		SbAppendStr(out, "null");
		SbAppendf(&errors, "%s\"%s\":", first_error ? "" : ",", s->name);
		append_error(&errors, conn, res);
		first_error = false;
		PQclear(res);
		if (PQstatus(conn) == CONNECTION_OK)
			(void) command(conn, "ROLLBACK TO SAVEPOINT section", NULL);
	}
	if (PQstatus(conn) == CONNECTION_OK)
		(void) command(conn, "COMMIT", NULL);
	else
	{
		SbAppendf(&errors, "%s\"connection\":", first_error ? "" : ",");
		append_error(&errors, conn, NULL);
		first_error = false;
	}
	SbAppendStr(out, ",\"errors\":{");
	SbAppendStr(out, errors.data);
	SbAppendStr(out, "}}");
	SbFree(&errors);
	SbFree(&sql);
	return true;
}

/*
 * The value of header name in the request head (case-insensitive name),
 * copied into buf; false when absent or too long.
 */
/*
 * One snapshot; once more on a new connection when the server went away
 * since the last one (a restart): the connection only shows it broken at
 * its first statement, and a read-only snapshot can simply be taken again.
 */
static bool
build_snapshot(ServeState *st, const char *only, StrBuf *out)
{
	if (build_snapshot_once(st, only, out))
		return true;
	if (PQstatus(st->conn) != CONNECTION_BAD)
		return false;
	st->pinned = false;
	return build_snapshot_once(st, only, out);
}

static bool
request_header(const char *req, const char *name, char *buf, size_t buflen)
{
	size_t		nlen = strlen(name);
	const char *line = strchr(req, '\n');

	while (line && line[1] != '\0')
	{
		const char *p = line + 1;
		const char *end = strpbrk(p, "\r\n");
		size_t		vlen;

		if (end == NULL || end == p)
			break;
		if ((size_t) (end - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':')
		{
			p += nlen + 1;
			while (p < end && (*p == ' ' || *p == '\t'))
				p++;
			vlen = (size_t) (end - p);
			while (vlen > 0 && (p[vlen - 1] == ' ' || p[vlen - 1] == '\t'))
				vlen--;
			if (vlen >= buflen)
				return false;
			memcpy(buf, p, vlen);
			buf[vlen] = '\0';
			return true;
		}
		line = strchr(p, '\n');
	}
	return false;
}

/*
 * On a loopback address: the Host header names the address bound or
 * localhost, 127.0.0.1 or [::1], with our port.
 */
static bool
host_allowed(const ServeState *st, const char *req)
{
	static const char *const names[] = {"localhost", "127.0.0.1", "[::1]", NULL};
	char		host[300];
	int			i;

	if (!st->loopback)
		return true;
	if (!request_header(req, "Host", host, sizeof(host)))
		return false;
	if (strcasecmp(host, st->bound) == 0)
		return true;
	for (i = 0; names[i]; i++)
	{
		size_t		n = strlen(names[i]);
		char		want[32];

		if (strncasecmp(host, names[i], n) != 0)
			continue;
		if (host[n] == '\0')
			return st->port == 80;
		snprintf(want, sizeof(want), ":%d", st->port);
		if (strcmp(host + n, want) == 0)
			return true;
	}
	return false;
}

static void
serve_one(int fd, ServeState *st)
{
	StrBuf		req;
	char		method[16],
				target[256];
	char	   *q;
	int			rc;

	SbInit(&req);
	rc = SgHttpReadRequest(fd, &req, SERVE_REQUEST_MAX, SERVE_IO_TIMEOUT_MS);
	if (rc == SG_HTTP_TOO_LARGE)
	{
		respond_text(fd, "431 Request Header Fields Too Large", "request too large\n");
		SbFree(&req);
		return;
	}
	if (rc != SG_HTTP_OK ||
		sscanf(req.data, "%15s %255s", method, target) != 2 ||
		target[0] != '/')
	{
		respond_text(fd, "400 Bad Request", "bad request\n");
		SbFree(&req);
		return;
	}
	if (strcmp(method, "GET") != 0)
	{
		SgHttpRespond(fd, "405 Method Not Allowed", SECURITY_HEADERS "Allow: GET\r\n",
					  "text/plain; charset=utf-8", "only GET\n", 9);
		SbFree(&req);
		return;
	}
	if (!host_allowed(st, req.data))
	{
		respond_text(fd, "421 Misdirected Request",
					 "the Host header must name a loopback address (localhost, 127.0.0.1, [::1]) and the port\n");
		SbFree(&req);
		return;
	}
	SbFree(&req);
	/* the query string (the page adds none) is ignored */
	q = strchr(target, '?');
	if (q)
		*q = '\0';

	if (strcmp(target, "/") == 0)
		respond(fd, "200 OK", "text/html; charset=utf-8", console_html, sizeof(console_html) - 1);
	else if (strcmp(target, "/console.js") == 0)
		respond(fd, "200 OK", "text/javascript; charset=utf-8", console_js, sizeof(console_js) - 1);
	else if (strcmp(target, "/console.css") == 0)
		respond(fd, "200 OK", "text/css; charset=utf-8", console_css, sizeof(console_css) - 1);
	else if (strncmp(target, "/api/", 5) == 0)
	{
		const char *name = target + 5;
		const ApiSection *s = NULL;
		StrBuf		out;

		if (strcmp(name, "snapshot") != 0)
		{
			for (s = api_sections; s->name; s++)
				if (strcmp(s->name, name) == 0)
					break;
			if (s->name == NULL)
			{
				respond_text(fd, "404 Not Found", "not found\n");
				return;
			}
		}
		SbInit(&out);
		if (build_snapshot(st, s ? s->name : NULL, &out))
			respond(fd, "200 OK", "application/json", out.data, out.len);
		else
		{
			respond(fd, "503 Service Unavailable", "application/json", out.data, out.len);
			SgError("snapshot failed: %s", out.data);
		}
		SbFree(&out);
	}
	else
		respond_text(fd, "404 Not Found", "not found\n");
}

int
CmdServe(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"listen", required_argument, NULL, 'l'},
		{"statement-timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	const char *listen_at = SERVE_DEFAULT_LISTEN;
	char	   *listen_buf = NULL;
	ServeState	st;
	int			opt;
	int			lfd;
	int64_t		ms;

	memset(&st, 0, sizeof(st));
	st.timeout_ms = 5000;
	while ((opt = getopt_long(argc, argv, ":" SG_CONN_SHORTOPTS, longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 'l':
				listen_at = optarg;
				break;
			case 't':
				if (!SgParseInt64(optarg, &ms) || ms < 1 || ms > 3600 * 1000)
				{
					SgUsageError("serve", "--statement-timeout takes milliseconds, 1 to 3600000");
					return SG_EXIT_USAGE;
				}
				st.timeout_ms = (int) ms;
				break;
			default:
				return SgOptionOther("serve", opt, argv, usage);
		}
	}
	if (optind < argc)
	{
		SgUsageError("serve", "too many arguments");
		return SG_EXIT_USAGE;
	}
	/* a bare port: loopback */
	if (listen_at[0] != '\0' && strspn(listen_at, "0123456789") == strlen(listen_at))
	{
		listen_buf = malloc(strlen(listen_at) + 16);
		if (listen_buf == NULL)
		{
			SgError("out of memory");
			return SG_EXIT_FAIL;
		}
		sprintf(listen_buf, "127.0.0.1:%s", listen_at);
		listen_at = listen_buf;
	}
	if (strchr(listen_at, ':') == NULL)
	{
		SgUsageError("serve", "--listen takes HOST:PORT");
		free(listen_buf);
		return SG_EXIT_USAGE;
	}
	st.conn = SgConnect(copts);
	if (st.conn == NULL)
	{
		free(listen_buf);
		return SG_EXIT_FAIL;
	}
	st.pinned = true;			/* SgConnect did */
	lfd = SgHttpListen("serve", listen_at, st.bound, sizeof(st.bound), &st.loopback, &st.port);
	free(listen_buf);
	if (lfd < 0)
	{
		PQfinish(st.conn);
		return SG_EXIT_FAIL;
	}
	if (!st.loopback)
		fprintf(stderr, "%s: warning: %s is not a loopback address: whoever can reach it sees what role \"%s\" may see\n",
				progname, st.bound, PQuser(st.conn));
	fprintf(stderr, "%s: serving the console of role \"%s\" on http://%s/\n",
			progname, PQuser(st.conn), st.bound);

	while (!sg_interrupted)
	{
		struct pollfd pfd = {lfd, POLLIN, 0};
		int			fd;

		if (poll(&pfd, 1, 200) <= 0)
			continue;
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		SgHttpSetTimeouts(fd, SERVE_IO_TIMEOUT_MS);
		serve_one(fd, &st);
		SgHttpClose(fd);
	}
	close(lfd);
	PQfinish(st.conn);
	return SG_EXIT_OK;
}
