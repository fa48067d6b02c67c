/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  sgctl metrics: print streamguard.metrics() (Prometheus/OpenMetrics
 *	  text), or serve it over HTTP for a Prometheus scrape (--listen).
 *
 * The server is deliberately small: one connection at a time, HTTP/1.0
 * style (every response closes the connection), GET /metrics only (and
 * "/" for convenience), a request read bounded in size and time so that a
 * slow or silent client cannot hold the scrape up for long.  Each scrape
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

static bool
write_all(int fd, const char *p, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, p, n);

		if (w < 0)
		{
			if (errno == EINTR)
				continue;
			return false;
		}
		p += w;
		n -= (size_t) w;
	}
	return true;
}

static void
respond(int fd, const char *status, const char *ctype, const char *body)
{
	StrBuf		out;

	SbInit(&out);
	SbAppendf(&out, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			  status, ctype, strlen(body));
	SbAppendStr(&out, body);
	(void) write_all(fd, out.data, out.len);
	SbFree(&out);
}

/* read the request head (up to the blank line) within the time limit */
static bool
read_request(int fd, StrBuf *req)
{
	double		until = SgNow() + REQUEST_TIMEOUT_MS / 1000.0;

	while (strstr(req->data, "\r\n\r\n") == NULL && strstr(req->data, "\n\n") == NULL)
	{
		struct pollfd pfd = {fd, POLLIN, 0};
		char		buf[1024];
		double		left = until - SgNow();
		ssize_t		n;

		if (left <= 0 || req->len >= REQUEST_MAX || sg_interrupted)
			return false;
		if (poll(&pfd, 1, (int) (left * 1000) + 1) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return false;
		SbAppend(req, buf, (size_t) n);
		if (memchr(buf, '\0', (size_t) n))
			return false;
	}
	return true;
}

static void
serve_one(int fd, PGconn *conn)
{
	StrBuf		req;
	char		method[16],
				path[256];

	SbInit(&req);
	if (!read_request(fd, &req) ||
		sscanf(req.data, "%15s %255s", method, path) != 2)
	{
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
	{
		PQreset(conn);
		if (PQstatus(conn) == CONNECTION_OK)
			PQclear(PQexec(conn, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)"));
	}
	{
		PGresult   *res = SgExec(conn, METRICS_SQL, 0, NULL);

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

static int
serve(PGconn *conn, const char *listen_at)
{
	char	   *spec = strdup(listen_at);
	char	   *colon = strrchr(spec, ':');
	char	   *host = spec;
	struct addrinfo hints,
			   *ai = NULL;
	int			lfd = -1,
				one = 1,
				err;
	struct sockaddr_storage bound;
	socklen_t	blen = sizeof(bound);
	char		hbuf[NI_MAXHOST],
				pbuf[NI_MAXSERV];

	if (colon == NULL || colon[1] == '\0')
	{
		SgUsageError("metrics", "--listen takes HOST:PORT");
		free(spec);
		return SG_EXIT_USAGE;
	}
	*colon = '\0';
	if (host[0] == '[' && colon > host && colon[-1] == ']')
	{
		host++;
		colon[-1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	err = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
	if (err != 0)
	{
		SgError("cannot listen on \"%s\": %s", listen_at, gai_strerror(err));
		free(spec);
		return SG_EXIT_FAIL;
	}
	lfd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (lfd < 0 ||
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 ||
		listen(lfd, 16) < 0 ||
		getsockname(lfd, (struct sockaddr *) &bound, &blen) < 0)
	{
		SgError("cannot listen on \"%s\": %s", listen_at, strerror(errno));
		if (lfd >= 0)
			close(lfd);
		freeaddrinfo(ai);
		free(spec);
		return SG_EXIT_FAIL;
	}
	freeaddrinfo(ai);
	free(spec);
	if (getnameinfo((struct sockaddr *) &bound, blen, hbuf, sizeof(hbuf), pbuf, sizeof(pbuf),
					NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		fprintf(stderr, "%s: serving http://%s%s%s:%s/metrics\n", progname,
				strchr(hbuf, ':') ? "[" : "", hbuf, strchr(hbuf, ':') ? "]" : "", pbuf);

	while (!sg_interrupted)
	{
		struct pollfd pfd = {lfd, POLLIN, 0};
		int			fd;

		if (poll(&pfd, 1, 200) <= 0)
			continue;
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		serve_one(fd, conn);
		close(fd);
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
			case SG_OPT_HELP:
				usage(stdout);
				return SG_EXIT_OK;
			case ':':
				SgUsageError("metrics", "option \"%s\" needs an argument", argv[optind - 1]);
				return SG_EXIT_USAGE;
			default:
				if (SgIsHelpFlag(argv[optind - 1]))
				{
					usage(stdout);
					return SG_EXIT_OK;
				}
				SgUsageError("metrics", "unknown option \"%s\"", argv[optind - 1]);
				return SG_EXIT_USAGE;
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
