/*-------------------------------------------------------------------------
 *
 * consumer.c
 *		SQL consumers: poll() and read(), and ConsumerFetch, the read path
 *		pipelines share.  The read of one partition's events, which they
 *		all go through, is in consumer_read.c; moving a consumer (seek,
 *		drop) is in seek.c.
 *
 * A consumer is a row per (stream, name, partition) in streamguard.consumer
 * holding the last consumed seq.  poll() reads events past that position
 * and below the partition's readable horizon, and moves the position in
 * the caller's transaction: COMMIT acknowledges, ROLLBACK redelivers.
 *
 * Two sessions polling with one consumer name share it partition by
 * partition: a poll locks the position row of each partition it reads
 * with FOR UPDATE SKIP LOCKED, so a partition held by one open poll
 * transaction is skipped by the other, which neither waits nor receives
 * the same events.  Position rows are created on first poll under a
 * conditional lock, for the same reason.
 *
 * A poll with a member name reads only the partitions assigned to that
 * member of the consumer's group.  The assignment is the position row's
 * `member` column: the fetch reads it with the positions, group.c moves
 * partitions to the member if it is below its share, and the position row
 * is then locked only if it names the member (ConsumerFetchMember).  One
 * row lock is both the position lock and the group's fence.
 *
 * Ordering of a read: the horizon is computed first, then a fresh snapshot
 * is taken for the events.  Every seq below the horizon belonged to a
 * transaction already out of the proc array when the horizon was read, so
 * that snapshot sees all committed events below it (horizon_int.h).
 *
 * What a poll writes: the position row of each partition it read events
 * from (one UPDATE, HOT: the key and the indexed columns stay), nothing
 * for a partition with nothing readable, and no row is locked there.  A
 * partition whose readable range holds only the seqs of appends that
 * rolled back is read once under the row lock; the backend then remembers
 * the range as empty (sg_known_empty: no event can appear below a horizon
 * later) and does not lock the row again for it, which would write the
 * row's xmax and take a transaction ID on every poll until the next event.
 *
 * poll has a C symbol per SQL signature: sg_poll_0_3 for the 0.3 scripts,
 * sg_poll for 0.1's (stream, consumer, max_events) and 0.2's (with wait
 * and member), both over sg_poll_run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/condition_variable.h"
#include "pgstat.h"
#include "executor/tstoreReceiver.h"
#include "nodes/params.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog/sg_catalog.h"
#include "core/bounds.h"
#include "core/util.h"
#include "shmem/horizon.h"
#include "stream/consumer.h"
#include "stream/consumer_int.h"
#include "stream/group.h"
#include "stream/repartition.h"

PG_FUNCTION_INFO_V1(sg_poll);
PG_FUNCTION_INFO_V1(sg_poll_0_3);
PG_FUNCTION_INFO_V1(sg_read);

#define SG_LOCKTAG_CONSUMER 0x5347	/* advisory lock space of ours */

static uint32 sg_poll_rotor = 0;

/*
 * Readable ranges a fetch of this backend found empty under the position
 * row's lock: per (extension incarnation, stream, consumer, partition), the
 * last one, (after, before).  Every seq below `before` belonged to a
 * transaction that had ended when the horizon was read, and the read's
 * snapshot was taken after that, so no event can appear in the range
 * later: a fetch whose unlocked position is at or past `after` and whose
 * horizon is at or below `before` has nothing to read in the partition.
 * It only spares a lock: the position is not moved over the range.
 */
typedef struct SgEmptyKey
{
	Oid			catalog_oid;
	int32		stream_id;
	int32		partition;
	char		consumer[SG_MAX_NAME_LEN + 1];
} SgEmptyKey;

typedef struct SgEmptyEntry
{
	SgEmptyKey	key;
	int64		after;
	int64		before;
} SgEmptyEntry;

static HTAB *sg_empty_ranges = NULL;

/* false when the consumer's name does not fit the key (then nothing is kept) */
static bool
sg_empty_key(SgStreamMeta *meta, const char *consumer, int p, SgEmptyKey *key)
{
	if (strlen(consumer) > SG_MAX_NAME_LEN)
		return false;
	memset(key, 0, sizeof(*key));
	key->catalog_oid = HorizonCatalogOid(meta->ref.slot);
	key->stream_id = meta->stream_id;
	key->partition = p;
	strlcpy(key->consumer, consumer, sizeof(key->consumer));
	return true;
}

