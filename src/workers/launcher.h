/*-------------------------------------------------------------------------
 *
 * launcher.h
 *		The launcher (launcher.c): one maintenance worker per database.  The
 *		per-database mailboxes between backends, maintenance workers and
 *		the launcher are shmem/launcher_mailbox.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_LAUNCHER_H
#define SG_LAUNCHER_H

#include "postgres.h"

/* GUC (registered by streamguard.c) */
extern int	sg_launcher_naptime_ms;

#endif							/* SG_LAUNCHER_H */
