/*-------------------------------------------------------------------------
 *
 * remote.h
 *		Connections to remote PostgreSQL servers (remote.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_REMOTE_H
#define SG_REMOTE_H

#include "postgres.h"

#include "libpq-fe.h"

typedef struct SgRemote
{
	PGconn	   *conn;
	char		server_name[NAMEDATALEN];
	int64		rtt_us;			/* last statement's round trip */
	int			stale_pid;		/* backend of a connection we gave up on */
	char		last_error[256];
} SgRemote;

extern int	sg_remote_timeout_ms;

extern void RemoteConnect(SgRemote *r, const char *server_name, Oid userid);
extern void RemoteDisconnect(SgRemote *r);
extern bool RemoteConnected(SgRemote *r);
extern PGresult *RemoteExec(SgRemote *r, const char *sql, int nparams, const char *const *params);
extern void RemoteExecOk(SgRemote *r, const char *sql);
extern void RemoteCopyIn(SgRemote *r, const char *copy_sql, const char *data, size_t len);
extern char *RemoteLiteral(SgRemote *r, const char *s);

#endif							/* SG_REMOTE_H */
