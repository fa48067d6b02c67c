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
 * libpq is used here the way PostgreSQL itself uses it inside a server
 * process (contrib/postgres_fdw, the walreceiver's libpqwalreceiver, and
 * from 16 on libpq-be-fe-helpers.h):
 *
 * - A connection is a long-lived file descriptor that fd.c does not
 *	 manage: AcquireExternalFD() before connecting, so that it counts
 *	 against max_files_per_process (and fd.c closes cached files to make
 *	 room), and ReleaseExternalFD() wherever it is closed (sg_conn_close,
 *	 the only place that calls PQfinish).
 *
 * - Nothing waits inside libpq.  Connections are made with
 *	 PQconnectStartParams / PQconnectPoll, statements sent with
 *	 PQsendQueryParams and collected with PQconsumeInput / PQisBusy, COPY
 *	 data written on a non-blocking connection.  Every wait is a
 *	 WaitLatchOrSocket with a deadline of streamguard.remote_timeout, a wait
 *	 event of ours, WL_EXIT_ON_PM_DEATH, and CHECK_FOR_INTERRUPTS() when the
 *	 latch is set: pause, drop, SIGTERM and postmaster death are honoured
 *	 while a remote hangs, and no wait spins.  (One exception libpq leaves
 *	 us: PQconnectStartParams resolves a host name synchronously; hostaddr
 *	 avoids that.)
 *
 * - A connection belongs to the local transaction that opened it, and then
 *	 to every later one of the backend: when a (sub)transaction it belongs
 *	 to aborts, a transaction callback closes it, whatever its caller does.
 *	 So an ERROR cannot leak a socket, and a remote transaction never
 *	 outlives the local one that drove it.  (An already PREPAREd remote
 *	 transaction is left to in-doubt resolution, see pipeline.c.)  Callers
 *	 hold a handle, SgRemote, never the PGconn: their SgRemote may be a
 *	 local variable of a function that the ERROR unwound.
 *
 * - A result belongs to a memory context: RemoteExec returns a small
 *	 wrapper allocated in CurrentMemoryContext, whose reset callback
 *	 PQclears the PGresult.  An ERROR between RemoteExec and RemoteClear
 *	 (an SPI call, a datum input function) frees it with the context
 *	 instead of leaking libpq's malloc'd memory.
 *
 * - A remote error is raised again field by field, as postgres_fdw's
 *	 pgfdw_report_error does: the remote SQLSTATE, primary message, detail,
 *	 hint and context, and the remote SQL as context; the SgRemote keeps the
 *	 primary message on one line for the views.  Remote notices and
 *	 warnings go to the server log (sg_notice_receiver), not to stderr.
 *
 * - Cancelling.  libpq 15 has only PQcancel, which connects to the remote
 *	 postmaster, sends the request and then blocks until the postmaster
 *	 closes that connection: it takes no deadline and restarts its system
 *	 calls after a signal, so a remote postmaster that accepts connections
 *	 but does not run (stopped, swapped out) holds it until it runs again.
 *	 postgres_fdw of 15 lives with that.  We use PQcancel only when an
 *	 interrupt (a query cancel: a control call, pg_cancel_backend, a
 *	 session's statement_timeout) ends a wait for a statement that is still
 *	 running, never after a timeout and never on the way out of a
 *	 terminating process (SIGTERM raises FATAL, which exits without
 *	 unwinding through us).  After a timeout the connection is just
 *	 dropped: the remote is not answering, and the statement is bounded on
 *	 the remote side by the statement_timeout that every session of ours
 *	 gets (the same streamguard.remote_timeout), while a backend stalled
 *	 outright is ended by the stale-session rule below before the next
 *	 attempt does anything.
 *
 * - A connection we gave up on may have a remote backend that lives on
 *	 (stalled) and still executes what we sent last; the next connection of
 *	 the same SgRemote ends it first (sg_end_stale_session).
 *
 * THE FILES.  The connection's life (external FD, the per-backend list,
 * the abort callbacks that close it), the waits and the result wrappers
 * share one invariant: a PGconn or PGresult never outlives its owner, on
 * any path, ERROR included.  Every PGconn is made and freed in
 * remote_conn.c, beside the callbacks that clean up after it; every
 * PGresult a caller gets is wrapped in remote_result.c; the other files
 * clear theirs before anything that can fail.  Callers see only SgRemote
 * and SgRemoteResult.
 *
 * This file: the option list and its validator, RemoteConnect (USAGE and
 * the password rule, the session's statement_timeout, the stale session
 * ended), RemoteConnected and RemoteLiteral.  The rest is in remote_conn.c
 * (the connection list, open and close, the abort callbacks, the socket
 * wait, giving up on a connection), remote_result.c (result wrappers and
 * their readers, remote errors raised), remote_exec.c (statements sent
 * and waited for, or read later) and remote_copy.c (COPY); what they
 * share is in remote_int.h.  No locks: all of it is backend-local memory.
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
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "io/remote_int.h"

PG_FUNCTION_INFO_V1(sg_remote_validator);

int			sg_remote_timeout_ms = 10000;

static void sg_end_stale_session(SgRemote *r);
static void sg_session_setup(SgRemote *r, TimestampTz deadline);

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

/* ---------------------------------------------------------- connecting */

