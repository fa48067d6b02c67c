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
 * WHY ONE FILE (about 1,000 lines).  The connection's life (external FD,
 * the per-backend list, the abort callbacks that close it), the waits and
 * the result wrappers share one invariant: a PGconn or PGresult never
 * outlives its owner, on any path, ERROR included.  Kept together, every
 * place that creates or frees one is in view of the callbacks that clean up
 * after it; callers see only SgRemote and SgRemoteResult.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "access/xact.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "lib/ilist.h"
#include "libpq-fe.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "io/remote.h"

PG_FUNCTION_INFO_V1(sg_remote_validator);

int			sg_remote_timeout_ms = 10000;

/*
 * An open connection.  Allocated in TopMemoryContext and listed in
 * sg_conns from PQconnectStartParams until sg_conn_close.
 */
typedef struct SgConn
{
	dlist_node	node;
	uint32		id;				/* what SgRemote.conn_id holds */
	PGconn	   *conn;
	int			xact_level;		/* nest level of the (sub)transaction it
								 * belongs to */
	char		server_name[NAMEDATALEN];	/* for log messages */
	char	   *pending_sql;	/* sent without waiting, result not read yet */
	TimestampTz pending_start;
	uint64		pending_ticket; /* RemoteSendQuery's, or 0: result unwanted */
	bool		in_copy;		/* RemoteCopyStart sent a COPY not ended yet */
	bool		copy_ready;		/* ... and the remote is reading its rows */
} SgConn;

static dlist_head sg_conns = DLIST_STATIC_INIT(sg_conns);
static uint32 sg_last_conn_id = 0;
static uint64 sg_last_ticket = 0;
static bool sg_callbacks_registered = false;

/*
 * A result handed to a caller of RemoteExec: allocated in the memory context
 * that was current then, whose reset callback (cb) PQclears it.
 */
struct SgRemoteResult
{
	PGresult   *res;			/* NULL once cleared */
	MemoryContextCallback cb;
};

/* wait events (compat.h), set on first use */
static uint32 sg_we_connect = 0;
static uint32 sg_we_send;
static uint32 sg_we_result;
static uint32 sg_we_stale;

static void sg_end_stale_session(SgRemote *r);
static TimestampTz sg_deadline(void);

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

/* --------------------------------------------------------- connections */

static SgConn *
sg_conn_find(uint32 id)
{
	dlist_iter	it;

	if (id == 0)
		return NULL;
	dlist_foreach(it, &sg_conns)
	{
		SgConn	   *c = dlist_container(SgConn, node, it.cur);

		if (c->id == id)
			return c;
	}
	return NULL;
}

/*
 * The one place that closes a connection.  PQfinish does not wait: our
 * connections are non-blocking once set up, and before that no Terminate
 * message is sent.
 */
static void
sg_conn_close(SgConn *c)
{
	dlist_delete(&c->node);
	PQfinish(c->conn);
	ReleaseExternalFD();
	if (c->pending_sql)
		pfree(c->pending_sql);
	pfree(c);
}

/*
 * Transaction callbacks: a connection is closed when a transaction it
 * belongs to aborts.  Interrupts are held here, and nothing waits.
 */
static void
sg_xact_callback(XactEvent event, void *arg)
{
	dlist_mutable_iter it;

	if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT)
		return;
	dlist_foreach_modify(it, &sg_conns)
		sg_conn_close(dlist_container(SgConn, node, it.cur));
}

static void
sg_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	dlist_mutable_iter it;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	dlist_foreach_modify(it, &sg_conns)
	{
		SgConn	   *c = dlist_container(SgConn, node, it.cur);

		if (c->xact_level < level)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			sg_conn_close(c);
		else
			c->xact_level = level - 1;	/* now the parent's */
	}
}

