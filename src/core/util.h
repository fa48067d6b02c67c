/*-------------------------------------------------------------------------
 *
 * util.h
 *		Helpers every module uses (util.c): entry checks, name and argument
 *		checks, closed vocabularies, worker session hardening, dynamic
 *		workers, per-role and per-database quotas; and who this process is.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_UTIL_H
#define SG_UTIL_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "fmgr.h"

#include "core/bounds.h"
#include "core/compat.h"

#define SG_MAX_NAME_LEN			63
#define SG_DATA_SCHEMA			"streamguard_data"

/*
 * The SQL versions (pg_extension.extversion) this library serves: its own
 * and the one before it, which a database keeps from the restart onto a
 * new library until ALTER EXTENSION streamguard UPDATE.  Under any other
 * version no pipeline or backfill worker runs, and the maintenance worker
 * says why (SgCatalogVersionProblem).
 */
#define SG_LIBRARY_VERSION		"0.3"
#define SG_OLDEST_SQL_VERSION	"0.2"

/* set by _PG_init when loaded through shared_preload_libraries */
extern bool SgLoaded;

/* a worker loop's first steps: gone with the postmaster, stats reported (see util.c) */
extern void SgExitIfPostmasterDead(void);
extern void SgWorkerLoopTop(void);
/* after a failure, outside a transaction: is the extension still here? */
extern bool SgExtensionPresent(void);

/*
 * running.c: the pipeline this process runs (a pipeline worker; none
 * elsewhere): set by worker.c, asked by the checks below it (an append to
 * the pipeline's own source, catalog.c; drop_stream, streams.c; control
 * calls from inside a pipeline, pipeline.c).
 */
extern void SgRunningPipelineSet(int32 pipeline_id, int32 source_stream, bool allow_source_append);
extern bool SgRunningPipelineIs(int32 pipeline_id);
extern bool SgRunningSourceIs(int32 stream_id);
extern bool SgRunningForbidsAppendTo(int32 stream_id);

/* entry checks */
extern void StreamguardCheckLoaded(void);
extern void SgCheckPrimary(const char *function);
extern void SgCheckWritable(const char *function, const char *what);
extern char *SgCatalogVersionProblem(const char *extversion, const char *dbname, char **hint);
extern bool SgCatalogHas(const char *relname);
extern bool SgPipelineStatsCatalog(void);

/* names and arguments */
extern char *SgOneLine(const char *s);
extern void SgCheckName(const char *what, const char *name);
extern char *SgTextArg(FunctionCallInfo fcinfo, int argno, const char *what);
extern bool SgCalledAs01(FunctionCallInfo fcinfo, const char *function, int nargs_0_1, int nargs_0_2);
extern void SgTableStreamArgs(FunctionCallInfo fcinfo, const char *function, bool stream_required,
							  Oid *relid, char **stream);
extern void SgConsumerArgs(FunctionCallInfo fcinfo, const char *function, char **stream,
						   char **consumer);
extern void SgEventColumns(TupleDesc desc);

/*
 * A closed vocabulary (guarantee, error policy, ...): its words, parsed
 * once into a C enum by SgParseWord, named back by SgWordName.  The SQL
 * script declares the same words as an enum type where a table stores
 * them.
 */
typedef struct SgWordList
{
	const char *what;			/* "guarantee", in "invalid guarantee" */
	const char *plural;			/* "guarantees", in "Valid guarantees are" */
	const char *words[6];		/* NULL-terminated; index = enum value */
} SgWordList;

extern int	SgParseWord(const SgWordList *list, const char *word);
extern const char *SgWordName(const SgWordList *list, int value);
extern Datum SgWordParam(const char *typname, const char *word, Oid *type);

/* background workers */
extern void SgHardenWorkerSession(void);
extern void SgSetWorkerTitle(const char *title);
extern struct BackgroundWorkerHandle *SgStartDynamicWorker(const char *function, const char *type,
														   const char *name, Datum arg, Oid dbid);

/* quotas */
extern int	SgAddOid(Oid *set, int n, int max, Oid oid);
extern void SgLockRoleForCreate(Oid roleid);
extern void SgLockDatabaseForCreate(void);
extern int	SgDatabaseCap(int setting, int server_size);
extern void SgCheckDatabaseCap(const char *what, int64 have, int64 adding, int cap, const char *guc);
extern void SgCheckRoleQuota(const char *what, Oid roleid, int64 have, int64 adding, int limit,
							 const char *guc);

#endif							/* SG_UTIL_H */
