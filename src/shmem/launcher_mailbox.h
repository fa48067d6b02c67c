/*-------------------------------------------------------------------------
 *
 * launcher_mailbox.h
 *		The launcher's shared state (launcher_mailbox.c): its pid and the
 *		per-database mailboxes between backends, maintenance workers and
 *		the launcher (workers/launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_LAUNCHER_MAILBOX_H
#define SG_LAUNCHER_MAILBOX_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/hsearch.h"

extern Size LauncherShmemSize(void);
extern void LauncherShmemRequest(void);
extern void LauncherShmemInit(void);

/* backends and maintenance workers */
extern void LauncherWake(void);
extern void LauncherMarkAbsent(Oid dbid);
extern void LauncherRegisterWorker(Oid dbid, pid_t pid);
extern int	LauncherRunningWorkers(void);

/* the launcher */
extern void LauncherSetPid(pid_t pid);
extern bool LauncherTakeAllWanted(void);
extern bool LauncherCollect(Oid dbid, bool *wanted, TimestampTz *retry_after);
extern void LauncherPruneMailboxes(HTAB *known);

#endif							/* SG_LAUNCHER_MAILBOX_H */
