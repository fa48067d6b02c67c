/*-------------------------------------------------------------------------
 *
 * supervise.h
 *		The pipeline supervisor (supervise.c), called by the maintenance
 *		worker (maintenance.c) only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_SUPERVISE_H
#define SG_SUPERVISE_H

/* in a transaction with SPI connected, in the maintenance worker */
extern void SupervisePipelines(void);

#endif							/* SG_SUPERVISE_H */