/* whether (pos, before) lies inside a range of partition p found empty */
static bool
sg_known_empty(SgStreamMeta *meta, const char *consumer, int p, int64 pos, int64 before)
{
	SgEmptyKey	key;
	SgEmptyEntry *e;

	if (sg_empty_ranges == NULL || !sg_empty_key(meta, consumer, p, &key))
		return false;
	e = hash_search(sg_empty_ranges, &key, HASH_FIND, NULL);
	return e != NULL && pos >= e->after && before <= e->before;
}

/* a read of partition p under its row lock found no event in (after, before) */
static void
sg_note_empty(SgStreamMeta *meta, const char *consumer, int p, int64 after, int64 before)
{
	SgEmptyKey	key;
	SgEmptyEntry *e;

	if (!sg_empty_key(meta, consumer, p, &key))
		return;
	if (sg_empty_ranges == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(SgEmptyKey);
		ctl.entrysize = sizeof(SgEmptyEntry);
		ctl.hcxt = CacheMemoryContext;
		sg_empty_ranges = hash_create("streamguard empty ranges", 64, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = hash_search(sg_empty_ranges, &key, HASH_ENTER, NULL);
	e->after = after;
	e->before = before;
}

static void
sg_check_max_events(int32 max_events)
{
	if (max_events < 1 || max_events > SG_MAX_POLL_EVENTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_events must be between 1 and %d, got %d", SG_MAX_POLL_EVENTS, max_events)));
}

/*
 * Create the consumer's position rows.  Returns false if another
 * transaction is creating them right now (the caller then has nothing to
 * read this time).
 */
static bool
sg_create_consumer(SgStreamMeta *meta, const char *consumer)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	LOCKTAG		tag;
	int			ret;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) meta->stream_id,
						 hash_bytes((const unsigned char *) consumer, strlen(consumer)),
						 SG_LOCKTAG_CONSUMER);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	StreamLockShare(meta);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	ret = SPI_execute_plan(SgPlanCached(NULL,
										"INSERT INTO streamguard.consumer (stream_id, name, partition, position) "
										"SELECT $1, $2, sp.partition, sp.seq_floor FROM streamguard.stream_partition sp "
										"WHERE sp.stream_id OPERATOR(pg_catalog.=) $1 "
										"ON CONFLICT DO NOTHING",
										2, types),
						   values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "consumer creation failed: %s", SPI_result_code_string(ret));
	return true;
}

/*
 * Read the unlocked positions of a consumer (fresh snapshot); how many.
 * With owner (a consumer group's fetch), also the member each partition
 * is assigned to (palloc'd, NULL: none).
 */
static int
sg_read_positions(SgStreamMeta *meta, const char *consumer, int64 *pos, bool *present,
				  char **owner)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	SPIPlanPtr	plan;
	Snapshot	snap;
	uint64		i;
	int			ret;
	int			found = 0;

	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	/* the member column exists from 0.2 on: asked for by member polls only */
	plan = SgPlanCached(NULL, owner ?
						"SELECT partition, position, member FROM streamguard.consumer "
						"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2" :
						"SELECT partition, position FROM streamguard.consumer "
						"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
						2, types);
	snap = SgFreshSnapshot();
	ret = SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot, true, false, 0);
	UnregisterSnapshot(snap);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "consumer lookup failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int			p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		CHECK_FOR_INTERRUPTS();

		if (p >= 0 && p < meta->nparts)
		{
			pos[p] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
			if (owner)
				owner[p] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
			if (!present[p])
				found++;
			present[p] = true;
		}
	}
	return found;
}

/*
 * The order in which a fetch tries the partitions: round robin from a
 * rotating start.  A member tries the partitions assigned to it first; the
 * others only if its batch is not full, and their lock (sg_lock_position)
 * finds them assigned to another.  owner[p] is the member partition p is
 * assigned to (read only with a member name).
 */