static void
sg_remote_init(void)
{
	if (!sg_callbacks_registered)
	{
		RegisterXactCallback(sg_xact_callback, NULL);
		RegisterSubXactCallback(sg_subxact_callback, NULL);
		sg_callbacks_registered = true;
	}
	if (sg_we_connect == 0)
	{
		sg_we_connect = SG_WAIT_EVENT("StreamguardRemoteConnect", 1);
		sg_we_send = SG_WAIT_EVENT("StreamguardRemoteSend", 2);
		sg_we_result = SG_WAIT_EVENT("StreamguardRemoteResult", 3);
		sg_we_stale = SG_WAIT_EVENT("StreamguardRemoteStaleSession", 4);
	}
}

/*
 * Remote NOTICE, WARNING and the like, as they arrive: into the server log
 * with the server's name, instead of libpq's default, stderr.  A remote
 * WARNING is logged at LOG (server log only: it is no business of our
 * client's), anything milder at DEBUG1 (a trigger on a sink table may say
 * something for every row).
 */
static void
sg_notice_receiver(void *arg, const PGresult *res)
{
	SgConn	   *c = (SgConn *) arg;
	const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *shown = PQresultErrorField(res, PG_DIAG_SEVERITY);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

	if (primary == NULL)
		primary = PQresultErrorMessage(res);
	ereport(severity && strcmp(severity, "WARNING") == 0 ? LOG_SERVER_ONLY : DEBUG1,
			(errmsg_internal("remote server \"%s\" %s: %s", c->server_name,
							 shown ? shown : "NOTICE", primary),
			 detail ? errdetail_internal("%s", detail) : 0,
			 hint ? errhint("%s", hint) : 0));
}

/* ------------------------------------------------------------- failing */

/*
 * Keep `msg` as r->last_error: one line (the views show it in a column),
 * cut at a character boundary.
 */
static void
sg_set_last_error(SgRemote *r, const char *msg)
{
	size_t		n = 0;
	bool		space = false;
	const char *p;

	for (p = msg; *p && n < sizeof(r->last_error) - 1; p++)
	{
		if (*p == '\n' || *p == '\r' || *p == '\t' || *p == ' ')
		{
			space = n > 0;
			continue;
		}
		if (space)
		{
			r->last_error[n++] = ' ';
			space = false;
			if (n >= sizeof(r->last_error) - 1)
				break;
		}
		r->last_error[n++] = *p;
	}
	r->last_error[n] = '\0';
	r->last_error[pg_mbcliplen(r->last_error, (int) n, (int) n)] = '\0';
}

/* libpq's message without its trailing newlines */
static char *
sg_conn_message(PGconn *conn)
{
	char	   *msg = pstrdup(conn ? PQerrorMessage(conn) : "");
	size_t		len = strlen(msg);

	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
		msg[--len] = '\0';
	return msg;
}

pg_noreturn static void sg_remote_fail(SgRemote *r, const char *what, const char *detail);

/*
 * Give up on the connection: drop it and raise a connection failure (a
 * retryable error for the pipeline worker).  `detail` NULL: libpq's message.
 */
static void
sg_remote_fail(SgRemote *r, const char *what, const char *detail)
{
	SgConn	   *c = sg_conn_find(r->conn_id);
	char	   *msg = detail ? pstrdup(detail) : sg_conn_message(c ? c->conn : NULL);

	sg_set_last_error(r, msg[0] ? psprintf("%s: %s", what, msg) : what);
	RemoteDisconnect(r);
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("remote server \"%s\": %s", r->server_name, what),
			 errdetail_internal("%s", msg)));
}

/*
 * Raise the remote error in `res` (which is PQcleared) field by field, with
 * the remote SQL as context.  The remote SQLSTATE is kept, except when the
 * remote session itself ended (FATAL: terminated, idle timeouts, shutdown):
 * then it is a connection failure here, like any other lost connection, and
 * not something a client of ours should read as about its own session.
 */
pg_noreturn static void sg_report_remote_error(SgRemote *r, PGresult *res, const char *sql);

