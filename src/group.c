/*-------------------------------------------------------------------------
 *
 * group.c
 *		Consumer groups: poll(..., member => m) shares a consumer's
 *		partitions among the sessions polling it as named members, with a
 *		lease, a sticky balanced assignment, and a fence on the partitions
 *		a member reads.  leave_group() and the consumer_group_members view.
 *
 * Membership lives in shared memory: an entry per (database, stream,
 * consumer, member) with the pid of the backend that last polled as the
 * member and the end of its lease.  Each poll renews the lease at once,
 * outside the caller's transaction, so a member's liveness does not wait
 * for its commit; a long-polling member renews it at every wake-up (it
 * sleeps at most a third of its lease at a time).  A member is live while
 * its lease runs; a backend that exits (pg_terminate_backend, a client
 * that disconnects) drops its entries at once, and a crash restart
 * empties the table.  One LWLock protects the array; no catalog access
 * happens while it is held.
 *
 * The assignment is a catalog table, streamguard.group_assignment: a row
 * per (stream, consumer, partition) naming the member that reads it, or
 * NULL.  It is transactional on purpose, because it is the fence:
 *
 *	- a member's poll reads a partition only after locking its assignment
 *	  row FOR SHARE with member = itself (SKIP LOCKED: a row being moved is
 *	  skipped), before it locks the position row;
 *	- a partition changes owner only by an UPDATE that first locks the row
 *	  FOR UPDATE SKIP LOCKED, so it never moves while the old owner holds
 *	  it in an open transaction: the move waits for that transaction to
 *	  end (cooperative: revoke, then assign, in one atomic row update).
 *
 * So every position a member commits is for a partition assigned to it at
 * commit time, even when its lease ran out while its transaction was open.
 * Exactly-once itself still rests on the position rows (consumer.c): the
 * position is read and moved under its row lock in the caller's
 * transaction, whoever the caller is.
 *
 * Rebalancing is pull-based and runs in each member's poll: the member
 * computes its target share of the partitions among the live members
 * (floor or ceil of partitions / members, the ceilings going to the
 * members that hold most now, ties by name) and, if below it, takes the
 * missing partitions — first those of no live member (left, expired, new
 * after a partition count increase), then the excess of members above
 * their target.  A member never gives partitions away itself (it could
 * hold them in its own transaction); whoever is below target takes them.
 * A member above target keeps everything it has until then: sticky.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "streamguard.h"

PG_FUNCTION_INFO_V1(sg_leave_group);
PG_FUNCTION_INFO_V1(sg_group_members);

/* views.c: the read-privilege predicate of the views */
extern Datum sg_can_read(PG_FUNCTION_ARGS);

#define SG_LOCKTAG_GROUP 0x5348 /* advisory lock space: assignment creation */

int			sg_group_lease_ms = 10000;
int			sg_max_group_members = 1024;

typedef struct SgGroupMember
{
	Oid			dbid;			/* InvalidOid: free */
	Oid			catalog_oid;	/* the extension's incarnation */
	int32		stream_id;
	int			pid;			/* backend of the last poll */
	TimestampTz joined_at;
	TimestampTz last_poll_at;
	TimestampTz lease_until;
	char		consumer[SG_MAX_NAME_LEN + 1];
	char		member[SG_MAX_MEMBER_LEN + 1];
} SgGroupMember;

typedef struct SgGroupShared
{
	LWLock	   *lock;
	int			nused;			/* entries in use (0: no group anywhere) */
	SgGroupMember members[FLEXIBLE_ARRAY_MEMBER];
} SgGroupShared;

static SgGroupShared *sg_groups = NULL;
static bool sg_exit_registered = false;
static bool sg_xact_registered = false;
static List *sg_wake_at_commit = NIL;	/* stream ids (int) */

Size
GroupShmemSize(void)
{
	return add_size(offsetof(SgGroupShared, members),
					mul_size(sg_max_group_members, sizeof(SgGroupMember)));
}

void
GroupShmemRequest(void)
{
	RequestAddinShmemSpace(GroupShmemSize());
	RequestNamedLWLockTranche("streamguard groups", 1);
}

