/*-------------------------------------------------------------------------
 *
 * conn.c
 *	  sgctl's connection to the server: connect, pin search_path, run
 *	  statements so that SIGINT/SIGTERM can interrupt them.
 *
 * Every statement is sent with PQsendQueryParams (user values are always
 * parameters, never spliced into SQL) and its result is awaited with
 * poll() on the connection's socket in short slices.  The signal handler
 * only sets sg_interrupted; the waiting loop notices it and sends a cancel
 * request (PQcancel, outside the handler), then keeps reading until the
 * statement ends one way or the other.  So an interrupted long-poll or
 * batch ends promptly, and the caller sees the real outcome: an error
 * (57014, query_canceled) or, when the cancel came too late, success.
 *
 * The session's search_path is pinned to "pg_catalog, pg_temp" right
 * after connecting; every object sgctl names is schema-qualified anyway.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "sgctl.h"

volatile sig_atomic_t sg_interrupted = 0;

static void
handle_interrupt(int signo)
{
	(void) signo;
	sg_interrupted = 1;
}

void
SgInstallSignals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handle_interrupt;
	sigemptyset(&sa.sa_mask);
	/* no SA_RESTART: poll() and read() return EINTR so loops notice */
	sa.sa_flags = 0;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* a closed stdout (sgctl tail | head) is a write error, not a death */
	signal(SIGPIPE, SIG_IGN);
}

/* the connection's last error, without libpq's trailing newline */
static void
report_conn(PGconn *conn)
{
	const char *msg = PQerrorMessage(conn);
	size_t		len = strlen(msg);

	while (len > 0 && msg[len - 1] == '\n')
		len--;
	SgError("%.*s", (int) len, msg);
}

PGconn *
SgConnect(const SgConnOpts *opts)
{
	const char *keywords[7];
	const char *values[7];
	int			n = 0;
	PGconn	   *conn;
	PGresult   *res;

	if (opts->dbname)
	{
		keywords[n] = "dbname";
		values[n++] = opts->dbname;
	}
	if (opts->host)
	{
		keywords[n] = "host";
		values[n++] = opts->host;
	}
	if (opts->port)
	{
		keywords[n] = "port";
		values[n++] = opts->port;
	}
	if (opts->user)
	{
		keywords[n] = "user";
		values[n++] = opts->user;
	}
	keywords[n] = "fallback_application_name";
	values[n++] = "sgctl";
	keywords[n] = NULL;
	values[n] = NULL;

	/* expand_dbname: -d takes a full connection string or URI too */
	conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL)
	{
		SgError("out of memory");
		return NULL;
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		const char *msg = PQerrorMessage(conn);
		size_t		len = strlen(msg);

		while (len > 0 && msg[len - 1] == '\n')
			len--;
		SgError("could not connect: %.*s", (int) len, msg);
		PQfinish(conn);
		return NULL;
	}
	res = PQexec(conn, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		SgReportResult("could not set search_path", res);
		PQclear(res);
		PQfinish(conn);
		return NULL;
	}
	PQclear(res);
	return conn;
}

/*
 * Run one statement with text parameters; returns its (last) result, which
 * the caller checks and clears, or NULL when the connection failed.  Waits
 * interruptibly: see the file comment.
 */
PGresult *
SgExec(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res;
	PGresult   *last = NULL;
	bool		cancel_sent = false;

	if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
	{
		report_conn(conn);
		return NULL;
	}
	for (;;)
	{
		while (PQisBusy(conn))
		{
			struct pollfd pfd;
			int			rc;

			if (sg_interrupted && !cancel_sent)
			{
				PGcancel   *cancel = PQgetCancel(conn);
				char		errbuf[256];

				if (cancel)
				{
					(void) PQcancel(cancel, errbuf, sizeof(errbuf));
					PQfreeCancel(cancel);
				}
				cancel_sent = true;
			}
			pfd.fd = PQsocket(conn);
			pfd.events = POLLIN;
			pfd.revents = 0;
			rc = poll(&pfd, 1, 100);
			if (rc < 0 && errno != EINTR)
			{
				SgError("poll failed: %s", strerror(errno));
				PQclear(last);
				return NULL;
			}
			if (rc > 0 && !PQconsumeInput(conn))
			{
				report_conn(conn);
				PQclear(last);
				return NULL;
			}
		}
		res = PQgetResult(conn);
		if (res == NULL)
			break;
		PQclear(last);
		last = res;
	}
	if (last == NULL)
		report_conn(conn);
	return last;
}

/* SgExec, reporting any failure; NULL unless the statement succeeded */
PGresult *
SgExecOk(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = SgExec(conn, sql, nparams, params);

	if (res == NULL)
		return NULL;
	if (PQresultStatus(res) != PGRES_TUPLES_OK &&
		PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		if (!(sg_interrupted && SgResultIsCancel(res)))
			SgReportResult(NULL, res);
		PQclear(res);
		return NULL;
	}
	return res;
}

/* a parameterless utility statement (BEGIN, COMMIT, ROLLBACK) */
bool
SgCommand(PGconn *conn, const char *sql)
{
	PGresult   *res = SgExecOk(conn, sql, 0, NULL);

	if (res == NULL)
		return false;
	PQclear(res);
	return true;
}

/* print a failed result: "sgctl: [what: ]ERROR:  message" plus detail/hint */
void
SgReportResult(const char *what, const PGresult *res)
{
	const char *msg = PQresultErrorMessage(res);
	size_t		len = strlen(msg);

	while (len > 0 && msg[len - 1] == '\n')
		len--;
	if (what)
		fprintf(stderr, "%s: %s: %.*s\n", progname, what, (int) len, msg);
	else
		fprintf(stderr, "%s: %.*s\n", progname, (int) len, msg);
}

bool
SgResultIsCancel(const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state != NULL && strcmp(state, "57014") == 0;
}

/* sleep up to seconds; false when interrupted */
bool
SgSleep(double seconds)
{
	double		until = SgNow() + seconds;

	while (!sg_interrupted)
	{
		double		left = until - SgNow();

		if (left <= 0)
			return true;
		(void) poll(NULL, 0, left > 0.1 ? 100 : (int) (left * 1000) + 1);
	}
	return false;
}
