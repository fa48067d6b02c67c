/*-------------------------------------------------------------------------
 *
 * ownership.c
 *		Streams, pipelines and captures as owned objects: DROP ROLE,
 *		REASSIGN OWNED, DROP OWNED, and the per-role quotas on what a role
 *		may create.  The same utility hook hands TRUNCATE of a partition
 *		and the renaming of a trigger to capture_ddl.c (a capture refuses
 *		both), and DROP EXTENSION streamguard to extension_drop.c.
 *
 * Streams, pipelines and captures are rows of our catalog tables, not
 * PostgreSQL objects, so PostgreSQL's own dependency machinery
 * (pg_shdepend) does not know them.  A utility hook gives them the
 * behaviour of PostgreSQL's objects in the database where the command
 * runs:
 *	- DROP ROLE of a role that owns a stream, a pipeline or a capture here
 *	  is refused (2BP01) with a detail listing them; grants to a dropped
 *	  role are removed, so a later role that happens to get the same OID
 *	  inherits nothing;
 *	- REASSIGN OWNED BY a TO b gives a's streams, pipelines and captures
 *	  to b (the pipelines restart under the new owner);
 *	- DROP OWNED BY a drops a's pipelines, captures and streams and its
 *	  grants.
 * As with PostgreSQL's per-database objects, REASSIGN and DROP OWNED act
 * on the current database only.  DROP ROLE run from another database
 * cannot see our tables there; the maintenance worker then removes grants
 * to roles that no longer exist, and a pipeline whose owner is gone stops
 * with an error instead of running under a dead OID (worker.c).
 *
 * Locking: creating a stream or pipeline takes a self-conflicting lock on
 * the owning role (SgLockRoleForCreate), which DROP ROLE's AccessExclusive
 * lock conflicts with, and the DROP ROLE check takes that lock itself
 * before looking.  So a create and a drop of the same role are serialized,
 * and the quota counts of concurrent creates by one role cannot race.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "api/extension_drop.h"
#include "api/ownership.h"
#include "api/pipeline.h"
#include "api/streams.h"
#include "capture/capture.h"
#include "catalog/sg_catalog.h"
#include "shmem/horizon.h"
#include "shmem/launcher_mailbox.h"

/* SQL-callable functions of pipeline.c and catalog.c that DROP OWNED uses */

static ProcessUtility_hook_type prev_process_utility = NULL;

/* ------------------------------------------------------------- the hook */

static bool
sg_installed_here(void)
{
	return IsTransactionState() && OidIsValid(get_extension_oid("streamguard", true));
}

static Datum
sg_oid_array(List *oids)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(oids), 1));
	ListCell   *lc;
	int			n = 0;

	foreach(lc, oids)
		elems[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return PointerGetDatum(construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

/* bump the metadata generation of every stream whose id the SPI result holds */
static void
sg_bump_result_streams(void)
{
	uint64		i;
	bool		isnull;

	for (i = 0; i < SPI_processed; i++)
		HorizonBumpGenerationAtCommit(DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
																  SPI_tuptable->tupdesc, 1, &isnull)));
}

/*
 * DROP ROLE: refuse while a role owns streams or pipelines here.
 */