void
GroupShmemInit(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sg_groups = ShmemInitStruct("streamguard groups", GroupShmemSize(), &found);
	if (!found)
	{
		memset(sg_groups, 0, GroupShmemSize());
		sg_groups->lock = &(GetNamedLWLockTranche("streamguard groups"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

static bool
sg_entry_is(SgGroupMember *e, Oid catalog_oid, int32 stream_id, const char *consumer)
{
	return e->dbid == MyDatabaseId && e->catalog_oid == catalog_oid &&
		e->stream_id == stream_id && strcmp(e->consumer, consumer) == 0;
}

static void
sg_free_entry_locked(SgGroupMember *e)
{
	Assert(LWLockHeldByMeInMode(sg_groups->lock, LW_EXCLUSIVE));
	e->dbid = InvalidOid;
	sg_groups->nused--;
}

/* wake the long-polling readers of a stream (its members among them) */
static void
sg_wake_stream(Oid dbid, int32 stream_id)
{
	int			slot = HorizonFindSlot(dbid, stream_id);

	if (slot >= 0)
		ConditionVariableBroadcast(&HorizonStream(slot)->readable);
}

/* a backend that exits leaves its groups at once */
static void
sg_group_exit(int code, Datum arg)
{
	int			i;
	int			nwake = 0;
	int32		wake[16];

	if (sg_groups == NULL)
		return;
	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid != InvalidOid && e->pid == MyProcPid)
		{
			if (nwake < lengthof(wake))
				wake[nwake++] = e->stream_id;
			sg_free_entry_locked(e);
		}
	}
	LWLockRelease(sg_groups->lock);
	for (i = 0; i < nwake; i++)
		sg_wake_stream(MyDatabaseId, wake[i]);
}

static void
sg_group_xact(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT)
		foreach(lc, sg_wake_at_commit)
			sg_wake_stream(MyDatabaseId, lfirst_int(lc));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
		sg_wake_at_commit = NIL;	/* the list lived in TopTransactionContext */
}

/* wake the stream's waiting members when this transaction commits */
static void
sg_wake_members_at_commit(int32 stream_id)
{
	MemoryContext old;

	if (!sg_xact_registered)
	{
		RegisterXactCallback(sg_group_xact, NULL);
		sg_xact_registered = true;
	}
	if (list_member_int(sg_wake_at_commit, stream_id))
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	sg_wake_at_commit = lappend_int(sg_wake_at_commit, stream_id);
	MemoryContextSwitchTo(old);
}

/* NULL or empty: error; too long: error */
void
GroupCheckMember(const char *member)
{
	size_t		len = strlen(member);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("member name must not be empty")));
	if (len > SG_MAX_MEMBER_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("member name is too long"),
				 errdetail("The name is %zu bytes; the limit is %d.", len, SG_MAX_MEMBER_LEN)));
}

static Oid
sg_catalog_oid(SgStreamMeta *meta)
{
	return HorizonStream(meta->ref.slot)->catalog_oid;
}

/*
 * Renew a member's lease (joining if it is not a member), at once.
 */
static void
sg_heartbeat(SgStreamMeta *meta, const char *consumer, const char *member)
{
	Oid			catalog_oid = sg_catalog_oid(meta);
	TimestampTz now = GetCurrentTimestamp();
	SgGroupMember *found = NULL,
			   *free_entry = NULL;
	int			i;

	if (!sg_exit_registered)
	{
		before_shmem_exit(sg_group_exit, (Datum) 0);
		sg_exit_registered = true;
	}
	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid == InvalidOid)
		{
			if (free_entry == NULL)
				free_entry = e;
			continue;
		}
		if (sg_entry_is(e, catalog_oid, meta->stream_id, consumer) &&
			strcmp(e->member, member) == 0)
		{
			found = e;
			break;
		}
	}
	if (found == NULL)
	{
		if (free_entry == NULL)
		{
			LWLockRelease(sg_groups->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many consumer group members"),
					 errdetail("All %d member entries are in use.", sg_max_group_members),
					 errhint("Raise streamguard.max_group_members, or have idle members call leave_group.")));
		}
		found = free_entry;
		memset(found, 0, sizeof(*found));
		found->dbid = MyDatabaseId;
		found->catalog_oid = catalog_oid;
		found->stream_id = meta->stream_id;
		strlcpy(found->consumer, consumer, sizeof(found->consumer));
		strlcpy(found->member, member, sizeof(found->member));
		found->joined_at = now;
		sg_groups->nused++;
	}
	found->pid = MyProcPid;
	found->last_poll_at = now;
	found->lease_until = now + (TimestampTz) sg_group_lease_ms * 1000;
	LWLockRelease(sg_groups->lock);
}

