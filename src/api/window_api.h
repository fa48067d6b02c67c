/*-------------------------------------------------------------------------
 *
 * window_api.h
 *		create_window_pipeline (window_api.c): the bound it enforces.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_WINDOW_API_H
#define SG_WINDOW_API_H

/* GUC (registered by streamguard.c); its range is in core/bounds.h */
extern int	sg_max_windows_per_event;

#endif							/* SG_WINDOW_API_H */