static void
sg_fetch_order(SgStreamMeta *meta, char **owner, const char *member, int *order)
{
	int			start,
				k;

	start = (int) (sg_poll_rotor++ % (uint32) meta->nparts);
	for (k = 0; k < meta->nparts; k++)
		order[k] = (start + k) % meta->nparts;
	if (member)
	{
		int			n = 0;

		for (k = 0; k < meta->nparts; k++)
			if (owner[(start + k) % meta->nparts] != NULL &&
				strcmp(owner[(start + k) % meta->nparts], member) == 0)
				order[n++] = (start + k) % meta->nparts;
		for (k = 0; k < meta->nparts; k++)
			if (owner[(start + k) % meta->nparts] == NULL ||
				strcmp(owner[(start + k) % meta->nparts], member) != 0)
				order[n++] = (start + k) % meta->nparts;
	}
}

/*
 * Lock a consumer's position row of one partition for the fetch: values[0]
 * to values[2] are the stream, the consumer and the partition (values[3]
 * is set here with a member name).  FOR UPDATE, SKIP LOCKED when
 * skip_locked or with a member.  False when the row is not ours to read
 * (another poll holds it, or another member's); else *locked_pos gets its
 * position.  Runs as the data owner, SPI connected.
 */
static bool
sg_lock_position(Datum *values, const char *member, bool skip_locked, int64 *locked_pos)
{
	Oid			types[3] = {INT4OID, TEXTOID, INT4OID};
	Oid			lock_types[4] = {INT4OID, TEXTOID, INT4OID, TEXTOID};
	SPIPlanPtr	plan;
	bool		isnull;
	int			ret;

	if (member)
	{
		/*
		 * The fence: only a row that names this member, as its latest
		 * version says (a row moved since the fetch read the positions is
		 * rechecked), and the lock lasts until the caller's transaction
		 * ends, so the partition cannot move before then (group.c).
		 */
		values[3] = CStringGetTextDatum(member);
		plan = SgPlanCached(NULL,
							"SELECT position FROM streamguard.consumer "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
							"AND partition OPERATOR(pg_catalog.=) $3 AND member OPERATOR(pg_catalog.=) $4 "
							"FOR UPDATE SKIP LOCKED",
							4, lock_types);
	}
	else
		plan = SgPlanCached(NULL, skip_locked ?
							"SELECT position FROM streamguard.consumer "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
							"AND partition OPERATOR(pg_catalog.=) $3 FOR UPDATE SKIP LOCKED" :
							"SELECT position FROM streamguard.consumer "
							"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
							"AND partition OPERATOR(pg_catalog.=) $3 FOR UPDATE",
							3, types);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "consumer lock failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		return false;
	*locked_pos = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

/*
 * Move the consumer's position of the partition whose row
 * sg_lock_position locked (values[0] to values[2], as there) to `last`.
 */
static void
sg_set_position(Datum *values, int64 last)
{
	Oid			types[4] = {INT4OID, TEXTOID, INT4OID, INT8OID};
	SPIPlanPtr	plan;
	int			ret;

	values[3] = Int64GetDatum(last);
	plan = SgPlanCached(NULL,
						"UPDATE streamguard.consumer SET position = $4, updated_at = pg_catalog.now() "
						"WHERE stream_id OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2 "
						"AND partition OPERATOR(pg_catalog.=) $3",
						4, types);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "consumer position update failed");
}

/*
 * Fetch up to max_events events for a consumer into `store`, in seq order
 * per partition, below each partition's readable horizon.  The position
 * rows of the partitions read are locked (FOR UPDATE, SKIP LOCKED when
 * skip_locked) and, when advance, moved to the last event read.  Across a
 * change of the partition count a reader reads only what RepartitionCaps
 * allows (repartition.c).  last_seq[p] receives the last seq read in
 * partition p (or its position when nothing was read), first_seq[p] the
 * first (0 if none).  Only the partitions p with p % nshares = share are read (a pipeline's worker
 * `share` of `nshares`; 1 and 0 read them all).  With a member name (a
 * consumer group's poll), the member first takes its share of the
 * partitions (group.c) and a position row is locked only if it names the
 * member: the group's fence.  Runs as the data owner, SPI connected.
 * Returns the number of events.
 */