/*
 * The live members of a group, sorted by name; entries whose lease ran
 * out are dropped on the way.  Returns how many; *names is palloc'd.
 */
static int
sg_live_members(SgStreamMeta *meta, const char *consumer, char ***names)
{
	Oid			catalog_oid = sg_catalog_oid(meta);
	TimestampTz now = GetCurrentTimestamp();
	char	  **out = palloc(sizeof(char *) * sg_max_group_members);
	int			n = 0;
	int			i,
				j;

	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid == InvalidOid || !sg_entry_is(e, catalog_oid, meta->stream_id, consumer))
			continue;
		if (e->lease_until < now)
		{
			sg_free_entry_locked(e);
			continue;
		}
		out[n++] = pstrdup(e->member);
	}
	LWLockRelease(sg_groups->lock);
	/* insertion sort: groups are small */
	for (i = 1; i < n; i++)
	{
		char	   *x = out[i];

		for (j = i; j > 0 && strcmp(out[j - 1], x) > 0; j--)
			out[j] = out[j - 1];
		out[j] = x;
	}
	*names = out;
	return n;
}

/*
 * A poll without a member name on a consumer that has live members would
 * read partitions assigned to them: refused.  Free when no group exists.
 */
void
GroupCheckNotGroup(SgStreamMeta *meta, const char *consumer)
{
	Oid			catalog_oid;
	TimestampTz now;
	int			live = 0;
	int			i;

	if (sg_groups == NULL || sg_groups->nused == 0)
		return;
	catalog_oid = sg_catalog_oid(meta);
	now = GetCurrentTimestamp();
	LWLockAcquire(sg_groups->lock, LW_SHARED);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid != InvalidOid && sg_entry_is(e, catalog_oid, meta->stream_id, consumer) &&
			e->lease_until >= now)
			live++;
	}
	LWLockRelease(sg_groups->lock);
	if (live > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("consumer \"%s\" of stream \"%s\" is a consumer group", consumer, meta->name),
				 errdetail("%d member(s) poll it with a member name.", live),
				 errhint("Poll with member => a name of your own, or wait until the members leave (leave_group) or their leases expire.")));
}

/* ------------------------------------------------------------ assignment */

typedef struct SgAssignment
{
	int			nparts;
	char	  **owner;			/* per partition: member name, or NULL */
	bool		complete;		/* a row for every partition */
} SgAssignment;

/* read the assignment rows (fresh snapshot: committed, and our own) */
static void
sg_read_assignment(SgStreamMeta *meta, const char *consumer, SgAssignment *a)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	Snapshot	snap;
	int			ret;
	int			rows = 0;
	uint64		i;

	a->nparts = meta->nparts;
	a->owner = palloc0(sizeof(char *) * meta->nparts);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	snap = SgFreshSnapshot();
	ret = SPI_execute_snapshot(SgPlanCached(NULL,
											"SELECT partition, member FROM streamguard.group_assignment "
											"WHERE stream_id OPERATOR(pg_catalog.=) $1 "
											"AND consumer OPERATOR(pg_catalog.=) $2",
											2, types),
							   values, NULL, snap, InvalidSnapshot, true, false, 0);
	UnregisterSnapshot(snap);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "group assignment lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (p < 0 || p >= meta->nparts)
			continue;
		rows++;
		a->owner[p] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	SPI_freetuptable(SPI_tuptable);
	a->complete = (rows == meta->nparts);
}

/*
 * Create the missing assignment rows (unassigned): on a group's first
 * poll, and after the stream gained partitions.  Returns false if another
 * transaction is creating them right now.
 */
