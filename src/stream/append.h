/*-------------------------------------------------------------------------
 *
 * append.h
 *		Appending events (append.c), for callers other than the SQL
 *		functions append and append_batch (change capture).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_APPEND_H
#define SG_APPEND_H

#include "catalog/sg_catalog.h"
#include "stream/store.h"

extern void StreamAppendEvents(SgStreamMeta *meta, SgEventRow *ev, int n);

#endif							/* SG_APPEND_H */