static int
sg_fetch(SgStreamMeta *meta, const char *consumer, int max_events,
		 Tuplestorestate *store, TupleDesc desc, bool skip_locked,
		 bool advance, int nshares, int share, const char *member,
		 int64 *first_seq, int64 *last_seq)
{
	int			slot = meta->ref.slot;
	int64	   *pos;
	bool	   *present;
	int64	   *cap;
	char	  **owner = NULL;
	int		   *order;
	bool		jumped = false;
	bool		held = false;
	bool		moved = false;
	int			passes = 0;
	int			remaining = max_events;
	int			k;

	pos = palloc0(sizeof(int64) * meta->nparts);
	present = palloc0(sizeof(bool) * meta->nparts);
	for (k = 0; k < meta->nparts; k++)
	{
		first_seq[k] = 0;
		last_seq[k] = -1;
	}
	if (member)
		owner = palloc0(sizeof(char *) * meta->nparts);
	if (sg_read_positions(meta, consumer, pos, present, owner) < meta->nparts)
	{
		if (!sg_create_consumer(meta, consumer))
			return 0;
		(void) sg_read_positions(meta, consumer, pos, present, owner);
	}
	if (member)
		GroupRebalance(meta, consumer, member, owner);
	cap = palloc(sizeof(int64) * meta->nparts);
	order = palloc(sizeof(int) * meta->nparts);

again:
	/* per-key order across changes of the partition count (repartition.c) */
	RepartitionCaps(meta, pos, cap);
	for (k = 0; k < meta->nparts; k++)
		if (cap[k] != PG_INT64_MAX)
			held = true;
	sg_fetch_order(meta, owner, member, order);
	for (k = 0; k < meta->nparts && remaining > 0; k++)
	{
		int			p = order[k];
		int64		horizon;
		int64		before;
		bool		capped;
		bool		skip_to_cap = false;
		int64		locked_pos;
		int64		last = 0;
		int			got;
		Snapshot	snap;
		Datum		values[4];

		if (!present[p] || p % nshares != share || cap[p] < 0)
			continue;
		horizon = HorizonReadable(slot, p, NULL, NULL);
		/* held back at a switch point, which every seq below horizon has passed */
		capped = cap[p] < horizon;
		before = capped ? cap[p] + 1 : horizon;
		if (pos[p] + 1 >= before)
			continue;			/* nothing readable */
		if (!capped && sg_known_empty(meta, consumer, p, pos[p], before))
			continue;			/* only aborted appends' seqs readable */

		values[0] = Int32GetDatum(meta->stream_id);
		values[1] = CStringGetTextDatum(consumer);
		values[2] = Int32GetDatum(p);
		if (!sg_lock_position(values, member, skip_locked, &locked_pos))
			continue;			/* another poll holds it, or another member's */
		last_seq[p] = locked_pos;
		if (locked_pos + 1 >= before)
			continue;

		snap = SgFreshSnapshot();
		got = ConsumerReadPartition(meta, p, locked_pos, before, remaining, snap,
									store, desc, &last, &first_seq[p]);
		UnregisterSnapshot(snap);
		if (capped && got < remaining)
		{
			/*
			 * Everything up to the switch point is read: move there, over
			 * any aborted or duplicate seqs at the end, so the reader passes
			 * it.  Over a gap even without `advance`: no event is skipped.
			 */
			skip_to_cap = true;
			jumped = true;
			last = cap[p];
		}
		else if (got == 0)
		{
			sg_note_empty(meta, consumer, p, locked_pos, before);
			continue;
		}
		remaining -= got;
		last_seq[p] = last;

		if (advance || (skip_to_cap && got == 0))
		{
			sg_set_position(values, last);
			moved = true;
			if (skip_to_cap)
				pos[p] = last;
		}
	}

	/*
	 * Nothing read, but a partition moved to its switch point: the reader
	 * may have passed a change and have the next mapping's events to read.
	 * One mapping per fetch: a batch never mixes them.
	 */
	if (remaining == max_events && jumped && passes++ < meta->nchanges)
	{
		jumped = false;
		goto again;
	}

	/*
	 * Held back, and moved: once this commits, another session sharing the
	 * consumer (or another worker of the pipeline) may be past the change.
	 * Wake the stream's long-polls and workers then, as an append does.
	 */
	if (held && moved)
		HorizonWakeReadersAtCommit(meta->stream_id);
	return max_events - remaining;
}

int
ConsumerFetch(SgStreamMeta *meta, const char *consumer, int max_events,
			  Tuplestorestate *store, TupleDesc desc, bool skip_locked,
			  bool advance, int nshares, int share, int64 *first_seq, int64 *last_seq)
{
	return sg_fetch(meta, consumer, max_events, store, desc, skip_locked, advance,
					nshares, share, NULL, first_seq, last_seq);
}