static bool
sg_create_assignment(SgStreamMeta *meta, const char *consumer)
{
	Oid			types[3] = {INT4OID, TEXTOID, INT4OID};
	Datum		values[3];
	LOCKTAG		tag;
	int			ret;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) meta->stream_id,
						 hash_bytes((const unsigned char *) consumer, strlen(consumer)),
						 SG_LOCKTAG_GROUP);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(meta->nparts);
	ret = SPI_execute_plan(SgPlanCached(NULL,
										"INSERT INTO streamguard.group_assignment (stream_id, consumer, partition) "
										"SELECT $1, $2, p FROM pg_catalog.generate_series(0, $3 OPERATOR(pg_catalog.-) 1) p "
										"ON CONFLICT DO NOTHING",
										3, types),
						   values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "group assignment creation failed: %s", SPI_result_code_string(ret));
	return true;
}

/*
 * Move partition p from `from` (NULL: unassigned) to `to`, unless a
 * transaction holds its row (the old owner reading it): then it stays,
 * and a later poll tries again.  Returns whether it moved.
 */
static bool
sg_move_partition(SgStreamMeta *meta, const char *consumer, int p, const char *from, const char *to)
{
	Oid			types[5] = {INT4OID, TEXTOID, INT4OID, TEXTOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			ret;

	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(p);
	values[3] = CStringGetTextDatum(to);
	if (from)
		values[4] = CStringGetTextDatum(from);
	else
		nulls[4] = 'n';
	ret = SPI_execute_plan(SgPlanCached(NULL,
										"UPDATE streamguard.group_assignment a SET member = $4, "
										"generation = a.generation OPERATOR(pg_catalog.+) 1, assigned_at = pg_catalog.now() "
										"FROM (SELECT partition FROM streamguard.group_assignment "
										"      WHERE stream_id OPERATOR(pg_catalog.=) $1 AND consumer OPERATOR(pg_catalog.=) $2 "
										"      AND partition OPERATOR(pg_catalog.=) $3 AND member IS NOT DISTINCT FROM $5 "
										"      FOR UPDATE SKIP LOCKED) l "
										"WHERE a.stream_id OPERATOR(pg_catalog.=) $1 AND a.consumer OPERATOR(pg_catalog.=) $2 "
										"AND a.partition OPERATOR(pg_catalog.=) l.partition",
										5, types),
						   values, nulls, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "group assignment update failed: %s", SPI_result_code_string(ret));
	return SPI_processed == 1;
}

typedef struct SgMemberCount
{
	const char *name;
	int			count;
	int			target;
} SgMemberCount;

static int
sg_member_index(SgMemberCount *mc, int n, const char *name)
{
	int			i;

	if (name == NULL)
		return -1;
	for (i = 0; i < n; i++)
		if (strcmp(mc[i].name, name) == 0)
			return i;
	return -1;
}

/*
 * Pull this member's share of the partitions (see the banner).  a->owner
 * is updated with what moved.
 */
static void
sg_rebalance(SgStreamMeta *meta, const char *consumer, const char *me, SgAssignment *a,
			 char **live, int nlive)
{
	SgMemberCount *mc = palloc0(sizeof(SgMemberCount) * nlive);
	int		   *order = palloc(sizeof(int) * nlive);
	int			q,
				r,
				i,
				j,
				self,
				want;

	self = -1;
	for (i = 0; i < nlive; i++)
	{
		mc[i].name = live[i];
		if (strcmp(live[i], me) == 0)
			self = i;
	}
	if (self < 0)
		return;					/* our lease ran out between the calls */
	for (i = 0; i < a->nparts; i++)
	{
		j = sg_member_index(mc, nlive, a->owner[i]);
		if (j >= 0)
			mc[j].count++;
	}

	/* targets: the r members holding most get the ceiling (ties: by name) */
	q = a->nparts / nlive;
	r = a->nparts % nlive;
	for (i = 0; i < nlive; i++)
		order[i] = i;
	for (i = 1; i < nlive; i++)
	{
		int			x = order[i];

		for (j = i; j > 0 && mc[order[j - 1]].count < mc[x].count; j--)
			order[j] = order[j - 1];
		order[j] = x;
	}
	for (i = 0; i < nlive; i++)
		mc[order[i]].target = q + (i < r ? 1 : 0);

	want = mc[self].target - mc[self].count;
	if (want <= 0)
		return;

	/* first what no live member holds */
	for (i = 0; i < a->nparts && want > 0; i++)
	{
		if (sg_member_index(mc, nlive, a->owner[i]) >= 0)
			continue;
		if (sg_move_partition(meta, consumer, i, a->owner[i], me))
		{
			a->owner[i] = pstrdup(me);
			want--;
		}
	}
	/* then the excess of members above target, their highest partitions */
	for (i = a->nparts - 1; i >= 0 && want > 0; i--)
	{
		j = sg_member_index(mc, nlive, a->owner[i]);
		if (j < 0 || j == self || mc[j].count <= mc[j].target)
			continue;
		if (sg_move_partition(meta, consumer, i, a->owner[i], me))
		{
			a->owner[i] = pstrdup(me);
			mc[j].count--;
			want--;
		}
	}
}

/*
 * Before a member's fetch: renew its lease, make sure every partition has
 * an assignment row, take its share, and note the partitions assigned to
 * it (claim->assigned).  Runs as the data owner, SPI connected.
 */
void
GroupPrepareFetch(SgStreamMeta *meta, const char *consumer, const char *member,
				  SgGroupClaim *claim)
{
	SgAssignment a;
	char	  **live;
	int			nlive;
	int			p;

	sg_heartbeat(meta, consumer, member);
	claim->stream_id = meta->stream_id;
	claim->consumer = consumer;
	claim->member = member;
	claim->nparts = meta->nparts;
	claim->assigned = palloc0(sizeof(bool) * meta->nparts);

	sg_read_assignment(meta, consumer, &a);
	if (!a.complete)
	{
		if (!sg_create_assignment(meta, consumer))
			return;				/* being created: nothing assigned this time */
		sg_read_assignment(meta, consumer, &a);
	}
	nlive = sg_live_members(meta, consumer, &live);
	sg_rebalance(meta, consumer, member, &a, live, nlive);
	for (p = 0; p < a.nparts; p++)
		claim->assigned[p] = (a.owner[p] != NULL && strcmp(a.owner[p], member) == 0);
}

/*
 * The fence, called by the fetch for each partition with something to
 * read, before it locks the position row: lock the assignment row FOR
 * SHARE if it still names this member.  The lock lasts until the
 * caller's transaction ends, and no move (FOR UPDATE) can happen until
 * then.  A row being moved right now is skipped.
 */
bool
GroupClaimPartition(void *arg, int partition)
{
	SgGroupClaim *claim = (SgGroupClaim *) arg;
	Oid			types[4] = {INT4OID, TEXTOID, INT4OID, TEXTOID};
	Datum		values[4];
	int			ret;
	bool		locked;

	if (partition < 0 || partition >= claim->nparts || !claim->assigned[partition])
		return false;
	values[0] = Int32GetDatum(claim->stream_id);
	values[1] = CStringGetTextDatum(claim->consumer);
	values[2] = Int32GetDatum(partition);
	values[3] = CStringGetTextDatum(claim->member);
	ret = SPI_execute_plan(SgPlanCached(NULL,
										"SELECT 1 FROM streamguard.group_assignment "
										"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND consumer OPERATOR(pg_catalog.=) $2 "
										"AND partition OPERATOR(pg_catalog.=) $3 AND member OPERATOR(pg_catalog.=) $4 "
										"FOR SHARE SKIP LOCKED",
										4, types),
						   values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "group assignment lock failed: %s", SPI_result_code_string(ret));
	locked = (SPI_processed == 1);
	SPI_freetuptable(SPI_tuptable);
	pfree(DatumGetPointer(values[1]));
	pfree(DatumGetPointer(values[3]));
	return locked;
}

/* how long a long-polling member may sleep before renewing its lease */
long
GroupHeartbeatMs(void)
{
	return Max(sg_group_lease_ms / 3, 1);
}

/*
 * drop_consumer: the group's assignment and members go with the
 * consumer.  Runs as the data owner, SPI connected.
 */
void
GroupForget(SgStreamMeta *meta, const char *consumer)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	Oid			catalog_oid;
	int			ret;
	int			i;

	/* a 0.1 schema the 0.2 library serves until ALTER EXTENSION ... UPDATE */
	if (!OidIsValid(get_relname_relid("group_assignment", get_namespace_oid("streamguard", false))))
		return;
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	ret = SPI_execute_with_args("DELETE FROM streamguard.group_assignment "
								"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND consumer OPERATOR(pg_catalog.=) $2",
								2, types, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "group assignment delete failed: %s", SPI_result_code_string(ret));
	if (sg_groups == NULL || sg_groups->nused == 0 || meta->ref.slot < 0)
		return;
	catalog_oid = sg_catalog_oid(meta);
	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid != InvalidOid && sg_entry_is(e, catalog_oid, meta->stream_id, consumer))
			sg_free_entry_locked(e);
	}
	LWLockRelease(sg_groups->lock);
}

