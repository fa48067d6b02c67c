/*-------------------------------------------------------------------------
 *
 * launcher.h
 *		The launcher (launcher.c): one maintenance worker per database, and
 *		the per-database mailboxes between backends, maintenance workers and
 *		the launcher.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_LAUNCHER_H
#define SG_LAUNCHER_H

#include "postgres.h"

/* GUC (registered by streamguard.c) */
extern int	sg_launcher_naptime_ms;

extern Size LauncherShmemSize(void);
extern void LauncherShmemRequest(void);
extern void LauncherShmemInit(void);
extern void LauncherWake(void);
extern void LauncherMarkAbsent(Oid dbid);
extern void LauncherRegisterWorker(Oid dbid, pid_t pid);
extern int	LauncherRunningWorkers(void);

#endif							/* SG_LAUNCHER_H */