static void
sg_check_drop_roles(List *oids)
{
	ListCell   *lc;
	SgUserSave	save;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	foreach(lc, oids)
	{
		Oid			roleid = lfirst_oid(lc);
		Oid			types[1] = {OIDOID};
		Datum		values[1] = {ObjectIdGetDatum(roleid)};
		StringInfoData detail;
		uint64		i;
		uint64		n;

		/* what DropRole takes anyway; we need it before we look */
		LockSharedObject(AuthIdRelationId, roleid, 0, AccessExclusiveLock);
		SgBecomeDataOwner(&save, true);
		if (SPI_execute_with_args(psprintf("SELECT 'stream ' OPERATOR(pg_catalog.||) name FROM streamguard.stream "
										   "WHERE owner OPERATOR(pg_catalog.=) $1 "
										   "UNION ALL SELECT 'pipeline ' OPERATOR(pg_catalog.||) name "
										   "FROM streamguard.pipeline WHERE owner OPERATOR(pg_catalog.=) $1 "
										   "UNION ALL %s ORDER BY 1", CaptureOwnedSql),
								  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "ownership lookup failed");
		SgRestoreUser(&save);
		n = SPI_processed;
		if (n == 0)
			continue;
		initStringInfo(&detail);
		for (i = 0; i < n && i < 100; i++)
			appendStringInfo(&detail, "%sowner of %s", i ? "\n" : "",
							 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		if (n > 100)
			appendStringInfo(&detail, "\nand %llu other objects", (unsigned long long) (n - 100));
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("role \"%s\" cannot be dropped because some objects depend on it",
						GetUserNameFromId(roleid, false)),
				 errdetail_internal("%s", detail.data),
				 errhint("Drop them, or move them with REASSIGN OWNED, in database \"%s\".",
						 get_database_name(MyDatabaseId))));
	}
	SPI_finish();
}

/* grants to these roles go (after DROP ROLE, or with DROP OWNED) */
static void
sg_remove_grants(List *oids)
{
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1];
	SgUserSave	save;

	values[0] = sg_oid_array(oids);
	SgEnterCatalog(&save);
	if (SPI_execute_with_args("DELETE FROM streamguard.stream_grant "
							  "WHERE grantee OPERATOR(pg_catalog.=) ANY ($1) RETURNING stream_id",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "grant cleanup failed");
	sg_bump_result_streams();
	SgLeaveCatalog(&save);
}

static void
sg_reassign_owned(List *oids, Oid newrole)
{
	Oid			types[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2];
	SgUserSave	save;

	values[0] = sg_oid_array(oids);
	values[1] = ObjectIdGetDatum(newrole);
	SgEnterCatalog(&save);
	if (SPI_execute_with_args("UPDATE streamguard.stream SET owner = $2 "
							  "WHERE owner OPERATOR(pg_catalog.=) ANY ($1) RETURNING id",
							  2, types, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "stream reassignment failed");
	sg_bump_result_streams();
	/* a new epoch: the running worker steps aside, a new one runs as newrole */
	if (SPI_execute_with_args("UPDATE streamguard.pipeline SET owner = $2, "
							  "epoch = epoch OPERATOR(pg_catalog.+) 1, "
							  "generation = generation OPERATOR(pg_catalog.+) 1 "
							  "WHERE owner OPERATOR(pg_catalog.=) ANY ($1)",
							  2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "pipeline reassignment failed");
	/* a capture's owner is the role it appends as (capture_emit.c) */
	if (SPI_execute_with_args("UPDATE streamguard.capture SET owner = $2 "
							  "WHERE owner OPERATOR(pg_catalog.=) ANY ($1) RETURNING relid::pg_catalog.oid",
							  2, types, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "capture reassignment failed");
	{
		uint64		i;
		bool		isnull;

		for (i = 0; i < SPI_processed; i++)
			CaptureInvalidate(DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 1, &isnull)));
	}
	SgLeaveCatalog(&save);
	LauncherWake();
}

static List *
sg_owned_names(const char *sql, List *oids)
{
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1];
	SgUserSave	save;
	List	   *names = NIL;
	uint64		i;
	MemoryContext caller_cxt = CurrentMemoryContext;

	values[0] = sg_oid_array(oids);
	SgEnterCatalog(&save);
	if (SPI_execute_with_args(sql, 1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ownership lookup failed");
	SgRestoreUser(&save);
	for (i = 0; i < SPI_processed; i++)
	{
		MemoryContext spi_cxt = MemoryContextSwitchTo(caller_cxt);

		/* outlives SPI_finish */
		names = lappend(names, pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1)));
		MemoryContextSwitchTo(spi_cxt);
	}
	SPI_finish();
	return names;
}