/*
 * leave_group(stream, consumer, member) -> boolean
 *
 * The member leaves now; the partitions it does not hold in an open
 * transaction are unassigned, in the caller's transaction, and the
 * remaining members are woken when it commits to take them.  Partitions
 * the member still reads in another open transaction move when that
 * transaction ends.  Returns false if the member was unknown (never
 * joined, already left, or expired with nothing assigned).
 */
Datum
sg_leave_group(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	char	   *member;
	SgStreamMeta *meta;
	SgUserSave	save;
	Oid			catalog_oid;
	bool		known = false;
	Oid			types[3] = {INT4OID, TEXTOID, TEXTOID};
	Datum		values[3];
	int			ret;
	int			i;

	SgConsumerArgs(fcinfo, "leave_group", &name, &consumer);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("member must not be NULL")));
	member = text_to_cstring(PG_GETARG_TEXT_PP(2));
	GroupCheckMember(member);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	catalog_oid = sg_catalog_oid(meta);

	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid != InvalidOid && sg_entry_is(e, catalog_oid, meta->stream_id, consumer) &&
			strcmp(e->member, member) == 0)
		{
			sg_free_entry_locked(e);
			known = true;
		}
	}
	LWLockRelease(sg_groups->lock);

	SgBecomeDataOwner(&save, false);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = CStringGetTextDatum(member);
	ret = SPI_execute_with_args("UPDATE streamguard.group_assignment a SET member = NULL, "
								"generation = a.generation OPERATOR(pg_catalog.+) 1, assigned_at = pg_catalog.now() "
								"FROM (SELECT partition FROM streamguard.group_assignment "
								"      WHERE stream_id OPERATOR(pg_catalog.=) $1 AND consumer OPERATOR(pg_catalog.=) $2 "
								"      AND member OPERATOR(pg_catalog.=) $3 FOR UPDATE SKIP LOCKED) l "
								"WHERE a.stream_id OPERATOR(pg_catalog.=) $1 AND a.consumer OPERATOR(pg_catalog.=) $2 "
								"AND a.partition OPERATOR(pg_catalog.=) l.partition",
								3, types, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "group assignment update failed: %s", SPI_result_code_string(ret));
	if (SPI_processed > 0)
		known = true;
	SgRestoreUser(&save);
	SPI_finish();

	/* the others take the partitions when this commits */
	sg_wake_members_at_commit(meta->stream_id);
	PG_RETURN_BOOL(known);
}

