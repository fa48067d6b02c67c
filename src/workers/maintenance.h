/*-------------------------------------------------------------------------
 *
 * maintenance.h
 *		The per-database maintenance worker (maintenance.c): the settings
 *		it runs by.  Its entry point is named to PostgreSQL by string.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_MAINTENANCE_H
#define SG_MAINTENANCE_H

/* GUCs (registered by streamguard.c) */
extern int	sg_maintenance_naptime_ms;
extern int	sg_batch_history;

#endif							/* SG_MAINTENANCE_H */