static void
sg_report_remote_error(SgRemote *r, PGresult *res, const char *sql)
{
	PG_TRY();
	{
		SgConn	   *c = sg_conn_find(r->conn_id);
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
		const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
		const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
		const char *context = PQresultErrorField(res, PG_DIAG_CONTEXT);
		bool		session_ended = severity &&
			(strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0);
		int			code = ERRCODE_CONNECTION_FAILURE;

		/* errors libpq makes up itself have no fields: take its message */
		if (primary == NULL || primary[0] == '\0')
			primary = sg_conn_message(c ? c->conn : NULL);
		if (primary[0] == '\0')
			primary = "could not obtain message string for remote error";
		if (state && strlen(state) == 5 && !session_ended)
			code = MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]);
		sg_set_last_error(r, primary);
		/* a connection the remote ended is of no further use */
		if (c == NULL || PQstatus(c->conn) != CONNECTION_OK)
			RemoteDisconnect(r);
		ereport(ERROR,
				(errcode(code),
				 errmsg("remote server \"%s\": %s", r->server_name, primary),
				 detail ? errdetail_internal("%s", detail) :
				 (session_ended && state) ? errdetail_internal("The remote session ended (SQLSTATE %s).", state) : 0,
				 hint ? errhint("%s", hint) : 0,
				 context ? errcontext("%s", context) : 0,
				 sql ? errcontext("remote SQL command: %s", sql) : 0));
	}
	PG_FINALLY();
	{
		PQclear(res);
	}
	PG_END_TRY();
	pg_unreachable();
}

/* ------------------------------------------------------------- waiting */

/*
 * Wait until conn's socket is ready for `events`: true, or false once the
 * deadline has passed.  An interrupt throws (CHECK_FOR_INTERRUPTS) and
 * postmaster death exits; nothing spins.
 */
static bool
sg_wait_socket(PGconn *conn, int events, TimestampTz deadline, uint32 wait_event)
{
	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		pgsocket	sock = PQsocket(conn);
		int			rc;

		if (left <= 0)
			return false;
		/* no socket (the connection broke): the caller's libpq call says why */
		if (sock == PGINVALID_SOCKET)
			return true;
		rc = WaitLatchOrSocket(MyLatch,
							   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH | events,
							   sock, left, wait_event);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (rc & events)
			return true;
	}
}

/*
 * Send what libpq has buffered.  While the socket is full, what the remote
 * sends is read too (it may be blocked writing a notice to us).
 */
static void
sg_flush(SgRemote *r, PGconn *conn, TimestampTz deadline)
{
	for (;;)
	{
		int			f = PQflush(conn);

		if (f == 0)
			return;
		if (f < 0)
			sg_remote_fail(r, "could not send data", NULL);
		if (!sg_wait_socket(conn, WL_SOCKET_WRITEABLE | WL_SOCKET_READABLE, deadline, sg_we_send))
			sg_remote_fail(r, "could not send data", "timed out (streamguard.remote_timeout)");
		if (PQconsumeInput(conn) == 0)
			sg_remote_fail(r, "could not send data", NULL);
	}
}

/*
 * Ask the remote to cancel the statement running on conn, after an
 * interrupt.  PQcancel blocks (see the header comment for when it cannot
 * be bounded); a failure is only logged, the connection is dropped anyway.
 */
static void
sg_cancel(PGconn *conn, const char *server_name)
{
	PGcancel   *cancel;
	char		errbuf[256];

	if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_ACTIVE)
		return;					/* nothing running */
	cancel = PQgetCancel(conn);
	if (cancel == NULL)
		return;
	if (!PQcancel(cancel, errbuf, sizeof(errbuf)))
		ereport(LOG,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not send cancel request to remote server \"%s\": %s",
						server_name, errbuf)));
	PQfreeCancel(cancel);
}

/* ------------------------------------------------------------ statements */

