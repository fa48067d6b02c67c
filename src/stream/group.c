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
 * that disconnects) drops its entries at once, an entry whose lease ran
 * out is free for anyone's next join, and a crash restart empties the
 * table.  The table is shared by the whole server, so a join is refused
 * when the joining role holds streamguard.role_max_group_members entries
 * (superusers are exempt) or the database streamguard.database_max_group_members,
 * and no lease is longer than streamguard.max_group_lease, which only a
 * superuser sets: no session can keep entries past that bound, nor take
 * every entry.
 *
 * LOCKS.  The struct (SgGroupShared, its SgGroupMember array) is private
 * to this file.  One LWLock ("streamguard groups") protects all of it, and
 * no catalog access happens while it is held:
 *	- every field of a member entry (dbid, catalog_oid, roleid, stream_id,
 *	  consumer, member, joined_at on a join; pid, last_poll_at, lease_until
 *	  on each poll; dbid cleared when the entry is freed) and hwm and nused
 *	  are written only with the lock held exclusively (sg_heartbeat,
 *	  sg_live_members and GroupForget, which free expired or forgotten
 *	  entries, leave_group, a backend's exit);
 *	- they are read with the lock held in either mode (GroupCheckNotGroup
 *	  and the view consumer_group_members take it shared), except nused,
 *	  which GroupCheckNotGroup and GroupForget read first without it: 0
 *	  means no group anywhere and lets a plain poll skip the lock; a join
 *	  racing with that read is no different from a join just after it (the
 *	  fence is the position rows, not this table).
 * Helpers that touch entries without taking the lock (sg_entry_is,
 * sg_free_entry_locked) assert it is held.
 *
 * Calls up: none.  GroupMembersSnapshot copies this database's members
 * out; the view consumer_group_members (api/views.c) filters the copy by
 * what the caller may see.
 *
 * The assignment is the member column of the consumer's position rows
 * (streamguard.consumer, a row per partition): the member that reads the
 * partition, or NULL.  It is transactional on purpose, because it is the
 * fence, and it shares the position's row lock:
 *
 *	- a member's poll locks a position row (FOR UPDATE SKIP LOCKED, as every
 *	  poll does) only if it names the member, rechecked on the row's latest
 *	  version, and holds it until its transaction ends (consumer.c);
 *	- a partition changes owner only by an UPDATE that first locks the row
 *	  FOR UPDATE SKIP LOCKED, so it never moves while the old owner holds
 *	  it in an open transaction: the move waits for that transaction to
 *	  end (cooperative: revoke, then assign, in one atomic row update).
 *
 * So every position a member commits is for a partition assigned to it at
 * commit time, even when its lease ran out while its transaction was open;
 * and a member's poll costs the statements of a plain poll: the member
 * column comes with the positions the fetch reads anyway.  Exactly-once
 * itself still rests on the position rows: the position is read and moved
 * under its row lock in the caller's transaction, whoever the caller is.
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
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "catalog/sg_catalog.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "stream/group.h"

PG_FUNCTION_INFO_V1(sg_leave_group);

int			sg_group_lease_ms = 10000;
int			sg_max_group_members = 1024;
int			sg_max_group_lease_ms = 60000;
int			sg_role_max_group_members = -1;
int			sg_database_max_group_members = -1;

typedef struct SgGroupMember
{
	Oid			dbid;			/* InvalidOid: free */
	Oid			catalog_oid;	/* the extension's incarnation */
	Oid			roleid;			/* the role that polled as the member */
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
	int			hwm;			/* entries at or above this were never used */
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
	Assert(LWLockHeldByMe(sg_groups->lock));
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
	for (i = 0; i < sg_groups->hwm; i++)
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
		HorizonWakeReaders(MyDatabaseId, wake[i]);
}

static void
sg_group_xact(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT)
		foreach(lc, sg_wake_at_commit)
			HorizonWakeReaders(MyDatabaseId, lfirst_int(lc));
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
	return HorizonCatalogOid(meta->ref.slot);
}

/*
 * streamguard.group_lease: a SET above streamguard.max_group_lease is
 * refused.  Values from the configuration file, ALTER ROLE / DATABASE ...
 * SET or the connection's options are taken, and cut to the bound when
 * used (sg_lease_ms): the bound may change after them, and refusing them
 * would refuse the connection.
 */
bool
GroupCheckLease(int *newval, void **extra, GucSource source)
{
	if (source >= PGC_S_INTERACTIVE && source != PGC_S_TEST && *newval > sg_max_group_lease_ms)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("streamguard.max_group_lease is %d ms.", sg_max_group_lease_ms);
		GUC_check_errhint("A superuser can raise streamguard.max_group_lease.");
		return false;
	}
	return true;
}

/* the lease a poll gives, within the superuser's bound */
static int
sg_lease_ms(void)
{
	return Min(sg_group_lease_ms, sg_max_group_lease_ms);
}

