/*-------------------------------------------------------------------------
 *
 * views.h
 *		The views' row predicates (views.c), for the other SQL-callable
 *		functions behind views.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_VIEWS_H
#define SG_VIEWS_H

#include "postgres.h"

extern bool PipelineVisibleToCaller(int32 pipeline_id);

#endif							/* SG_VIEWS_H */
