/*-------------------------------------------------------------------------
 *
 * remote_result.c
 *		What a caller gets of a remote statement: the SgRemoteResult
 *		wrapper, owned by a memory context whose reset callback PQclears
 *		it, and its readers; and a remote error, raised again field by
 *		field with the remote SQL as context (sg_report_remote_error).
 *
 * Calls only remote_conn.c.  No locks: backend-local memory only.
 *
 * Exported (remote_int.h): sg_result_new, sg_report_remote_error; and
 * RemoteNTuples, RemoteGetValue, RemoteGetIsNull, RemoteGetLength,
 * RemoteNFields, RemoteGetType, RemoteClear (io/remote.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "io/remote_int.h"

/* ------------------------------------------------------------- results */

static void
sg_result_release(void *arg)
{
	SgRemoteResult *rr = (SgRemoteResult *) arg;

	PQclear(rr->res);
	rr->res = NULL;
}

/* an empty result wrapper owned by CurrentMemoryContext */
SgRemoteResult *
sg_result_new(void)
{
	SgRemoteResult *rr = palloc0(sizeof(SgRemoteResult));

	rr->cb.func = sg_result_release;
	rr->cb.arg = rr;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &rr->cb);
	return rr;
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

/* -------------------------------------------------------- remote errors */

/*
 * Raise the remote error in `res` (which is PQcleared) field by field, with
 * the remote SQL as context.  The remote SQLSTATE is kept, except when the
 * remote session itself ended (FATAL: terminated, idle timeouts, shutdown):
 * then it is a connection failure here, like any other lost connection, and
 * not something a client of ours should read as about its own session.
 */
void
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
