/*-------------------------------------------------------------------------
 *
 * remote.c
 *		Remote PostgreSQL servers over libpq: the streamguard_remote
 *		foreign-data wrapper's option validator, connections, and
 *		interruptible, time-bounded remote statements and COPY.
 *
 * A remote is declared the way PostgreSQL users already do:
 *	CREATE SERVER s FOREIGN DATA WRAPPER streamguard_remote
 *		OPTIONS (host '...', port '...', dbname '...');
 *	CREATE USER MAPPING FOR role SERVER s OPTIONS (user '...', password '...');
 * Credentials live only in the user mapping.  A non-superuser's mapping
 * must carry a password, and the remote must actually have asked for it
 * (PQconnectionUsedPassword) — postgres_fdw's rule, so that a role cannot
 * borrow the server OS user's trust or peer authentication.
 *
 * All I/O is asynchronous: connections with PQconnectStartParams /
 * PQconnectPoll, statements with PQsendQueryParams, COPY data with a
 * non-blocking connection, each waiting in WaitLatchOrSocket with a
 * deadline, so pause, drop, SIGTERM and postmaster death are honoured
 * while a remote is hung.  When a wait is interrupted or times out, the
 * remote statement is cancelled and the connection dropped, so a remote
 * transaction never outlives the local one that drove it (an already
 * PREPAREd transaction is left to in-doubt resolution, see worker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "remote.h"
#include "streamguard.h"

PG_FUNCTION_INFO_V1(sg_remote_validator);

int			sg_remote_timeout_ms = 10000;

static void sg_end_stale_session(SgRemote *r);

typedef struct SgOption
{
	const char *name;
	Oid			context;
} SgOption;

static const SgOption sg_options[] = {
	{"host", ForeignServerRelationId},
	{"hostaddr", ForeignServerRelationId},
	{"port", ForeignServerRelationId},
	{"dbname", ForeignServerRelationId},
	{"sslmode", ForeignServerRelationId},
	{"connect_timeout", ForeignServerRelationId},
	{"application_name", ForeignServerRelationId},
	{"user", UserMappingRelationId},
	{"password", UserMappingRelationId},
	{NULL, InvalidOid}
};

/*
 * Validator of the streamguard_remote wrapper's server and user mapping
 * options.
 */
Datum
sg_remote_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		const SgOption *opt;
		bool		found = false;

		for (opt = sg_options; opt->name; opt++)
			if (opt->context == catalog && strcmp(opt->name, def->defname) == 0)
				found = true;
		if (!found)
		{
			StringInfoData valid;

			initStringInfo(&valid);
			for (opt = sg_options; opt->name; opt++)
				if (opt->context == catalog)
					appendStringInfo(&valid, "%s%s", valid.len ? ", " : "", opt->name);
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("invalid option \"%s\"", def->defname),
					 valid.len ? errhint("Valid options in this context are: %s.", valid.data) :
					 errhint("There are no valid options in this context.")));
		}
		if (strcmp(def->defname, "port") == 0 || strcmp(def->defname, "connect_timeout") == 0)
		{
			char	   *v = defGetString(def);
			char	   *end;
			long		n = strtol(v, &end, 10);

			if (*v == '\0' || *end != '\0' || n < 0 || n > 65535)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("invalid value for option \"%s\": \"%s\"", def->defname, v)));
		}
	}
	PG_RETURN_VOID();
}

/* ------------------------------------------------------------- waiting */

/*
 * Wait until the socket is ready, the deadline passes (returns false) or
 * an interrupt arrives (CHECK_FOR_INTERRUPTS throws).
 */
static bool
sg_wait_socket(PGconn *conn, int events, TimestampTz deadline)
{
	for (;;)
	{
		long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
		int			rc;

		if (left <= 0)
			return false;
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH | events,
							   PQsocket(conn), left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (rc & events)
			return true;
	}
}

static void sg_remote_fail(SgRemote *r, const char *what, const char *detail) pg_attribute_noreturn();

