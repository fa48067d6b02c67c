/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Version shims: the one place where PostgreSQL major-version
 *		differences are papered over.
 *
 * streamguard builds on PostgreSQL 15 to 19 from one code base.  The code
 * is written against 15's spelling of the server API; anything spelled
 * differently in a later major gets a macro here (or a function in
 * compat.c), so that the rest of the code reads the same everywhere and
 * no other file tests PG_VERSION_NUM.  core/util.h includes this file,
 * so nearly every source file sees it; the others include it themselves.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_COMPAT_H
#define SG_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "access/twophase.h"
#include "catalog/pg_class.h"
#include "catalog/pg_foreign_server.h"
#include "common/jsonapi.h"
#include "nodes/nodes.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/regproc.h"
#include "utils/relcache.h"
#include "utils/wait_event.h"

/*
 * Headers that 15's headers pulled in indirectly and 16's no longer do
 * (16 trimmed the server's include graph).  Included here once, so that
 * code written on 15 keeps building.
 */
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"

#if PG_VERSION_NUM < 150000
#error "streamguard requires PostgreSQL 15 or later"
#endif

/*
 * 16 replaced the per-object-kind ownership and ACL checks by generic ones
 * taking the catalog's OID.
 */
#if PG_VERSION_NUM >= 160000
#define pg_class_ownercheck(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#define pg_foreign_server_aclcheck(srvid, roleid, mode) \
	object_aclcheck(ForeignServerRelationId, (srvid), (roleid), (mode))
#endif

/*
 * 16 added a soft-error context argument; NULL keeps 15's behaviour (a bad
 * name raises an error).  The macro names itself, which the preprocessor
 * does not expand again.
 */
#if PG_VERSION_NUM >= 160000
#define stringToQualifiedNameList(string) \
	stringToQualifiedNameList((string), NULL)
#endif

/*
 * 17 added "orstronger" to LockHeldByMe; false asks for the mode itself,
 * as 15's did.
 */
#if PG_VERSION_NUM >= 170000
#define LockHeldByMe(locktag, lockmode) \
	LockHeldByMe((locktag), (lockmode), false)
#endif

/*
 * 18 added "deferrable_ok"; before 18 a deferrable primary key was never
 * returned, which is what false asks for.
 */
#if PG_VERSION_NUM >= 180000
#define RelationGetPrimaryKeyIndex(relation) \
	RelationGetPrimaryKeyIndex((relation), false)
#endif

/*
 * 17 lets the caller pass a JsonLexContext to fill in; NULL allocates one,
 * as 15 always did.
 */
#if PG_VERSION_NUM >= 170000
#define makeJsonLexContextCstringLen(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(NULL, (json), (len), (encoding), (need_escapes))
#endif

/*
 * 18 added an instrumentation argument (NULL: none), 19 a ScanOptions
 * bitmask (SO_NONE: a plain scan).
 */
#if PG_VERSION_NUM >= 190000
#define index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys), SO_NONE)
#elif PG_VERSION_NUM >= 180000
#define index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#endif

/*
 * A function that does not return.  18 replaced the trailing
 * pg_attribute_noreturn() by the leading pg_noreturn; we write the latter.
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * A case of a switch that falls through to the next one.  19 builds with
 * -Wimplicit-fallthrough=5, which ignores comments and wants the
 * attribute; 19 spells it pg_fallthrough.
 */
#ifndef pg_fallthrough
#ifdef __has_attribute
#if __has_attribute(fallthrough)
#define pg_fallthrough __attribute__((fallthrough))
#endif
#endif
#endif
#ifndef pg_fallthrough
#define pg_fallthrough ((void) 0)
#endif

/*
 * Building a JsonbValue with pushJsonbValue: up to 18 the state is a
 * JsonbParseState pointer and each call returns the value built so far; 19
 * keeps the state in a JsonbInState whose "result" holds the finished value.
 * SgJsonbState st = SG_JSONB_STATE_INIT; sg_push_jsonb(&st, ...) returns
 * the finished value after the outermost container's closing token on every
 * major.
 */