/*
 * The same for a poll (SKIP LOCKED, advancing) as a member of the
 * consumer's group: it reads only the partitions assigned to it.
 */
int
ConsumerFetchMember(SgStreamMeta *meta, const char *consumer, const char *member,
					int max_events, Tuplestorestate *store, TupleDesc desc,
					int64 *first_seq, int64 *last_seq)
{
	return sg_fetch(meta, consumer, max_events, store, desc, true, true,
					1, 0, member, first_seq, last_seq);
}

/*
 * Move a consumer's positions forward to last_seq[p] (where >= 0).
 */
void
ConsumerAdvance(SgStreamMeta *meta, const char *consumer, const int64 *last_seq)
{
	Oid			types[3] = {INT4OID, TEXTOID, INT8ARRAYOID};
	Datum		values[3];
	Datum	   *elems = palloc(sizeof(Datum) * meta->nparts);
	int			p,
				ret;

	for (p = 0; p < meta->nparts; p++)
		elems[p] = Int64GetDatum(last_seq[p]);
	values[0] = Int32GetDatum(meta->stream_id);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = PointerGetDatum(construct_array(elems, meta->nparts, INT8OID, 8,
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	ret = SPI_execute_plan(SgPlanCached(NULL,
										"UPDATE streamguard.consumer c SET position = ($3)[c.partition OPERATOR(pg_catalog.+) 1], "
										"updated_at = pg_catalog.now() "
										"WHERE c.stream_id OPERATOR(pg_catalog.=) $1 AND c.name OPERATOR(pg_catalog.=) $2 "
										"AND ($3)[c.partition OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.>) c.position",
										3, types),
						   values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "consumer position update failed");
}

/*
 * poll's arguments of every signature: stream, consumer, max_events; and
 * the result set started.
 */
static void
sg_poll_args(FunctionCallInfo fcinfo, char **name, char **consumer, int32 *max_events)
{
	SgConsumerArgs(fcinfo, "poll", name, consumer);
	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_events must not be NULL")));
	*max_events = PG_GETARG_INT32(2);
	sg_check_max_events(*max_events);
}

/* the arguments 0.2 added: wait (milliseconds, rounded up) and member */
static void
sg_poll_args_0_2(FunctionCallInfo fcinfo, long *wait_ms, char **member)
{
	*wait_ms = 0;
	*member = NULL;
	if (!PG_ARGISNULL(3))
	{
		int64		us = SgIntervalUsecs(PG_GETARG_INTERVAL_P(3));

		if (us < 0 || us > SG_MAX_POLL_WAIT_US)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("wait must be between 0 and 1 hour, got \"%s\"",
							DatumGetCString(DirectFunctionCall1(interval_out, PG_GETARG_DATUM(3))))));
		*wait_ms = (long) ((us + 999) / 1000);
	}
	if (!PG_ARGISNULL(4))
	{
		*member = text_to_cstring(PG_GETARG_TEXT_PP(4));
		GroupCheckMember(*member);
	}
}

/*
 * poll: up to max_events events for `consumer`, waiting up to wait_ms for
 * the first; with a member name, as a member of the consumer group, from
 * the partitions assigned to it (group.c).  Into fcinfo's result set.
 */