static void
sg_remote_fail(SgRemote *r, const char *what, const char *detail)
{
	char	   *msg = pstrdup(detail ? detail : (r->conn ? PQerrorMessage(r->conn) : ""));
	size_t		len = strlen(msg);

	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
		msg[--len] = '\0';
	snprintf(r->last_error, sizeof(r->last_error), "%s: %s", what, msg);
	RemoteDisconnect(r);
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("remote server \"%s\": %s", r->server_name, what),
			 errdetail_internal("%s", msg)));
}

/* ---------------------------------------------------------- connecting */

/*
 * Connect to a streamguard_remote server as `userid`'s user mapping.
 * Checks USAGE on the server and the password rule.
 */
void
RemoteConnect(SgRemote *r, const char *server_name, Oid userid)
{
	ForeignServer *server;
	ForeignDataWrapper *fdw;
	UserMapping *um;
	const char **keys;
	const char **vals;
	int			n = 0;
	ListCell   *lc;
	bool		has_password = false;
	TimestampTz deadline;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;

	if (r->conn && PQstatus(r->conn) == CONNECTION_OK)
		return;
	RemoteDisconnect(r);
	if (strcmp(r->server_name, server_name) != 0)
		r->stale_pid = 0;		/* another server: nothing of ours there */
	strlcpy(r->server_name, server_name, sizeof(r->server_name));

	server = GetForeignServerByName(server_name, false);
	fdw = GetForeignDataWrapper(server->fdwid);
	if (strcmp(fdw->fdwname, "streamguard_remote") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("server \"%s\" does not use the streamguard_remote foreign-data wrapper",
						server_name)));
	if (pg_foreign_server_aclcheck(server->serverid, userid, ACL_USAGE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for foreign server %s", server_name),
				 errdetail("Role \"%s\" needs USAGE on the server.", GetUserNameFromId(userid, false))));
	um = GetUserMapping(userid, server->serverid);

	keys = palloc0(sizeof(char *) * (list_length(server->options) + list_length(um->options) + 4));
	vals = palloc0(sizeof(char *) * (list_length(server->options) + list_length(um->options) + 4));
	foreach(lc, server->options)
	{
		DefElem    *d = lfirst(lc);

		keys[n] = d->defname;
		vals[n++] = defGetString(d);
	}
	foreach(lc, um->options)
	{
		DefElem    *d = lfirst(lc);

		if (strcmp(d->defname, "password") == 0 && defGetString(d)[0] != '\0')
			has_password = true;
		keys[n] = d->defname;
		vals[n++] = defGetString(d);
	}
	keys[n] = "fallback_application_name";
	vals[n++] = "streamguard";
	keys[n] = NULL;
	vals[n] = NULL;

	if (!superuser_arg(userid) && !has_password)
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must provide a password in the user mapping for server \"%s\".",
						   server_name)));

	deadline = GetCurrentTimestamp() + (int64) sg_remote_timeout_ms * 1000;
	r->conn = PQconnectStartParams(keys, vals, false);
	if (r->conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory connecting to server \"%s\"", server_name)));
	if (PQstatus(r->conn) == CONNECTION_BAD)
		sg_remote_fail(r, "could not connect", NULL);
	while (st != PGRES_POLLING_OK)
	{
		if (st == PGRES_POLLING_FAILED)
			sg_remote_fail(r, "could not connect", NULL);
		if (!sg_wait_socket(r->conn, st == PGRES_POLLING_READING ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE,
							deadline))
			sg_remote_fail(r, "could not connect", "timed out (streamguard.remote_timeout)");
		st = PQconnectPoll(r->conn);
	}
	if (!superuser_arg(userid) && !PQconnectionUsedPassword(r->conn))
	{
		RemoteDisconnect(r);
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superuser cannot connect if the server does not request a password."),
				 errhint("Target server's authentication method must be changed.")));
	}
	if (PQsetnonblocking(r->conn, 1) != 0)
		sg_remote_fail(r, "could not make the connection non-blocking", NULL);
	r->last_error[0] = '\0';
	/* remote statements must not hang longer than we wait for them */
	RemoteExecOk(r, psprintf("SET statement_timeout = %d", sg_remote_timeout_ms));
	if (r->stale_pid > 0)
		sg_end_stale_session(r);
}