/*
 * Wait for the results of the statement sent on conn (sending what is
 * still buffered first), until `deadline`.  Returns the last result (the
 * caller owns it), or the PGRES_COPY_IN one when copy_in.  A remote error
 * is raised (sg_report_remote_error), with `sql` as context.  A timeout or
 * a broken connection drops the connection; so does an interrupt, after
 * asking the remote to cancel the statement.
 */
static PGresult *
sg_await(SgRemote *r, PGconn *conn, const char *sql, bool copy_in,
		 TimestampTz start, TimestampTz deadline)
{
	PGresult   *volatile last = NULL;

	PG_TRY();
	{
		sg_flush(r, conn, deadline);
		for (;;)
		{
			PGresult   *res;
			ExecStatusType st;

			while (PQisBusy(conn))
			{
				if (!sg_wait_socket(conn, WL_SOCKET_READABLE, deadline, sg_we_result))
					sg_remote_fail(r, "statement failed", "timed out (streamguard.remote_timeout)");
				if (PQconsumeInput(conn) == 0)
					sg_remote_fail(r, "statement failed", NULL);
			}
			res = PQgetResult(conn);
			if (res == NULL)
				break;
			PQclear(last);
			last = res;
			st = PQresultStatus(res);
			if (copy_in && st == PGRES_COPY_IN)
				break;
			/* libpq would hand out a COPY result for ever */
			if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH)
				sg_remote_fail(r, "statement failed", "the remote started an unexpected COPY");
		}
	}
	PG_CATCH();
	{
		PQclear(last);
		/* sg_remote_fail dropped the connection already; an interrupt did not */
		if (r->conn_id != 0)
		{
			sg_cancel(conn, r->server_name);
			RemoteDisconnect(r);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (last == NULL)
		sg_remote_fail(r, "statement failed", "no result");
	if (PQresultStatus(last) == PGRES_FATAL_ERROR || PQresultStatus(last) == PGRES_BAD_RESPONSE)
		sg_report_remote_error(r, last, sql);
	r->rtt_us = GetCurrentTimestamp() - start;
	return last;
}

/*
 * Take the results of what was sent on c without waiting (RemoteSend,
 * RemoteSendQuery, the end of a COPY): the last one, owned by the caller,
 * or NULL when nothing is pending.  A remote error is raised like any
 * statement's.  The wait is bounded by streamguard.remote_timeout from now,
 * not from the send: the caller did local work in between, for as long as
 * it needed, and what the remote does is bounded by its statement_timeout.
 * A statement sent while a COPY is open would be taken for its rows: the
 * connection is dropped instead.
 */
static PGresult *
sg_take_pending(SgRemote *r, SgConn *c)
{
	char	   *sql = c->pending_sql;
	PGresult   *volatile res = NULL;

	if (c->in_copy)
		sg_remote_fail(r, "statement failed", "a COPY was left open");
	if (sql == NULL)
		return NULL;
	c->pending_sql = NULL;
	c->pending_ticket = 0;
	PG_TRY();
	{
		int64		rtt = r->rtt_us;

		/* what has arrived already is read without waiting */
		if (PQconsumeInput(c->conn) == 0)
			sg_remote_fail(r, "statement failed", NULL);
		res = sg_await(r, c->conn, sql, false, c->pending_start, sg_deadline());
		r->rtt_us = rtt;		/* that wait overlapped other work: no round trip */
	}
	PG_FINALLY();
	{
		pfree(sql);
	}
	PG_END_TRY();
	return res;
}

/* read (and drop) the result of what was sent without waiting, if anything */
static void
sg_finish_pending(SgRemote *r, SgConn *c)
{
	PQclear(sg_take_pending(r, c));
}

/* the connection of r, ready for a statement; or fail */
static SgConn *
sg_conn_ready(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);

	if (c == NULL || PQstatus(c->conn) != CONNECTION_OK)
		sg_remote_fail(r, "not connected", "the connection was lost");
	sg_finish_pending(r, c);
	return c;
}