/*
 * DROP OWNED: the roles' pipelines, then their captures, then their
 * streams (forced: consumers, other roles' pipelines and captures on them
 * go too, as DROP OWNED drops dependent objects), then grants to them.
 * Through the SQL functions, so the same checks and the same cleanup
 * apply.
 */
static void
sg_drop_owned(List *oids)
{
	List	   *names;
	ListCell   *lc;

	names = sg_owned_names("SELECT name FROM streamguard.pipeline "
						   "WHERE owner OPERATOR(pg_catalog.=) ANY ($1) ORDER BY name", oids);
	foreach(lc, names)
		DirectFunctionCall1(sg_drop_pipeline, CStringGetTextDatum(lfirst(lc)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CaptureDropOwned(sg_oid_array(oids));
	SPI_finish();
	names = sg_owned_names("SELECT name FROM streamguard.stream "
						   "WHERE owner OPERATOR(pg_catalog.=) ANY ($1) ORDER BY name", oids);
	foreach(lc, names)
		DirectFunctionCall2(sg_drop_stream, CStringGetTextDatum(lfirst(lc)), BoolGetDatum(true));
	sg_remove_grants(oids);
}

static List *
sg_role_oids(List *rolespecs)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, rolespecs)
	{
		Oid			roleid = get_rolespec_oid(lfirst(lc), true);

		if (OidIsValid(roleid))
			oids = lappend_oid(oids, roleid);
	}
	return oids;
}

static void
sg_next_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				ProcessUtilityContext context, ParamListInfo params,
				QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

static void
sg_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	List	   *oids = NIL;
	Oid			newrole = InvalidOid;
	NodeTag		tag = nodeTag(parsetree);
	bool		ours = false;

	if (tag == T_TruncateStmt && sg_installed_here())
		CaptureCheckTruncate(((TruncateStmt *) parsetree)->relations);
	if (tag == T_RenameStmt && ((RenameStmt *) parsetree)->renameType == OBJECT_TRIGGER &&
		sg_installed_here())
		CaptureCheckRename((RenameStmt *) parsetree);
	if ((tag == T_DropRoleStmt || tag == T_ReassignOwnedStmt || tag == T_DropOwnedStmt) &&
		sg_installed_here())
	{
		ours = true;
		switch (tag)
		{
			case T_DropRoleStmt:
				oids = sg_role_oids(((DropRoleStmt *) parsetree)->roles);
				/* a caller who may not drop roles gets PostgreSQL's error */
				if (has_createrole_privilege(GetUserId()))
					sg_check_drop_roles(oids);
				break;
			case T_ReassignOwnedStmt:
				oids = sg_role_oids(((ReassignOwnedStmt *) parsetree)->roles);
				newrole = get_rolespec_oid(((ReassignOwnedStmt *) parsetree)->newrole, true);
				break;
			case T_DropOwnedStmt:
				oids = sg_role_oids(((DropOwnedStmt *) parsetree)->roles);
				break;
			default:
				break;
		}
	}

	/* PostgreSQL checks the caller's rights over the roles first */
	if (ExtensionDropIsOurs(parsetree) && sg_installed_here())
	{
		SgUtilityCall call = {pstmt, queryString, readOnlyTree, context, params,
		queryEnv, dest, qc};

		ExtensionDropRetrying(prev_process_utility ? prev_process_utility :
							  standard_ProcessUtility, &call);
	}
	else
		sg_next_utility(pstmt, queryString, readOnlyTree, context, params,
						queryEnv, dest, qc);

	if (!ours || oids == NIL)
		return;
	switch (tag)
	{
		case T_DropRoleStmt:
			sg_remove_grants(oids);
			break;
		case T_ReassignOwnedStmt:
			if (OidIsValid(newrole))
				sg_reassign_owned(oids, newrole);
			break;
		case T_DropOwnedStmt:
			sg_drop_owned(oids);
			break;
		default:
			break;
	}
}

void
OwnershipInstallHooks(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sg_process_utility;
}