void
RemoteDisconnect(SgRemote *r)
{
	if (r->conn)
	{
		/* its backend may live on (stalled): the next connection ends it */
		r->stale_pid = PQbackendPID(r->conn);
		PQfinish(r->conn);
		r->conn = NULL;
	}
}

/*
 * End the remote backend of an earlier connection of ours and wait until
 * it is gone.  A backend we gave up on may still hold a statement we sent
 * (a delayed COMMIT or PREPARE TRANSACTION); once it has exited, nothing
 * of the old session can land behind our back.
 */
static void
sg_end_stale_session(SgRemote *r)
{
	char		pid[16];
	const char *params[1] = {pid};
	TimestampTz deadline = GetCurrentTimestamp() + (int64) sg_remote_timeout_ms * 1000;

	snprintf(pid, sizeof(pid), "%d", r->stale_pid);
	PQclear(RemoteExec(r, "SELECT pg_catalog.pg_terminate_backend($1::int)", 1, params));
	for (;;)
	{
		PGresult   *res = RemoteExec(r, "SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $1::int",
									 1, params);
		bool		alive = PQntuples(res) > 0;

		PQclear(res);
		if (!alive)
			break;
		if (GetCurrentTimestamp() > deadline)
		{
			/* keep trying to end it on the next connection */
			int			old = r->stale_pid;

			PG_TRY();
			{
				sg_remote_fail(r, "an earlier session does not end",
							   "its backend is still alive (is the mapped user allowed to end it?)");
			}
			PG_FINALLY();
			{
				r->stale_pid = old;
			}
			PG_END_TRY();
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	r->stale_pid = 0;
}

bool
RemoteConnected(SgRemote *r)
{
	return r->conn != NULL && PQstatus(r->conn) == CONNECTION_OK;
}

/* ------------------------------------------------------------ statements */

static void
sg_flush(SgRemote *r, TimestampTz deadline)
{
	for (;;)
	{
		int			f = PQflush(r->conn);

		if (f == 0)
			return;
		if (f < 0)
			sg_remote_fail(r, "could not send data", NULL);
		if (!sg_wait_socket(r->conn, WL_SOCKET_WRITEABLE | WL_SOCKET_READABLE, deadline))
			sg_remote_fail(r, "could not send data", "timed out (streamguard.remote_timeout)");
		if (PQconsumeInput(r->conn) == 0)
			sg_remote_fail(r, "could not send data", NULL);
	}
}

/*
 * Cancel what the remote is doing; used when a wait is abandoned.
 */
static void
sg_cancel(SgRemote *r)
{
	PGcancel   *c;
	char		buf[256];

	if (r->conn == NULL)
		return;
	c = PQgetCancel(r->conn);
	if (c)
	{
		(void) PQcancel(c, buf, sizeof(buf));
		PQfreeCancel(c);
	}
}

/*
 * Collect the results of the statement sent last; returns the last one
 * (caller PQclears), raising the remote's error if it failed.
 */
static PGresult *
sg_get_result(SgRemote *r, TimestampTz deadline, bool copy_in)
{
	PGresult   *last = NULL;

	PG_TRY();
	{
		for (;;)
		{
			PGresult   *res;

			while (PQisBusy(r->conn))
			{
				if (!sg_wait_socket(r->conn, WL_SOCKET_READABLE, deadline))
				{
					sg_cancel(r);
					sg_remote_fail(r, "statement failed", "timed out (streamguard.remote_timeout)");
				}
				if (PQconsumeInput(r->conn) == 0)
					sg_remote_fail(r, "statement failed", NULL);
			}
			res = PQgetResult(r->conn);
			if (res == NULL)
				break;
			if (last)
				PQclear(last);
			last = res;
			if (copy_in && PQresultStatus(res) == PGRES_COPY_IN)
				break;
		}
	}
	PG_CATCH();
	{
		/* interrupted: the remote must not go on without us */
		if (last)
			PQclear(last);
		sg_cancel(r);
		RemoteDisconnect(r);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (last == NULL)
		sg_remote_fail(r, "statement failed", "no result");
	if (PQresultStatus(last) == PGRES_FATAL_ERROR || PQresultStatus(last) == PGRES_BAD_RESPONSE)
	{
		char	   *msg = pstrdup(PQresultErrorMessage(last));
		char	   *state = PQresultErrorField(last, PG_DIAG_SQLSTATE);
		int			code = state ? MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]) :
			ERRCODE_CONNECTION_FAILURE;
		size_t		len = strlen(msg);

		PQclear(last);
		while (len > 0 && msg[len - 1] == '\n')
			msg[--len] = '\0';
		snprintf(r->last_error, sizeof(r->last_error), "%s", msg);
		ereport(ERROR,
				(errcode(code),
				 errmsg("remote server \"%s\": %s", r->server_name, msg)));
	}
	return last;
}

PGresult *
RemoteExec(SgRemote *r, const char *sql, int nparams, const char *const *params)
{
	TimestampTz deadline = GetCurrentTimestamp() + (int64) sg_remote_timeout_ms * 1000;
	TimestampTz start = GetCurrentTimestamp();
	PGresult   *res;

	if (!RemoteConnected(r))
		sg_remote_fail(r, "not connected", "the connection was lost");
	if (!PQsendQueryParams(r->conn, sql, nparams, NULL, params, NULL, NULL, 0))
		sg_remote_fail(r, "could not send statement", NULL);
	sg_flush(r, deadline);
	res = sg_get_result(r, deadline, false);
	r->rtt_us = GetCurrentTimestamp() - start;
	return res;
}

void
RemoteExecOk(SgRemote *r, const char *sql)
{
	PQclear(RemoteExec(r, sql, 0, NULL));
}

/*
 * COPY `data` (text format) into the remote with `copy_sql`
 * ("COPY t (cols) FROM STDIN").
 */
void
RemoteCopyIn(SgRemote *r, const char *copy_sql, const char *data, size_t len)
{
	TimestampTz deadline = GetCurrentTimestamp() + (int64) sg_remote_timeout_ms * 1000;
	PGresult   *res;
	size_t		off = 0;

	if (!RemoteConnected(r))
		sg_remote_fail(r, "not connected", "the connection was lost");
	if (!PQsendQuery(r->conn, copy_sql))
		sg_remote_fail(r, "could not send COPY", NULL);
	sg_flush(r, deadline);
	res = sg_get_result(r, deadline, true);
	if (PQresultStatus(res) != PGRES_COPY_IN)
	{
		PQclear(res);
		sg_remote_fail(r, "COPY did not start", NULL);
	}
	PQclear(res);
	while (off < len)
	{
		size_t		chunk = Min(len - off, (size_t) 65536);
		int			rc = PQputCopyData(r->conn, data + off, (int) chunk);

		if (rc < 0)
			sg_remote_fail(r, "COPY failed", NULL);
		if (rc == 0)
		{
			/* would block: wait for room */
			if (!sg_wait_socket(r->conn, WL_SOCKET_WRITEABLE, deadline))
			{
				sg_cancel(r);
				sg_remote_fail(r, "COPY failed", "timed out (streamguard.remote_timeout)");
			}
			continue;
		}
		off += chunk;
		sg_flush(r, deadline);
	}
	for (;;)
	{
		int			rc = PQputCopyEnd(r->conn, NULL);

		if (rc == 1)
			break;
		if (rc < 0)
			sg_remote_fail(r, "COPY failed", NULL);
		if (!sg_wait_socket(r->conn, WL_SOCKET_WRITEABLE, deadline))
			sg_remote_fail(r, "COPY failed", "timed out (streamguard.remote_timeout)");
	}
	sg_flush(r, deadline);
	PQclear(sg_get_result(r, deadline, false));
}

/*
 * Quote a value for the remote as a literal.
 */
char *
RemoteLiteral(SgRemote *r, const char *s)
{
	char	   *q = PQescapeLiteral(r->conn, s, strlen(s));
	char	   *out;

	if (q == NULL)
		sg_remote_fail(r, "could not quote", NULL);
	out = pstrdup(q);
	PQfreemem(q);
	return out;
}