/*
 * Send one statement: with parameters through the extended protocol
 * (results in binary when `binary`), without through the simple one, which
 * takes several statements separated by semicolons.
 */
static void
sg_send(SgRemote *r, SgConn *c, const char *sql, int nparams, const char *const *params,
		bool simple, bool binary)
{
	if (!(simple ? PQsendQuery(c->conn, sql) :
		  PQsendQueryParams(c->conn, sql, nparams, NULL, params, NULL, NULL, binary ? 1 : 0)))
		sg_remote_fail(r, "could not send statement", NULL);
}

/* send one statement and wait for it (sg_await) */
static PGresult *
sg_exec(SgRemote *r, const char *sql, int nparams, const char *const *params,
		bool copy_in, bool binary, TimestampTz deadline)
{
	TimestampTz start;
	SgConn	   *c = sg_conn_ready(r);

	start = GetCurrentTimestamp();
	sg_send(r, c, sql, nparams, params, copy_in, binary);
	return sg_await(r, c->conn, sql, copy_in, start, deadline);
}

static TimestampTz
sg_deadline(void)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);
}

/* a statement whose result is not needed */
static void
sg_exec_ok(SgRemote *r, const char *sql, int nparams, const char *const *params)
{
	PQclear(sg_exec(r, sql, nparams, params, false, false, sg_deadline()));
}

static void
sg_result_release(void *arg)
{
	SgRemoteResult *rr = (SgRemoteResult *) arg;

	PQclear(rr->res);
	rr->res = NULL;
}

/* an empty result wrapper owned by CurrentMemoryContext */
static SgRemoteResult *
sg_result_new(void)
{
	SgRemoteResult *rr = palloc0(sizeof(SgRemoteResult));

	rr->cb.func = sg_result_release;
	rr->cb.arg = rr;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &rr->cb);
	return rr;
}

/*
 * Run a statement and return its result, owned by CurrentMemoryContext:
 * freed by RemoteClear, or when that context is reset or deleted (after an
 * ERROR too).  The values RemoteGetValue returns live as long.  With
 * `binary` the values are in the types' binary format (RemoteGetLength).
 */
SgRemoteResult *
RemoteExecParams(SgRemote *r, const char *sql, int nparams, const char *const *params, bool binary)
{
	/* owner first: nothing may fail between getting the result and owning it */
	SgRemoteResult *rr = sg_result_new();

	rr->res = sg_exec(r, sql, nparams, params, false, binary, sg_deadline());
	return rr;
}

SgRemoteResult *
RemoteExec(SgRemote *r, const char *sql, int nparams, const char *const *params)
{
	return RemoteExecParams(r, sql, nparams, params, false);
}

void
RemoteExecOk(SgRemote *r, const char *sql)
{
	sg_exec_ok(r, sql, 0, NULL);
}

/* c's statement is on its way: no result read yet */
static void
sg_set_pending(SgRemote *r, SgConn *c, const char *sql, TimestampTz start, uint64 ticket)
{
	c->pending_start = start;
	c->pending_sql = MemoryContextStrdup(TopMemoryContext, sql);
	c->pending_ticket = ticket;
	/* on its way now, not when the result is wanted */
	sg_flush(r, c->conn, sg_deadline());
}

/*
 * Send a statement (no parameters) and return without waiting for its
 * result: its round trip and whatever the remote does for it (a COMMIT
 * PREPARED's flush) overlap the caller's next local work.  RemoteFinish
 * reads the result, as does the next statement sent on the connection
 * first; an error in it is raised there.  A connection closed meanwhile
 * drops it unread (the caller then cannot know whether it ran).
 */
void
RemoteSend(SgRemote *r, const char *sql)
{
	SgConn	   *c = sg_conn_ready(r);
	TimestampTz start = GetCurrentTimestamp();

	sg_send(r, c, sql, 0, NULL, false, false);
	sg_set_pending(r, c, sql, start, 0);
}

