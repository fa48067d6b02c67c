/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  sgctl metrics: print streamguard.metrics() (Prometheus/OpenMetrics
 *	  text), or serve it over HTTP for a Prometheus scrape (--listen).
 *
 * The server is http.c's, which sgctl serve uses too: one connection at a
 * time, every response closes the connection, a request head bounded in
 * size and time so that a slow or silent client cannot hold the scrape up
 * for long, an empty HOST meaning 127.0.0.1.  GET /metrics only (and "/"
 * for convenience).  Each scrape
 * runs the function once on a connection kept open between scrapes and
 * re-established when it broke; a failure answers 500 with the error.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sgctl.h"

#define METRICS_SQL "SELECT streamguard.metrics()"
#define REQUEST_MAX 8192
#define REQUEST_TIMEOUT_MS 5000

static void
usage(FILE *out)
{
	fprintf(out,
			"Print streamguard.metrics(), the Prometheus text exposition, or serve it.\n\n"
			"Usage:\n"
			"  sgctl metrics [OPTIONS]\n\n"
			"Options:\n"
			"  --listen=HOST:PORT      serve GET /metrics over HTTP until interrupted\n"
			"                          (e.g. 127.0.0.1:19187; PORT 0 picks a free port)\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"Exit status: 0 done, 1 error, 2 usage.\n");
}

static void
respond(int fd, const char *status, const char *ctype, const char *body)
{
	SgHttpRespond(fd, status, NULL, ctype, body, strlen(body));
}

/* a new connection, its search_path pinned as at the start */
static void
reconnect(PGconn *conn)
{
	PQreset(conn);
	if (PQstatus(conn) == CONNECTION_OK)
		PQclear(PQexec(conn, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)"));
}

static void
serve_one(int fd, PGconn *conn)
{
	StrBuf		req;
	char		method[16],
				path[256];
	int			got;

	SbInit(&req);
	got = SgHttpReadRequest(fd, &req, REQUEST_MAX, REQUEST_TIMEOUT_MS);
	if (got != SG_HTTP_OK ||
		sscanf(req.data, "%15s %255s", method, path) != 2)
	{
		if (got == SG_HTTP_TOO_LARGE)
			respond(fd, "431 Request Header Fields Too Large", "text/plain", "request too large\n");
		else
			respond(fd, "400 Bad Request", "text/plain", "bad request\n");
		SbFree(&req);
		return;
	}
	SbFree(&req);
	if (strcmp(method, "GET") != 0)
	{
		respond(fd, "405 Method Not Allowed", "text/plain", "only GET\n");
		return;
	}
	if (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0 &&
		strncmp(path, "/metrics?", 9) != 0)
	{
		respond(fd, "404 Not Found", "text/plain", "not found: try /metrics\n");
		return;
	}
	if (PQstatus(conn) != CONNECTION_OK)
		reconnect(conn);
	{
		PGresult   *res = SgExec(conn, METRICS_SQL, 0, NULL);

		/*
		 * The server went away since the last scrape (a restart): the
		 * connection shows it only now.  One new connection, one more try,
		 * so that a scrape after a restart does not fail.
		 */
		if ((res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK) && PQstatus(conn) == CONNECTION_BAD)
		{
			PQclear(res);
			reconnect(conn);
			res = SgExec(conn, METRICS_SQL, 0, NULL);
		}

		if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
			respond(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", PQgetvalue(res, 0, 0));
		else
		{
			StrBuf		msg;

			SbInit(&msg);
			SbAppendf(&msg, "streamguard.metrics() failed: %s",
					  res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
			respond(fd, "500 Internal Server Error", "text/plain", msg.data);
			SgError("%s", msg.data);
			SbFree(&msg);
		}
		PQclear(res);
	}
}

/* the listener (http.c: an empty HOST is 127.0.0.1) until interrupted */
static int
serve(PGconn *conn, const char *listen_at)
{
	char		shown[NI_MAXHOST + NI_MAXSERV + 4];
	bool		loopback;
	int			port;
	int			lfd = SgHttpListen("metrics", listen_at, shown, sizeof(shown), &loopback, &port);

	if (lfd < 0)
		return strchr(listen_at, ':') == NULL ? SG_EXIT_USAGE : SG_EXIT_FAIL;
	fprintf(stderr, "%s: serving http://%s/metrics\n", progname, shown);

	while (!sg_interrupted)
	{
		struct pollfd pfd = {lfd, POLLIN, 0};
		int			fd;

		if (poll(&pfd, 1, 200) <= 0)
			continue;
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		SgHttpSetTimeouts(fd, REQUEST_TIMEOUT_MS);
		serve_one(fd, conn);
		SgHttpClose(fd);
	}
	close(lfd);
	return SG_EXIT_OK;
}

int
CmdMetrics(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"listen", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	const char *listen_at = NULL;
	int			opt;
	int			rc;
	PGconn	   *conn;
	PGresult   *res;

	while ((opt = getopt_long(argc, argv, ":" SG_CONN_SHORTOPTS, longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 'l':
				listen_at = optarg;
				break;
			default:
				return SgOptionOther("metrics", opt, argv, usage);
		}
	}
	if (optind < argc)
	{
		SgUsageError("metrics", "too many arguments");
		return SG_EXIT_USAGE;
	}
	if (listen_at && strchr(listen_at, ':') == NULL)
	{
		SgUsageError("metrics", "--listen takes HOST:PORT");
		return SG_EXIT_USAGE;
	}
	conn = SgConnect(copts);
	if (conn == NULL)
		return SG_EXIT_FAIL;
	if (listen_at)
	{
		rc = serve(conn, listen_at);
		PQfinish(conn);
		return rc;
	}
	res = SgExecOk(conn, METRICS_SQL, 0, NULL);
	rc = SG_EXIT_FAIL;
	if (res)
	{
		fputs(PQgetvalue(res, 0, 0), stdout);
		rc = fflush(stdout) == 0 ? SG_EXIT_OK : SG_EXIT_FAIL;
		PQclear(res);
	}
	PQfinish(conn);
	return rc;
}
