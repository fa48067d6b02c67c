/*-------------------------------------------------------------------------
 *
 * remote_int.h
 *		What the files of the libpq session layer share, and only they: a
 *		connection (SgConn), the result wrapper, and the helpers between
 *		the files.  Included by src/io/remote*.c only; the API is
 *		io/remote.h.
 *
 *		remote.c		option validator, RemoteConnect, stale sessions, quoting
 *		remote_conn.c	the connection list: open, close, abort callbacks,
 *						the socket wait, giving up on a connection
 *		remote_result.c	result wrappers and their readers; remote errors
 *		remote_exec.c	statements: sent, waited for, or read later
 *		remote_copy.c	COPY, streamed or in one call
 *
 * Each remote_*.c file calls only those listed above it (remote_conn.c
 * none of the others); remote.c, on top, calls remote_conn.c and
 * remote_exec.c.  No locks: all of it is backend-local memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_REMOTE_INT_H
#define SG_REMOTE_INT_H

#include "lib/ilist.h"
#include "libpq-fe.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "io/remote.h"

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

/*
 * A result handed to a caller of RemoteExec: allocated in the memory context
 * that was current then, whose reset callback (cb) PQclears it.
 */
struct SgRemoteResult
{
	PGresult   *res;			/* NULL once cleared */
	MemoryContextCallback cb;
};

/* remote_conn.c */
extern uint32 sg_we_send;
extern uint32 sg_we_result;
extern uint32 sg_we_stale;
extern void sg_remote_init(void);
extern SgConn *sg_conn_find(uint32 id);
extern void sg_conn_open(SgRemote *r, const char **keys, const char **vals, TimestampTz deadline);
extern bool sg_wait_socket(PGconn *conn, int events, TimestampTz deadline, uint32 wait_event);
extern void sg_set_last_error(SgRemote *r, const char *msg);
extern char *sg_conn_message(PGconn *conn);
pg_noreturn extern void sg_remote_fail(SgRemote *r, const char *what, const char *detail);

/* remote_result.c */
extern SgRemoteResult *sg_result_new(void);
pg_noreturn extern void sg_report_remote_error(SgRemote *r, PGresult *res, const char *sql);

/* remote_exec.c */
extern uint64 sg_last_ticket;
extern TimestampTz sg_deadline(void);
extern void sg_flush(SgRemote *r, PGconn *conn, TimestampTz deadline);
extern PGresult *sg_await(SgRemote *r, PGconn *conn, const char *sql, bool copy_in,
						  TimestampTz start, TimestampTz deadline);
extern SgConn *sg_conn_ready(SgRemote *r);
extern void sg_send(SgRemote *r, SgConn *c, const char *sql, int nparams,
					const char *const *params, bool simple, bool binary);
extern PGresult *sg_exec(SgRemote *r, const char *sql, int nparams, const char *const *params,
						 bool copy_in, bool binary, TimestampTz deadline);
extern void sg_exec_ok(SgRemote *r, const char *sql, int nparams, const char *const *params);
extern void sg_set_pending(SgRemote *r, SgConn *c, const char *sql, TimestampTz start,
						   uint64 ticket);

#endif							/* SG_REMOTE_INT_H */