static int
sg_role_member_cap(void)
{
	if (sg_role_max_group_members >= 0)
		return sg_role_max_group_members;
	return Max(sg_max_group_members / 4, 1);
}

static int
sg_database_member_cap(void)
{
	if (sg_database_max_group_members >= 0)
		return sg_database_max_group_members;
	return Max(sg_max_group_members / 2, 1);
}

/*
 * Renew a member's lease (joining if it is not a member), at once.  A
 * join reuses an entry whose lease ran out, and is refused beyond the
 * role's and the database's caps.
 */
static void
sg_heartbeat(SgStreamMeta *meta, const char *consumer, const char *member, Oid roleid)
{
	Oid			catalog_oid = sg_catalog_oid(meta);
	TimestampTz now = GetCurrentTimestamp();
	SgGroupMember *found = NULL,
			   *free_entry = NULL;
	bool		exempt = superuser_arg(roleid);
	int			nrole = 0,
				ndb = 0;
	int			i;

	if (!sg_exit_registered)
	{
		before_shmem_exit(sg_group_exit, (Datum) 0);
		sg_exit_registered = true;
	}
	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_groups->hwm; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid != InvalidOid && sg_entry_is(e, catalog_oid, meta->stream_id, consumer) &&
			strcmp(e->member, member) == 0)
		{
			found = e;
			break;
		}
		if (e->dbid != InvalidOid && e->lease_until < now)
			sg_free_entry_locked(e);	/* expired: anyone's to take */
		if (e->dbid == InvalidOid)
		{
			if (free_entry == NULL)
				free_entry = e;
			continue;
		}
		if (e->roleid == roleid)
			nrole++;
		if (e->dbid == MyDatabaseId)
			ndb++;
	}
	if (found == NULL && free_entry == NULL && sg_groups->hwm < sg_max_group_members)
		free_entry = &sg_groups->members[sg_groups->hwm++];
	if (found == NULL)
	{
		int			rolecap = sg_role_member_cap();
		int			dbcap = sg_database_member_cap();

		if (free_entry == NULL)
		{
			LWLockRelease(sg_groups->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many consumer group members"),
					 errdetail("All %d member entries are in use.", sg_max_group_members),
					 errhint("Raise streamguard.max_group_members, or have idle members call leave_group.")));
		}
		if (!exempt && nrole >= rolecap)
		{
			LWLockRelease(sg_groups->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("role \"%s\" holds too many consumer group members",
							GetUserNameFromId(roleid, false)),
					 errdetail("The role holds %d member entries over all databases; streamguard.role_max_group_members is %d.",
							   nrole, rolecap),
					 errhint("Have idle members of the role call leave_group, or wait until their leases end.")));
		}
		if (ndb >= dbcap)
		{
			LWLockRelease(sg_groups->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many consumer group members in this database"),
					 errdetail("The database holds %d member entries; streamguard.database_max_group_members is %d.",
							   ndb, dbcap),
					 errhint("Have idle members call leave_group, or wait until their leases end.")));
		}
		found = free_entry;
		memset(found, 0, sizeof(*found));
		found->dbid = MyDatabaseId;
		found->catalog_oid = catalog_oid;
		found->roleid = roleid;
		found->stream_id = meta->stream_id;
		strlcpy(found->consumer, consumer, sizeof(found->consumer));
		strlcpy(found->member, member, sizeof(found->member));
		found->joined_at = now;
		sg_groups->nused++;
	}
	found->pid = MyProcPid;
	found->last_poll_at = now;
	found->lease_until = now + (TimestampTz) sg_lease_ms() * 1000;
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
	for (i = 0; i < sg_groups->hwm; i++)
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
	for (i = 0; i < sg_groups->hwm; i++)
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

/*
 * Move partition p from `from` (NULL: unassigned) to `to`, unless a
 * transaction holds its position row (the old owner reading it): then it
 * stays, and a later poll tries again.  Returns whether it moved.
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
										"UPDATE streamguard.consumer c SET member = $4 "
										"FROM (SELECT partition FROM streamguard.consumer "
										"      WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
										"      AND partition OPERATOR(pg_catalog.=) $3 AND member IS NOT DISTINCT FROM $5 "
										"      FOR UPDATE SKIP LOCKED) l "
										"WHERE c.stream_id OPERATOR(pg_catalog.=) $1 AND c.name OPERATOR(pg_catalog.=) $2 "
										"AND c.partition OPERATOR(pg_catalog.=) l.partition",
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
 * Before a member's fetch reads: take its share of the partitions (see
 * the banner).  owner[p] is the member the position row of partition p
 * names (NULL: none), as the fetch read it with a fresh snapshot; it is
 * updated with what moved.  Runs as the data owner, SPI connected.
 */