/*
 * _group_members() -> the members of this database's groups on streams
 * the caller may read: the view consumer_group_members.
 */
Datum
sg_group_members(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgGroupMember *copy;
	Oid			catalog_oid;
	int			n = 0;
	int			i;

	StreamguardCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	copy = palloc(sizeof(SgGroupMember) * sg_max_group_members);
	catalog_oid = StreamCatalogOid();
	LWLockAcquire(sg_groups->lock, LW_SHARED);
	for (i = 0; i < sg_max_group_members; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid == MyDatabaseId && e->catalog_oid == catalog_oid)
			copy[n++] = *e;
	}
	LWLockRelease(sg_groups->lock);

	for (i = 0; i < n; i++)
	{
		Datum		values[7];
		bool		nulls[7] = {0};

		if (!DatumGetBool(DirectFunctionCall1(sg_can_read, Int32GetDatum(copy[i].stream_id))))
			continue;
		values[0] = Int32GetDatum(copy[i].stream_id);
		values[1] = CStringGetTextDatum(copy[i].consumer);
		values[2] = CStringGetTextDatum(copy[i].member);
		values[3] = Int32GetDatum(copy[i].pid);
		values[4] = TimestampTzGetDatum(copy[i].joined_at);
		values[5] = TimestampTzGetDatum(copy[i].last_poll_at);
		values[6] = TimestampTzGetDatum(copy[i].lease_until);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
