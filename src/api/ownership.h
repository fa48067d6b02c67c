/*-------------------------------------------------------------------------
 *
 * ownership.h
 *		The utility hook for DROP ROLE, REASSIGN OWNED, DROP OWNED and
 *		TRUNCATE of a partition (ownership.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_OWNERSHIP_H
#define SG_OWNERSHIP_H

extern void OwnershipInstallHooks(void);

#endif							/* SG_OWNERSHIP_H */
