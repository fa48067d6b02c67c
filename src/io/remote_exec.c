/*-------------------------------------------------------------------------
 *
 * remote_exec.c
 *		Remote statements: sent, and their results waited for within
 *		streamguard.remote_timeout (sg_await); run at once (RemoteExec,
 *		RemoteExecParams, RemoteExecOk) or sent without waiting and read
 *		later (RemoteSend, RemoteSendQuery, RemoteReceive, RemoteFinish).
 *
 * Every wait is on the socket and the latch (sg_wait_socket, remote_conn.c),
 * never inside libpq.  A timeout or a broken connection drops the
 * connection; an interrupt does too, after asking the remote to cancel
 * the statement (sg_cancel; remote.c's header says when it does not).
 * Calls remote_conn.c and remote_result.c.  No locks: backend-local
 * memory only.
 *
 * Exported (remote_int.h): sg_deadline, sg_flush, sg_await, sg_conn_ready,
 * sg_send, sg_exec, sg_exec_ok, sg_set_pending, sg_last_ticket; and the
 * entry points above (io/remote.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "io/remote_int.h"

uint64		sg_last_ticket = 0;

/* ------------------------------------------------------------- waiting */

/*
 * Send what libpq has buffered.  While the socket is full, what the remote
 * sends is read too (it may be blocked writing a notice to us).
 */
void
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
 * interrupt.  PQcancel blocks (see remote.c's header comment for when it
 * cannot be bounded); a failure is only logged, the connection is dropped
 * anyway.
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
PGresult *
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
SgConn *
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
void
sg_send(SgRemote *r, SgConn *c, const char *sql, int nparams, const char *const *params,
		bool simple, bool binary)
{
	if (!(simple ? PQsendQuery(c->conn, sql) :
		  PQsendQueryParams(c->conn, sql, nparams, NULL, params, NULL, NULL, binary ? 1 : 0)))
		sg_remote_fail(r, "could not send statement", NULL);
}

/* send one statement and wait for it (sg_await) */
PGresult *
sg_exec(SgRemote *r, const char *sql, int nparams, const char *const *params,
		bool copy_in, bool binary, TimestampTz deadline)
{
	TimestampTz start;
	SgConn	   *c = sg_conn_ready(r);

	start = GetCurrentTimestamp();
	sg_send(r, c, sql, nparams, params, copy_in, binary);
	return sg_await(r, c->conn, sql, copy_in, start, deadline);
}

TimestampTz
sg_deadline(void)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);
}

/* a statement whose result is not needed */
void
sg_exec_ok(SgRemote *r, const char *sql, int nparams, const char *const *params)
{
	PQclear(sg_exec(r, sql, nparams, params, false, false, sg_deadline()));
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
void
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
