/*-------------------------------------------------------------------------
 *
 * remote_conn.c
 *		The backend's remote connections: the list of open ones, making one
 *		(sg_conn_open: the external FD reserved, libpq polled, never waited
 *		in) and closing one (sg_conn_close, the only place that calls
 *		PQfinish), the transaction callbacks that close them when a
 *		(sub)transaction they belong to aborts, remote notices into the
 *		server log, the wait on a connection's socket, and giving up on a
 *		connection (sg_remote_fail).  The rules are in remote.c's header.
 *
 * The bottom of the remote files: it calls none of the others.  The list
 * is backend-local (TopMemoryContext): no lock, no shared memory.  The
 * abort callbacks run with interrupts held and wait for nothing.
 *
 * Exported (remote_int.h, for the other remote*.c files): sg_remote_init,
 * sg_conn_find, sg_conn_open, sg_wait_socket, sg_set_last_error,
 * sg_conn_message, sg_remote_fail, the wait events sg_we_send,
 * sg_we_result and sg_we_stale; and RemoteDisconnect (io/remote.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "lib/ilist.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "core/util.h"
#include "io/remote_int.h"

static dlist_head sg_conns = DLIST_STATIC_INIT(sg_conns);
static uint32 sg_last_conn_id = 0;
static bool sg_callbacks_registered = false;

/* wait events (compat.h), set on first use */
static uint32 sg_we_connect = 0;
uint32		sg_we_send;
uint32		sg_we_result;
uint32		sg_we_stale;

/* --------------------------------------------------------- connections */

SgConn *
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

void
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
void
sg_set_last_error(SgRemote *r, const char *msg)
{
	char	   *line = SgOneLine(msg);
	int			n;

	strlcpy(r->last_error, line, sizeof(r->last_error));
	pfree(line);
	n = (int) strlen(r->last_error);
	r->last_error[pg_mbcliplen(r->last_error, n, n)] = '\0';
}

/* libpq's message without its trailing newlines */
char *
sg_conn_message(PGconn *conn)
{
	char	   *msg = pstrdup(conn ? PQerrorMessage(conn) : "");
	size_t		len = strlen(msg);

	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
		msg[--len] = '\0';
	return msg;
}

/*
 * Give up on the connection: drop it and raise a connection failure (a
 * retryable error for the pipeline worker).  `detail` NULL: libpq's message.
 */
void
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

/* ------------------------------------------------------------- waiting */

/*
 * Wait until conn's socket is ready for `events`: true, or false once the
 * deadline has passed.  An interrupt throws (CHECK_FOR_INTERRUPTS) and
 * postmaster death exits; nothing spins.
 */
bool
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

/* ------------------------------------------------- connecting, closing */

/*
 * Start a connection and wait until it is made, at most until `deadline`.
 * From PQconnectStartParams on, the connection is in sg_conns and
 * r->conn_id names it: whatever fails later closes it through that.
 */
void
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
 * Close r's connection, if it still has one (a transaction abort may have
 * closed it already).  Its backend may live on (stalled) and still execute
 * what we sent: the next RemoteConnect of r ends it first.
 */
void
RemoteDisconnect(SgRemote *r)
{
	SgConn	   *c = sg_conn_find(r->conn_id);

	if (r->backend_pid > 0)
	{
		r->stale_pid = r->backend_pid;
		strlcpy(r->stale_start, r->backend_start, sizeof(r->stale_start));
	}
	if (c)
		sg_conn_close(c);
	r->conn_id = 0;
	r->backend_pid = 0;
}
