/*-------------------------------------------------------------------------
 *
 * sink_remote.h
 *		Between the files of the remote sink (routine.h): sink_remote.c,
 *		the routine (start, settling, the steps of a batch), and
 *		sink_remote_write.c, a batch's remote transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_SINK_REMOTE_H
#define SG_SINK_REMOTE_H

#include "io/remote.h"
#include "pipeline/worker.h"

/* the remote sink's state: w->sink_state */
typedef struct SgRemoteSink
{
	SgRemote	remote;			/* the sink server */

	/* the statements, built once at start (sink_remote.c) */
	char	   *copy_sql;		/* COPY <sink or staging table> (<cols>) FROM STDIN */
	char	   *upsert_sql;		/* upserting sink: staging table -> sink */
	char	   *stage_table;	/* upserting sink: its staging table */
	char	   *stage_ddl[2];	/* ... created by these, once per connection */
	bool		stage_ready;	/* ... and known to exist */

	/* between batches */
	bool		need_resolve;	/* settle in-doubt work before the next batch */
	char	   *done_gid;		/* COMMIT PREPARED sent; local record to drop */
	int64		attempts;		/* remote transactions tried by this worker */
	StringInfo	copy_buf;		/* rows being rendered */
	bool		dead_pending;	/* offsets mode: dead letters of ours may be
								 * left in the sink's table */

	/* the current batch */
	bool		resolved;		/* settled in this batch's transaction */
	bool		end_pending;	/* the remote transaction's end sent, not
								 * confirmed (SinkRemoteConfirm) */
	uint64		ticket;			/* ... the ticket of its last result */
	int			moved;			/* ... offsets mode: partitions it moves */
	char	   *sql;			/* ... the message (batch memory) */
	char	   *gid;			/* two_phase: prepared, committed after the
								 * local COMMIT (batch memory), or NULL */
} SgRemoteSink;

static inline SgRemoteSink *
RemoteSinkState(SgWorker *w)
{
	return (SgRemoteSink *) w->sink_state;
}

/* sink_remote_write.c */
extern void SinkRemoteForgetCommitted(SgWorker *w);
extern const char *SinkRemoteOwnPartitions(SgWorker *w);
extern bool SinkRemoteOwns(SgWorker *w, int p);
extern char *SinkRemoteWrite(SgWorker *w, Tuplestorestate *store, int64 n, int64 *rows,
							 int64 *first, int64 *last, int nparts);
extern void SinkRemoteConfirm(SgWorker *w);
extern int64 SinkRemoteRunIsolated(SgWorker *w, Tuplestorestate *store, int64 *first, int64 *last,
								   int nparts, char **gid);

#endif							/* SG_SINK_REMOTE_H */