/*
 * Connect to a streamguard_remote server as `userid`'s user mapping.
 * Checks USAGE on the server and the password rule.  The connection
 * belongs to the current transaction (see the header comment).
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

	if (RemoteConnected(r))
		return;
	RemoteDisconnect(r);
	if (strcmp(r->server_name, server_name) != 0)
		r->stale_pid = 0;		/* another server: nothing of ours there */
	strlcpy(r->server_name, server_name, sizeof(r->server_name));
	sg_remote_init();

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
	/* text both ways in our encoding, whatever the remote database's is */
	keys[n] = "client_encoding";
	vals[n++] = GetDatabaseEncodingName();
	keys[n] = NULL;
	vals[n] = NULL;

	if (!superuser_arg(userid) && !has_password)
	{
		sg_set_last_error(r, "password is required");
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required"),
				 errdetail("Non-superusers must provide a password in the user mapping for server \"%s\".",
						   server_name)));
	}

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);
	PG_TRY();
	{
		PGconn	   *conn;

		sg_conn_open(r, keys, vals, deadline);
		conn = sg_conn_find(r->conn_id)->conn;
		if (!superuser_arg(userid) && !PQconnectionUsedPassword(conn))
		{
			sg_set_last_error(r, "password is required");
			ereport(ERROR,
					(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
					 errmsg("password is required"),
					 errdetail("Non-superuser cannot connect if the server does not request a password."),
					 errhint("Target server's authentication method must be changed.")));
		}
		if (PQsetnonblocking(conn, 1) != 0)
			sg_remote_fail(r, "could not make the connection non-blocking", NULL);
		r->last_error[0] = '\0';
		/* remote statements must not run longer than we wait for them */
		sg_session_setup(r, deadline);
		if (r->stale_pid > 0)
			sg_end_stale_session(r);
	}
	PG_CATCH();
	{
		/*
		 * Close it now rather than at abort.  It carried nothing of the
		 * caller's yet (backend_pid is still 0), so it is no stale session
		 * to end later, and an earlier one stays recorded.
		 */
		RemoteDisconnect(r);
		PG_RE_THROW();
	}
	PG_END_TRY();
	r->backend_pid = PQbackendPID(sg_conn_find(r->conn_id)->conn);
}

/* the remote backend's start, UTC, as text whatever the session's DateStyle */
#define SG_BACKEND_START "pg_catalog.to_char(backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"

/*
 * A new session, in one round trip: its statement_timeout (remote
 * statements must not run longer than we wait for them) and its backend's
 * start, which with the pid names this backend later (sg_end_stale_session).
 */
static void
sg_session_setup(SgRemote *r, TimestampTz deadline)
{
	char		timeout[16];
	const char *params[1] = {timeout};
	PGresult   *res;

	snprintf(timeout, sizeof(timeout), "%d", sg_remote_timeout_ms);
	res = sg_exec(r, "SELECT pg_catalog.set_config('statement_timeout', $1, false), "
				  "(SELECT " SG_BACKEND_START " FROM pg_catalog.pg_stat_activity "
				  "WHERE pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid())",
				  1, params, false, false, deadline);
	r->backend_start[0] = '\0';
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 1))
		strlcpy(r->backend_start, PQgetvalue(res, 0, 1), sizeof(r->backend_start));
	PQclear(res);
}

/*
 * End the remote backend of an earlier connection of ours and wait until
 * it is gone.  A backend we gave up on may still hold a statement we sent
 * (a delayed COMMIT or PREPARE TRANSACTION); once it has exited, nothing
 * of the old session can land behind our back.  If it does not end in
 * time, the attempt fails and stale_pid stays for the next connection.
 */
static void
sg_end_stale_session(SgRemote *r)
{
	char		pid[16];
	const char *params[2] = {pid, r->stale_start};
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);

	/*
	 * Only that backend: the same pid and the same start (a pid is reused,
	 * and ending a stranger's session is not ours to do), and only while it
	 * is there (no WARNING on the remote for a pid that is gone).
	 */
	const char *which;
	int			nparams = 2;

	snprintf(pid, sizeof(pid), "%d", r->stale_pid);
	/* a start never read (cannot happen with a visible own row): the pid alone */
	if (r->stale_start[0] == '\0')
	{
		which = "FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4";
		nparams = 1;
	}
	else
		which = "FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4 "
			"AND " SG_BACKEND_START " OPERATOR(pg_catalog.=) $2";
	sg_exec_ok(r, psprintf("SELECT pg_catalog.pg_terminate_backend(pid) %s", which), nparams, params);
	for (;;)
	{
		PGresult   *res = sg_exec(r, psprintf("SELECT 1 %s", which),
								  nparams, params, false, false, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																				sg_remote_timeout_ms));
		bool		alive = PQntuples(res) > 0;

		PQclear(res);
		if (!alive)
			break;
		if (GetCurrentTimestamp() > deadline)
			sg_remote_fail(r, "an earlier session does not end",
						   "its backend is still alive (is the mapped user allowed to end it?)");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50L, sg_we_stale);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	r->stale_pid = 0;
}

bool
RemoteConnected(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);

	return c != NULL && PQstatus(c->conn) == CONNECTION_OK;
}

/*
 * Quote a value for the remote as a literal.
 */
char *
RemoteLiteral(SgRemote *r, const char *s)
{
	SgConn	   *c = sg_conn_find(r->conn_id);
	char	   *q;
	char	   *volatile out = NULL;

	if (c == NULL)
		sg_remote_fail(r, "not connected", "the connection was lost");
	q = PQescapeLiteral(c->conn, s, strlen(s));
	if (q == NULL)
		sg_remote_fail(r, "could not quote", NULL);
	PG_TRY();
	{
		out = pstrdup(q);
	}
	PG_FINALLY();
	{
		PQfreemem(q);
	}
	PG_END_TRY();
	return out;
}
