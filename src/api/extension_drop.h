/*-------------------------------------------------------------------------
 *
 * extension_drop.h
 *		DROP EXTENSION streamguard without a deadlock against the running
 *		workers (extension_drop.c), for the utility hook (ownership.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_EXTENSION_DROP_H
#define SG_EXTENSION_DROP_H

#include "tcop/utility.h"

/* the arguments of one ProcessUtility call */
typedef struct SgUtilityCall
{
	PlannedStmt *pstmt;
	const char *queryString;
	bool		readOnlyTree;
	ProcessUtilityContext context;
	ParamListInfo params;
	QueryEnvironment *queryEnv;
	DestReceiver *dest;
	QueryCompletion *qc;
} SgUtilityCall;

/* DROP EXTENSION naming streamguard */
extern bool ExtensionDropIsOurs(Node *parsetree);

/* run the statement through next (the hook chain) with bounded waits, retried */
extern void ExtensionDropRetrying(ProcessUtility_hook_type next, SgUtilityCall *call);

#endif							/* SG_EXTENSION_DROP_H */