/*
 * Send a statement whose result the caller wants later, without waiting
 * (a read ahead: the remote works on it while the caller does something
 * else).  Returns a ticket for RemoteReceive.  Anything else sent on the
 * connection first, or its loss, drops the result unread.
 */
uint64
RemoteSendQuery(SgRemote *r, const char *sql, int nparams, const char *const *params, bool binary)
{
	SgConn	   *c = sg_conn_ready(r);
	TimestampTz start = GetCurrentTimestamp();

	sg_send(r, c, sql, nparams, params, false, binary);
	if (++sg_last_ticket == 0)
		sg_last_ticket = 1;
	sg_set_pending(r, c, sql, start, sg_last_ticket);
	return sg_last_ticket;
}

/*
 * The result of the statement RemoteSendQuery sent under `ticket`, owned by
 * CurrentMemoryContext as RemoteExec's; NULL if it is not to be had any more
 * (the connection was closed, or another statement sent meanwhile dropped
 * it): the caller runs the statement again.
 */
SgRemoteResult *
RemoteReceive(SgRemote *r, uint64 ticket)
{
	SgConn	   *c = sg_conn_find(r->conn_id);
	SgRemoteResult *rr;

	if (ticket == 0 || c == NULL || c->pending_sql == NULL || c->pending_ticket != ticket ||
		PQstatus(c->conn) != CONNECTION_OK)
		return NULL;
	rr = sg_result_new();
	rr->res = sg_take_pending(r, c);
	return rr;
}

/* wait for the result of what was sent without waiting, if anything */
void
RemoteFinish(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);

	if (c != NULL)
		sg_finish_pending(r, c);
}

/* ------------------------------------------------------- streamed COPY */

/*
 * A remote transaction in one message, with its rows streamed while the
 * caller renders them: RemoteCopyStart sends `sql` -- statements separated
 * by semicolons, one of them a "COPY ... FROM STDIN" -- without waiting;
 * RemoteCopyData sends rows (COPY text format) as they come; RemoteCopyEnd
 * ends the rows, and the remote goes on with the statements after the COPY
 * (the PREPARE TRANSACTION or COMMIT of the batch) while the caller does
 * its own work; RemoteFinish, or RemoteReceive with the ticket RemoteCopyEnd
 * returns, reads the last result then.  The remote stops at the first
 * statement that fails, so the last result is the error if there is one.
 * Nothing else may be sent on the connection in between.  Any failure
 * after the COPY began drops the connection: half a COPY must not be taken
 * for all of it.
 */
void
RemoteCopyStart(SgRemote *r, const char *sql)
{
	SgConn	   *c = sg_conn_ready(r);
	TimestampTz start = GetCurrentTimestamp();

	sg_send(r, c, sql, 0, NULL, true, false);
	sg_set_pending(r, c, sql, start, 0);
	c->in_copy = true;
	c->copy_ready = false;
}

/* the open COPY's connection, once the remote reads rows */
static SgConn *
sg_copy_ready(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);
	PGresult   *res;

	if (c == NULL || !c->in_copy || PQstatus(c->conn) != CONNECTION_OK)
		sg_remote_fail(r, "COPY failed", "the connection was lost");
	if (c->copy_ready)
		return c;
	/* the statements before the COPY: an error in one is the last result */
	res = sg_await(r, c->conn, c->pending_sql, true, c->pending_start, sg_deadline());
	if (PQresultStatus(res) != PGRES_COPY_IN)
	{
		PQclear(res);
		sg_remote_fail(r, "COPY did not start", NULL);
	}
	PQclear(res);
	c->copy_ready = true;
	return c;
}