static void
sg_poll_run(FunctionCallInfo fcinfo, const char *name, const char *consumer, int32 max_events,
			long wait_ms, const char *member)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SgStreamMeta *meta;
	SgUserSave	save;
	int64	   *first,
			   *last;
	TimestampTz deadline;

	deadline = GetCurrentTimestamp() + (TimestampTz) wait_ms * 1000;
	for (;;)
	{
		long		remaining_ms;
		int			n;
		SgStreamRef ref;

		/*
		 * One SPI connection per look: a long-poll may look many times,
		 * and what a look allocates goes with its connection.
		 */
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");

		/* looked up again after a sleep: dropped, or a privilege revoked */
		meta = StreamLookup(name, SG_PRIV_READ);
		StreamEnsureSeqReady(meta->ref, meta->stream_id);
		first = palloc(sizeof(int64) * meta->nparts);
		last = palloc(sizeof(int64) * meta->nparts);

		/*
		 * Long-poll: register for the stream's commit wake-up before
		 * looking, so an append that commits after the look still wakes us.
		 */
		if (wait_ms > 0)
			HorizonPrepareWait(meta->ref);
		SgBecomeDataOwner(&save, false);
		if (member)
		{
			GroupHeartbeat(meta, consumer, member, save.userid);
			n = ConsumerFetchMember(meta, consumer, member, max_events, rsinfo->setResult,
									rsinfo->setDesc, first, last);
		}
		else
		{
			GroupCheckNotGroup(meta, consumer);
			n = ConsumerFetch(meta, consumer, max_events, rsinfo->setResult, rsinfo->setDesc,
							  true, true, 1, 0, first, last);
		}
		SgRestoreUser(&save);
		ref = meta->ref;
		SPI_finish();
		if (n > 0 || wait_ms == 0)
			break;
		remaining_ms = (long) ((deadline - GetCurrentTimestamp()) / 1000);
		if (remaining_ms <= 0)
			break;
		/* a member wakes in time to renew its lease */
		if (member && remaining_ms > GroupHeartbeatMs())
			remaining_ms = GroupHeartbeatMs();
		(void) HorizonWaitReadable(ref, remaining_ms);
	}
	ConditionVariableCancelSleep();
}

/*
 * poll(stream, consumer, max_events, wait, member) -> setof event
 *
 * One C symbol per SQL signature: sg_poll_0_3 is what the 0.3 scripts
 * bind; sg_poll, the symbol of the older ones, serves 0.1's three
 * arguments (no wait, no member) and 0.2's five.
 */
Datum
sg_poll_0_3(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	int32		max_events;
	long		wait_ms;
	char	   *member;

	SgCheckWritable("poll", "it moves the consumer's position");
	sg_poll_args(fcinfo, &name, &consumer, &max_events);
	sg_poll_args_0_2(fcinfo, &wait_ms, &member);
	sg_poll_run(fcinfo, name, consumer, max_events, wait_ms, member);
	return (Datum) 0;
}

Datum
sg_poll(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *consumer;
	int32		max_events;
	long		wait_ms = 0;
	char	   *member = NULL;
	bool		signature_0_1 = SgCalledAs01(fcinfo, "poll", 3, 5);

	SgCheckWritable("poll", "it moves the consumer's position");
	sg_poll_args(fcinfo, &name, &consumer, &max_events);
	if (!signature_0_1)
		sg_poll_args_0_2(fcinfo, &wait_ms, &member);
	sg_poll_run(fcinfo, name, consumer, max_events, wait_ms, member);
	return (Datum) 0;
}

/*
 * read(stream, partition, after_seq, max_events) -> setof event
 *
 * Events of one partition after after_seq and below the readable horizon,
 * without a consumer: the caller keeps its own position (a pipeline on
 * another server keeps it in its own database).
 */
Datum
sg_read(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	int32		partition;
	int64		after;
	int32		max_events;
	SgStreamMeta *meta;
	SgUserSave	save;
	int64		horizon;
	int64		first = 0,
				last = 0;
	int			got;
	Snapshot	snap;

	StreamguardCheckLoaded();
	SgCheckPrimary("read");
	InitMaterializedSRF(fcinfo, 0);
	name = SgTextArg(fcinfo, 0, "stream name");
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL",
						PG_ARGISNULL(1) ? "partition" : PG_ARGISNULL(2) ? "after_seq" : "max_events")));
	partition = PG_GETARG_INT32(1);
	after = PG_GETARG_INT64(2);
	max_events = PG_GETARG_INT32(3);
	sg_check_max_events(max_events);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	meta = StreamLookup(name, SG_PRIV_READ);
	StreamCheckPartition(meta, partition);
	StreamEnsureSeqReady(meta->ref, meta->stream_id);
	horizon = HorizonReadable(meta->ref.slot, partition, NULL, NULL);
	if (after + 1 < horizon)
	{
		SgBecomeDataOwner(&save, false);
		snap = SgFreshSnapshot();
		got = ConsumerReadPartition(meta, partition, after, horizon, max_events, snap,
									rsinfo->setResult, rsinfo->setDesc, &last, &first);
		UnregisterSnapshot(snap);
		SgRestoreUser(&save);
		/* the caller is another server: what it gets must survive a crash here */
		if (got > 0)
			HorizonMakeDurable();
	}
	SPI_finish();
	return (Datum) 0;
}