#if PG_VERSION_NUM >= 190000
typedef JsonbInState SgJsonbState;
#define SG_JSONB_STATE_INIT {0}
static inline JsonbValue *
sg_push_jsonb(SgJsonbState *st, JsonbIteratorToken tok, JsonbValue *val)
{
	pushJsonbValue(st, tok, val);
	return st->result;
}
#else
typedef JsonbParseState *SgJsonbState;
#define SG_JSONB_STATE_INIT NULL
static inline JsonbValue *
sg_push_jsonb(SgJsonbState *st, JsonbIteratorToken tok, JsonbValue *val)
{
	return pushJsonbValue(st, tok, val);
}
#endif

/* 19 sizes a shared hash table by one number of entries, not two */
#if PG_VERSION_NUM >= 190000
#define ShmemInitHash(name, init_size, max_size, info, flags) \
	ShmemInitHash((name), (max_size), (info), (flags))
#endif

/*
 * 19 wants TupleDescFinalize() on a TupleDesc built entry by entry
 * (CreateTemplateTupleDesc + TupleDescInitEntry) before it is used; before
 * 19 there is nothing to do.
 */
#if PG_VERSION_NUM < 190000
#define TupleDescFinalize(tupdesc) ((void) (tupdesc))
#endif

/* 19 parses CLUSTER (and the new REPACK) into a RepackStmt */
#if PG_VERSION_NUM >= 190000
#define T_ClusterStmt T_RepackStmt
#endif

/* index of this backend's PGPROC; renamed MyProcNumber in 17 */
#if PG_VERSION_NUM >= 170000
#define SG_MY_PROC_INDEX	MyProcNumber
#else
#define SG_MY_PROC_INDEX	(MyProc->pgprocno)
#endif

/* total PGPROC slots (backends, auxiliary processes, prepared xacts) */
#define SG_TOTAL_PROCS		(MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts)

/*
 * A wait event of ours, for pg_stat_activity.  PostgreSQL 17 lets an
 * extension register named ones.  Before that there is only the class
 * PG_WAIT_EXTENSION: any value in it shows as wait_event_type 'Extension'
 * and wait_event 'Extension', so the distinct numbers (n > 0) only tell our
 * waits apart in a debugger or a core file.  On 17 and later an
 * unregistered number in that class would make pg_stat_activity fail, hence
 * the registration there.
 */
#if PG_VERSION_NUM >= 170000
#define SG_WAIT_EVENT(name, n)	WaitEventExtensionNew(name)
#else
#define SG_WAIT_EVENT(name, n)	(PG_WAIT_EXTENSION | (uint32) (n))
#endif

/*
 * Waits of ours with a name in pg_stat_activity on 17 and later (compat.c;
 * PG_WAIT_EXTENSION before).  The remote and Kafka waits use SG_WAIT_EVENT
 * above directly.
 */
typedef enum SgWaitEvent
{
	SG_WE_PIPELINE_IDLE,		/* a pipeline worker with nothing to do */
	SG_WE_PIPELINE_RETRY,		/* a pipeline worker backing off after an error */
	SG_WE_FAULT,				/* held by streamguard.inject_fault (tests) */
	SG_WE_MAINTENANCE,			/* the maintenance worker between rounds */
	SG_WE_LAUNCHER,				/* the launcher between rounds */
	SG_WE_POLL,					/* poll(wait => ...) for appends */
	SG_WE_BACKFILL,				/* a capture backfill throttled */
	SG_WE_DROP_RETRY,			/* DROP EXTENSION between two attempts */
	SG_WE_COUNT
} SgWaitEvent;

extern uint32 sg_wait_event(SgWaitEvent which);

/*
 * The module's magic block.  18 lets it carry the module's name and
 * version (pg_get_loaded_modules() shows them).
 */
#define SG_MODULE_NAME		"streamguard"
#define SG_MODULE_VERSION	"0.3"
#ifdef PG_MODULE_MAGIC_EXT
#define SG_MODULE_MAGIC \
	PG_MODULE_MAGIC_EXT(.name = SG_MODULE_NAME, .version = SG_MODULE_VERSION)
#else
#define SG_MODULE_MAGIC PG_MODULE_MAGIC
#endif

#endif							/* SG_COMPAT_H */