void
RemoteCopyData(SgRemote *r, const char *data, size_t len)
{
	SgConn	   *c = sg_copy_ready(r);
	TimestampTz deadline = sg_deadline();
	size_t		off = 0;

	PG_TRY();
	{
		while (off < len)
		{
			size_t		chunk = Min(len - off, (size_t) 65536);
			int			rc = PQputCopyData(c->conn, data + off, (int) chunk);

			if (rc < 0)
				sg_remote_fail(r, "COPY failed", NULL);
			if (rc > 0)
				off += chunk;
			/* rc == 0: libpq's buffer is full; sending makes room */
			sg_flush(r, c->conn, deadline);
		}
	}
	PG_CATCH();
	{
		if (r->conn_id != 0)
			RemoteDisconnect(r);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

uint64
RemoteCopyEnd(SgRemote *r)
{
	SgConn	   *c = sg_copy_ready(r);
	TimestampTz deadline = sg_deadline();

	PG_TRY();
	{
		for (;;)
		{
			int			rc = PQputCopyEnd(c->conn, NULL);

			if (rc < 0)
				sg_remote_fail(r, "COPY failed", NULL);
			sg_flush(r, c->conn, deadline);
			if (rc > 0)
				break;
		}
	}
	PG_CATCH();
	{
		if (r->conn_id != 0)
			RemoteDisconnect(r);
		PG_RE_THROW();
	}
	PG_END_TRY();
	c->in_copy = false;
	c->copy_ready = false;
	if (++sg_last_ticket == 0)
		sg_last_ticket = 1;
	c->pending_ticket = sg_last_ticket;
	return sg_last_ticket;
}

int
RemoteNTuples(const SgRemoteResult *res)
{
	Assert(res->res != NULL);
	return PQntuples(res->res);
}

char *
RemoteGetValue(const SgRemoteResult *res, int row, int col)
{
	Assert(res->res != NULL);
	return PQgetvalue(res->res, row, col);
}

bool
RemoteGetIsNull(const SgRemoteResult *res, int row, int col)
{
	Assert(res->res != NULL);
	return PQgetisnull(res->res, row, col) != 0;
}

int
RemoteGetLength(const SgRemoteResult *res, int row, int col)
{
	Assert(res->res != NULL);
	return PQgetlength(res->res, row, col);
}

int
RemoteNFields(const SgRemoteResult *res)
{
	Assert(res->res != NULL);
	return PQnfields(res->res);
}

/* the remote's type of a column (built-in types have the same OID here) */
Oid
RemoteGetType(const SgRemoteResult *res, int col)
{
	Assert(res->res != NULL);
	return PQftype(res->res, col);
}

/*
 * Free a result now.  (The small wrapper stays until its context goes: a
 * reset callback cannot be unregistered.)
 */
void
RemoteClear(SgRemoteResult *res)
{
	if (res != NULL)
		sg_result_release(res);
}

/*
 * COPY `data` (text format) into the remote with `copy_sql`
 * ("COPY t (cols) FROM STDIN"), all of it within one streamguard.remote_timeout.
 */
void
RemoteCopyIn(SgRemote *r, const char *copy_sql, const char *data, size_t len)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz deadline = TimestampTzPlusMilliseconds(start, sg_remote_timeout_ms);
	PGresult   *res;
	PGconn	   *conn;
	size_t		off = 0;

	res = sg_exec(r, copy_sql, 0, NULL, true, false, deadline);
	if (PQresultStatus(res) != PGRES_COPY_IN)
	{
		PQclear(res);
		sg_remote_fail(r, "COPY did not start", NULL);
	}
	PQclear(res);
	conn = sg_conn_find(r->conn_id)->conn;

	PG_TRY();
	{
		while (off < len)
		{
			size_t		chunk = Min(len - off, (size_t) 65536);
			int			rc = PQputCopyData(conn, data + off, (int) chunk);

			if (rc < 0)
				sg_remote_fail(r, "COPY failed", NULL);
			if (rc > 0)
				off += chunk;
			/* rc == 0: libpq's buffer is full; sending makes room */
			sg_flush(r, conn, deadline);
		}
		for (;;)
		{
			int			rc = PQputCopyEnd(conn, NULL);

			if (rc < 0)
				sg_remote_fail(r, "COPY failed", NULL);
			sg_flush(r, conn, deadline);
			if (rc > 0)
				break;
		}
	}
	PG_CATCH();
	{
		/* half a COPY must not be taken for all of it: drop the connection */
		if (r->conn_id != 0)
			RemoteDisconnect(r);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* the COPY's own result: its rows count, or the remote's error */
	PQclear(sg_await(r, conn, copy_sql, false, start, deadline));
}

/* ---------------------------------------------------------- connecting */

/*
 * Start a connection and wait until it is made, at most until `deadline`.
 * From PQconnectStartParams on, the connection is in sg_conns and
 * r->conn_id names it: whatever fails later closes it through that.
 */
static void
sg_conn_open(SgRemote *r, const char **keys, const char **vals, TimestampTz deadline)
{
	SgConn	   *c = MemoryContextAllocZero(TopMemoryContext, sizeof(SgConn));
	PostgresPollingStatusType st;

	strlcpy(c->server_name, r->server_name, sizeof(c->server_name));
	/* a socket of ours, outside fd.c: count it against max_files_per_process */
	if (!AcquireExternalFD())
	{
		pfree(c);
		sg_set_last_error(r, "could not connect: too many open files on the local server");
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("remote server \"%s\": could not connect", r->server_name),
				 errdetail("There are too many open files on the local server."),
				 errhint("Raise the server's max_files_per_process and/or \"ulimit -n\" limits.")));
	}
	c->conn = PQconnectStartParams(keys, vals, false);
	if (c->conn == NULL)
	{
		ReleaseExternalFD();
		pfree(c);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory connecting to server \"%s\"", r->server_name)));
	}
	if (++sg_last_conn_id == 0)
		sg_last_conn_id = 1;
	c->id = sg_last_conn_id;
	c->xact_level = GetCurrentTransactionNestLevel();
	dlist_push_tail(&sg_conns, &c->node);
	r->conn_id = c->id;
	r->backend_pid = 0;
	PQsetNoticeReceiver(c->conn, sg_notice_receiver, c);

	if (PQstatus(c->conn) == CONNECTION_BAD)
		sg_remote_fail(r, "could not connect", NULL);
	st = PGRES_POLLING_WRITING;
	while (st != PGRES_POLLING_OK)
	{
		if (st == PGRES_POLLING_FAILED)
			sg_remote_fail(r, "could not connect", NULL);
		/* the socket may change between polls (next address, next host) */
		if (!sg_wait_socket(c->conn, st == PGRES_POLLING_READING ? WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE,
							deadline, sg_we_connect))
			sg_remote_fail(r, "could not connect", "timed out (streamguard.remote_timeout)");
		st = PQconnectPoll(c->conn);
	}
}

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
		sg_exec_ok(r, psprintf("SET statement_timeout = %d", sg_remote_timeout_ms), 0, NULL);
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

/*
 * Close r's connection, if it still has one (a transaction abort may have
 * closed it already).  Its backend may live on (stalled) and still execute
 * what we sent: the next RemoteConnect of r ends it first.
 */
void
RemoteDisconnect(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);

	if (r->backend_pid > 0)
		r->stale_pid = r->backend_pid;
	if (c)
		sg_conn_close(c);
	r->conn_id = 0;
	r->backend_pid = 0;
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
	const char *params[1] = {pid};
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);

	snprintf(pid, sizeof(pid), "%d", r->stale_pid);
	sg_exec_ok(r, "SELECT pg_catalog.pg_terminate_backend($1::pg_catalog.int4)", 1, params);
	for (;;)
	{
		PGresult   *res = sg_exec(r, "SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4",
								  1, params, false, false, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
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