void
GroupRebalance(SgStreamMeta *meta, const char *consumer, const char *me, char **owner)
{
	SgMemberCount *mc;
	int		   *order;
	char	  **live;
	int			nlive;
	int			q,
				r,
				i,
				j,
				self,
				want;

	nlive = sg_live_members(meta, consumer, &live);
	mc = palloc0(sizeof(SgMemberCount) * Max(nlive, 1));
	order = palloc(sizeof(int) * Max(nlive, 1));
	self = -1;
	for (i = 0; i < nlive; i++)
	{
		mc[i].name = live[i];
		if (strcmp(live[i], me) == 0)
			self = i;
	}
	if (self < 0)
		return;					/* our lease ran out between the calls */
	for (i = 0; i < meta->nparts; i++)
	{
		j = sg_member_index(mc, nlive, owner[i]);
		if (j >= 0)
			mc[j].count++;
	}

	/* targets: the r members holding most get the ceiling (ties: by name) */
	q = meta->nparts / nlive;
	r = meta->nparts % nlive;
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
	for (i = 0; i < meta->nparts && want > 0; i++)
	{
		if (sg_member_index(mc, nlive, owner[i]) >= 0)
			continue;
		if (sg_move_partition(meta, consumer, i, owner[i], me))
		{
			owner[i] = pstrdup(me);
			want--;
		}
	}
	/* then the excess of members above target, their highest partitions */
	for (i = meta->nparts - 1; i >= 0 && want > 0; i--)
	{
		j = sg_member_index(mc, nlive, owner[i]);
		if (j < 0 || j == self || mc[j].count <= mc[j].target)
			continue;
		if (sg_move_partition(meta, consumer, i, owner[i], me))
		{
			owner[i] = pstrdup(me);
			mc[j].count--;
			want--;
		}
	}
}

/*
 * Before a member's fetch: renew its lease (joining if it is not a
 * member yet).  `roleid` is the polling role (the caller, not the data
 * owner the poll runs as): its entries count against its cap.
 */
void
GroupHeartbeat(SgStreamMeta *meta, const char *consumer, const char *member, Oid roleid)
{
	sg_heartbeat(meta, consumer, member, roleid);
}

/* how long a long-polling member may sleep before renewing its lease */
long
GroupHeartbeatMs(void)
{
	return Max(sg_lease_ms() / 3, 1);
}

/*
 * drop_consumer: the group's members go with the consumer (its
 * assignment is on the position rows, deleted with them).
 */
void
GroupForget(SgStreamMeta *meta, const char *consumer)
{
	Oid			catalog_oid;
	int			i;

	if (sg_groups == NULL || sg_groups->nused == 0 || meta->ref.slot < 0)
		return;
	catalog_oid = sg_catalog_oid(meta);
	LWLockAcquire(sg_groups->lock, LW_EXCLUSIVE);
	for (i = 0; i < sg_groups->hwm; i++)
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

	SgCheckWritable("leave_group", "it removes the member from the group");
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
	for (i = 0; i < sg_groups->hwm; i++)
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
	ret = SPI_execute_with_args("UPDATE streamguard.consumer c SET member = NULL "
								"FROM (SELECT partition FROM streamguard.consumer "
								"      WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
								"      AND member OPERATOR(pg_catalog.=) $3 FOR UPDATE SKIP LOCKED) l "
								"WHERE c.stream_id OPERATOR(pg_catalog.=) $1 AND c.name OPERATOR(pg_catalog.=) $2 "
								"AND c.partition OPERATOR(pg_catalog.=) l.partition",
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
 * The members of this database's groups, copied out under the lock into
 * *rows (palloc'd in the current context): their number.  What the caller
 * may see of them is the view's business (api/views.c).
 */
int
GroupMembersSnapshot(SgGroupMemberRow **rows)
{
	SgGroupMember *copy;
	SgGroupMemberRow *out;
	Oid			catalog_oid = StreamCatalogOid();
	int			n = 0;
	int			i;

	copy = palloc(sizeof(SgGroupMember) * sg_max_group_members);
	LWLockAcquire(sg_groups->lock, LW_SHARED);
	for (i = 0; i < sg_groups->hwm; i++)
	{
		SgGroupMember *e = &sg_groups->members[i];

		if (e->dbid == MyDatabaseId && e->catalog_oid == catalog_oid)
			copy[n++] = *e;
	}
	LWLockRelease(sg_groups->lock);

	out = palloc(sizeof(SgGroupMemberRow) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		out[i].stream_id = copy[i].stream_id;
		out[i].pid = copy[i].pid;
		out[i].joined_at = copy[i].joined_at;
		out[i].last_poll_at = copy[i].last_poll_at;
		out[i].lease_until = copy[i].lease_until;
		out[i].consumer = pstrdup(copy[i].consumer);
		out[i].member = pstrdup(copy[i].member);
	}
	pfree(copy);
	*rows = out;
	return n;
}
