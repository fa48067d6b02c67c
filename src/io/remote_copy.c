/*-------------------------------------------------------------------------
 *
 * remote_copy.c
 *		COPY into a remote server: streamed, in one message with the
 *		statements around it (RemoteCopyStart, RemoteCopyData,
 *		RemoteCopyEnd), or all of it in one call within one timeout
 *		(RemoteCopyIn).
 *
 * The rows go out on the non-blocking connection through sg_flush
 * (remote_exec.c), which reads what the remote sends while its socket is
 * full.  Any failure after a COPY began drops the connection: half a COPY
 * must not be taken for all of it.  Calls remote_exec.c and
 * remote_conn.c.  No locks: backend-local memory only.
 *
 * Exported (io/remote.h): RemoteCopyStart, RemoteCopyData, RemoteCopyEnd,
 * RemoteCopyIn.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "io/remote_int.h"

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

/* ------------------------------------------------------- COPY in one call */

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
