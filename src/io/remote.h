/*-------------------------------------------------------------------------
 *
 * remote.h
 *		Connections to remote PostgreSQL servers (remote.c and the
 *		remote_*.c files, which io/remote_int.h lists).
 *
 * Callers hold an SgRemote, a handle: the libpq connection itself belongs
 * to remote_conn.c, which closes it when a local transaction it belongs to
 * aborts.  Results of RemoteExec belong to the memory context that was
 * current when it was called; nothing of libpq is visible here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_REMOTE_H
#define SG_REMOTE_H

#include "postgres.h"

typedef struct SgRemote
{
	uint32		conn_id;		/* remote_conn.c's connection; 0: none */
	int			backend_pid;	/* its remote backend, once set up; 0: none */
	char		server_name[NAMEDATALEN];
	int64		rtt_us;			/* last statement's round trip */
	char		backend_start[32];	/* its start, UTC text: pid and start name it */
	int			stale_pid;		/* backend of a connection we gave up on */
	char		stale_start[32];	/* ... and its start (a pid is reused) */
	char		last_error[256];	/* one line, for the views */
} SgRemote;

/* a statement's result; freed by RemoteClear or with its memory context */
typedef struct SgRemoteResult SgRemoteResult;

extern int	sg_remote_timeout_ms;

extern void RemoteConnect(SgRemote *r, const char *server_name, Oid userid);
extern void RemoteDisconnect(SgRemote *r);
extern bool RemoteConnected(SgRemote *r);
extern SgRemoteResult *RemoteExec(SgRemote *r, const char *sql, int nparams, const char *const *params);
extern SgRemoteResult *RemoteExecParams(SgRemote *r, const char *sql, int nparams,
										const char *const *params, bool binary);
extern void RemoteExecOk(SgRemote *r, const char *sql);
extern void RemoteSend(SgRemote *r, const char *sql);
extern uint64 RemoteSendQuery(SgRemote *r, const char *sql, int nparams,
							  const char *const *params, bool binary);
extern SgRemoteResult *RemoteReceive(SgRemote *r, uint64 ticket);
extern void RemoteFinish(SgRemote *r);
extern void RemoteCopyIn(SgRemote *r, const char *copy_sql, const char *data, size_t len);
extern void RemoteCopyStart(SgRemote *r, const char *sql);
extern void RemoteCopyData(SgRemote *r, const char *data, size_t len);
extern uint64 RemoteCopyEnd(SgRemote *r);
extern char *RemoteLiteral(SgRemote *r, const char *s);

extern int	RemoteNTuples(const SgRemoteResult *res);
extern char *RemoteGetValue(const SgRemoteResult *res, int row, int col);
extern bool RemoteGetIsNull(const SgRemoteResult *res, int row, int col);
extern int	RemoteGetLength(const SgRemoteResult *res, int row, int col);
extern int	RemoteNFields(const SgRemoteResult *res);
extern Oid	RemoteGetType(const SgRemoteResult *res, int col);
extern void RemoteClear(SgRemoteResult *res);

#endif							/* SG_REMOTE_H */
