/*-------------------------------------------------------------------------
 *
 * kafka.c
 *		Kafka clients through librdkafka: the streamguard_kafka
 *		foreign-data wrapper's option validator, consumers and producers
 *		built from a foreign server and a user mapping, and interruptible,
 *		time-bounded waits on them.
 *
 * A Kafka cluster is declared the way remote PostgreSQL servers are:
 *	CREATE SERVER k FOREIGN DATA WRAPPER streamguard_kafka
 *		OPTIONS (bootstrap.servers 'host:9092', security.protocol 'sasl_ssl');
 *	CREATE USER MAPPING FOR role SERVER k
 *		OPTIONS (sasl.username '...', sasl.password '...');
 * Server options are a closed list of librdkafka client properties, each
 * value checked by librdkafka itself (rd_kafka_conf_set on a scratch
 * configuration); the ones that read files on the database server are for
 * superusers only.  Credentials live only in the user mapping.  Properties
 * the guarantees depend on (isolation.level, offset commits, offset
 * reset) are not options: they are set here, always.
 *
 * librdkafka runs threads of its own inside the backend.  The rules:
 *
 * - Those threads never touch PostgreSQL: the log and error callbacks
 *	 (the only code of ours librdkafka calls) copy the message into a
 *	 malloc'd report area under a pthread mutex, nothing else.  Logs and
 *	 errors are queued to the consumer queue (log.queue) so that even they
 *	 run on the backend's thread, during our polls.
 *
 * - They take no signals: all signals are blocked while the client is
 *	 created, so its threads (and the broker threads they create) inherit
 *	 a full mask and SIGTERM, SIGINT, SIGUSR1 and the latch's signal reach
 *	 the backend's own thread.
 *
 * - The backend's thread never waits inside librdkafka.  The consumer
 *	 queue writes a byte into a pipe of ours when it turns non-empty
 *	 (rd_kafka_queue_io_event_enable); we wait on that pipe with
 *	 WaitLatchOrSocket (WL_EXIT_ON_PM_DEATH, CHECK_FOR_INTERRUPTS when the
 *	 latch is set) and poll the queue without blocking.  Every call that
 *	 can wait — for a broker or for one of librdkafka's own threads — goes
 *	 through sg_kafka_call: it runs on a thread of its own (signals
 *	 blocked) while the backend waits on its latch, so that a SIGTERM or a
 *	 cancel is answered at once and the wait ends with an error at
 *	 streamguard.remote_timeout (plus a second) whatever librdkafka does;
 *	 an abandoned call is joined by the client's destroy, itself on a
 *	 thread (KafkaClose), so nothing of ours ever waits for a broker.
 *	 librdkafka's own timeouts are not enough: rd_kafka_query_watermark_offsets
 *	 (2.0.2) ignores its timeout once its requests are sent and waits for
 *	 the broker up to socket.timeout.ms, retried (minutes, against a broker
 *	 that hangs), and the transactional calls were seen to block far past
 *	 theirs.  The calls that go through sg_kafka_call (the whole class):
 *		rd_kafka_metadata				KafkaTopicPartitions
 *		rd_kafka_query_watermark_offsets	KafkaPartitionEnd
 *		rd_kafka_seek_partitions		KafkaSeek
 *		rd_kafka_assign					KafkaAssign
 *		rd_kafka_incremental_assign		KafkaAssignMore
 *		rd_kafka_init_transactions		KafkaTxnInit
 *		rd_kafka_begin_transaction		KafkaTxnBegin
 *		rd_kafka_commit_transaction		KafkaTxnCommit
 *	 and rd_kafka_destroy runs on the reaper thread (KafkaClose).  The
 *	 others we make do not wait: rd_kafka_consumer_poll and rd_kafka_poll
 *	 with timeout 0, rd_kafka_producev without RD_KAFKA_MSG_F_BLOCK (a
 *	 full queue is waited out on the latch), rd_kafka_position, rd_kafka_get_watermark_offsets, rd_kafka_outq_len,
 *	 rd_kafka_commit with async set, topic and queue handles.  A flush is
 *	 rd_kafka_poll(0) and the latch (KafkaFlush).  We never abort a Kafka
 *	 transaction: a producer that failed is closed, and the next one's
 *	 init_transactions aborts what it left open.
 *
 * - Producers (the Kafka sink): idempotent always, transactional for
 *	 exactly_once; their main queue (delivery reports, logs, errors) is the
 *	 one whose pipe we wait on, served by rd_kafka_poll on our thread.
 *
 * - Messages belong to the handle: KafkaPoll keeps the one it returns
 *	 until KafkaMessageDone, the next poll or KafkaClose, so an ERROR while
 *	 the caller converts it leaks nothing.
 *
 * - The pipe's two descriptors are counted with AcquireExternalFD.
 *	 librdkafka's sockets (one per broker it talks to) and its internal
 *	 wake-up descriptors are not: it opens them on its own threads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "core/compat.h"
#include "core/util.h"
#include "io/kafka.h"
#include "io/remote.h"

PG_FUNCTION_INFO_V1(sg_kafka_validator);

#define SG_KAFKA_WRAPPER "streamguard_kafka"
/* one blocking librdkafka call at most this long between interrupt checks */
#define SG_KAFKA_STEP_MS 200
/* topic handles a producer keeps (the sink's topic and its checkpoints) */
#define SG_KAFKA_MAX_TOPICS 4

/* what librdkafka's threads report: malloc'd, never palloc'd */
typedef struct SgKafkaReport
{
	pthread_mutex_t lock;
	rd_kafka_resp_err_t err;	/* last error reported (0: none) */
	char		message[256];	/* its text, one line */
	uint64		count;			/* errors reported or logged so far */
	/* a producer's delivery reports (served on the backend's thread) */
	uint64		delivered;		/* messages acknowledged */
	uint64		failed;			/* messages that could not be delivered */
	rd_kafka_resp_err_t dr_err; /* the first delivery error */
} SgKafkaReport;

typedef struct SgKafkaCall SgKafkaCall;
typedef void (*SgKafkaCallFn) (SgKafkaCall *c);

/*
 * A librdkafka call that may wait, made on a thread of its own (malloc'd,
 * see sg_kafka_call): the backend waits for it on the latch and may give
 * up on it; the client's destroy joins the thread first.  Its arguments
 * are its own (malloc'd here or by librdkafka, freed with it): nothing of
 * the backend's memory, which an error frees while the call may go on.
 */
struct SgKafkaCall
{
	rd_kafka_t *rk;
	SgKafkaCallFn fn;
	int			timeout_ms;		/* librdkafka's timeout for the call */
	int			wake_fd;		/* written when done: the handle's pipe */
	pthread_t	thread;
	pthread_mutex_t lock;
	bool		done;
	/* arguments */
	char	   *topic;
	int32		partition;
	rd_kafka_topic_partition_list_t *list;
	/* results, read once done */
	rd_kafka_resp_err_t err;
	rd_kafka_error_t *error;
	rd_kafka_resp_err_t topic_err;	/* metadata: the topic's error */
	int			partitions;		/* metadata: the topic's partition count */
	int64		lo;				/* watermarks */
	int64		hi;
};

struct SgKafka
{
	rd_kafka_t *rk;
	rd_kafka_queue_t *queue;	/* the consumer queue */
	int			pipe_fd[2];		/* [0] we wait on, [1] librdkafka writes */
	SgKafkaReport *report;
	rd_kafka_message_t *current;	/* returned by KafkaPoll, not done */
	bool		producer;
	rd_kafka_topic_t *topics[SG_KAFKA_MAX_TOPICS];	/* a producer's topics */
	int			ntopics;
	SgKafkaCall *call;			/* a call on its thread (sg_kafka_call), or NULL */
	char		server[NAMEDATALEN];
};

static void sg_kafka_raise_error(SgKafka *k, rd_kafka_error_t *error, const char *what);
static void sg_kafka_tick(void);
static SgKafkaCall *sg_kafka_call_new(SgKafka *k, SgKafkaCallFn fn, const char *topic);
static void sg_kafka_call(SgKafka *k, SgKafkaCall *c, const char *what, int timeout_ms,
						  TimestampTz give_up, uint32 wait_event);
static void sg_kafka_call_free(SgKafkaCall *c);
static void sg_kafka_pause(long ms);
static void sg_kafka_drain_pipe(SgKafka *k);
static void sg_kafka_wait(SgKafka *k, TimestampTz deadline, uint32 wait_event);

typedef struct SgKafkaOption
{
	const char *name;
	Oid			context;
	bool		superuser_only; /* reads a file on the database server */
} SgKafkaOption;

static const SgKafkaOption sg_kafka_options[] = {
	{"bootstrap.servers", ForeignServerRelationId, false},
	{"client.id", ForeignServerRelationId, false},
	{"client.rack", ForeignServerRelationId, false},
	{"group.id", ForeignServerRelationId, false},
	{"security.protocol", ForeignServerRelationId, false},
	{"sasl.mechanisms", ForeignServerRelationId, false},
	{"ssl.endpoint.identification.algorithm", ForeignServerRelationId, false},
	{"ssl.ca.location", ForeignServerRelationId, true},
	{"ssl.certificate.location", ForeignServerRelationId, true},
	{"ssl.key.location", ForeignServerRelationId, true},
	{"ssl.crl.location", ForeignServerRelationId, true},
	{"broker.address.family", ForeignServerRelationId, false},
	{"socket.timeout.ms", ForeignServerRelationId, false},
	{"socket.keepalive.enable", ForeignServerRelationId, false},
	{"reconnect.backoff.ms", ForeignServerRelationId, false},
	{"reconnect.backoff.max.ms", ForeignServerRelationId, false},
	{"topic.metadata.refresh.interval.ms", ForeignServerRelationId, false},
	{"metadata.max.age.ms", ForeignServerRelationId, false},
	{"fetch.wait.max.ms", ForeignServerRelationId, false},
	{"fetch.min.bytes", ForeignServerRelationId, false},
	{"fetch.max.bytes", ForeignServerRelationId, false},
	{"max.partition.fetch.bytes", ForeignServerRelationId, false},
	{"receive.message.max.bytes", ForeignServerRelationId, false},
	{"message.max.bytes", ForeignServerRelationId, false},
	{"queued.min.messages", ForeignServerRelationId, false},
	{"queued.max.messages.kbytes", ForeignServerRelationId, false},
	{"check.crcs", ForeignServerRelationId, false},
	{"sasl.username", UserMappingRelationId, false},
	{"sasl.password", UserMappingRelationId, false},
	{"ssl.key.password", UserMappingRelationId, false},
	{NULL, InvalidOid, false}
};

/* the columns of relation "batch" for a Kafka source */
TupleDesc
KafkaEventTupleDesc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(8);

	SgEventColumns(desc);
	TupleDescInitEntry(desc, 7, "topic", TEXTOID, -1, 0);
	TupleDescInitEntry(desc, 8, "headers", JSONBOID, -1, 0);
	TupleDescFinalize(desc);
	return BlessTupleDesc(desc);
}

/* ------------------------------------------------------------ validator */

/*
 * An option's librdkafka property name: "bootstrap_servers" is
 * "bootstrap.servers" (a dotted name must be double-quoted in SQL).
 */
static char *
sg_kafka_property(const char *defname)
{
	char	   *name = pstrdup(defname);
	char	   *c;

	for (c = name; *c; c++)
		if (*c == '_')
			*c = '.';
	return name;
}

/*
 * Validator of the streamguard_kafka wrapper's server and user mapping
 * options: names from the closed list, values accepted by librdkafka.
 */
Datum
sg_kafka_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *lc;
	rd_kafka_conf_t *conf;

	conf = rd_kafka_conf_new();
	PG_TRY();
	{
		foreach(lc, options)
		{
			DefElem    *def = (DefElem *) lfirst(lc);
			const SgKafkaOption *opt;
			const SgKafkaOption *found = NULL;
			char		errstr[512];
			char	   *prop = sg_kafka_property(def->defname);

			for (opt = sg_kafka_options; opt->name; opt++)
				if (opt->context == catalog && strcmp(opt->name, prop) == 0)
					found = opt;
			if (!found)
			{
				StringInfoData valid;

				initStringInfo(&valid);
				for (opt = sg_kafka_options; opt->name; opt++)
					if (opt->context == catalog)
						appendStringInfo(&valid, "%s%s", valid.len ? ", " : "", opt->name);
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
						 errmsg("invalid option \"%s\"", def->defname),
						 valid.len ? errhint("Valid options in this context are: %s (or with \"_\" for \".\").", valid.data) :
						 errhint("There are no valid options in this context.")));
			}
			if (found->superuser_only && !superuser())
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("only superusers may set option \"%s\"", def->defname),
						 errdetail("The option names a file on the database server.")));
			if (rd_kafka_conf_set(conf, prop, defGetString(def), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("invalid value for option \"%s\"", def->defname),
						 errdetail("librdkafka: %s", errstr)));
		}
	}
	PG_FINALLY();
	{
		rd_kafka_conf_destroy(conf);
	}
	PG_END_TRY();
	PG_RETURN_VOID();
}

/* is `server` a foreign server of the streamguard_kafka wrapper? */
bool
KafkaIsKafkaServer(const char *server)
{
	ForeignServer *fs = GetForeignServerByName(server, true);

	if (fs == NULL)
		return false;
	return strcmp(GetForeignDataWrapper(fs->fdwid)->fdwname, SG_KAFKA_WRAPPER) == 0;
}

/* Kafka's rule for topic names: [a-zA-Z0-9._-], 1 to 249 characters */
void
KafkaCheckTopicName(const char *topic)
{
	size_t		len = strlen(topic);

	if (len == 0 || len > 249 || strspn(topic, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len ||
		strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid Kafka topic name \"%s\"", topic),
				 errdetail("A topic name has 1 to 249 characters among letters, digits, \".\", \"_\" and \"-\".")));
}

/* ------------------------------------------------- librdkafka's threads */

/*
 * The callbacks librdkafka calls.  They may run on its threads: copy into
 * the report area, nothing else (no palloc, no elog, no latch).
 */
static void
sg_kafka_note(SgKafkaReport *rep, rd_kafka_resp_err_t err, const char *text, bool count)
{
	char	   *nl;

	if (rep == NULL)
		return;
	pthread_mutex_lock(&rep->lock);
	rep->err = err;
	if (count)
		rep->count++;
	strlcpy(rep->message, text ? text : "", sizeof(rep->message));
	while ((nl = strchr(rep->message, '\n')) != NULL)
		*nl = ' ';
	pthread_mutex_unlock(&rep->lock);
}

static void
sg_kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	sg_kafka_note((SgKafkaReport *) opaque, (rd_kafka_resp_err_t) err, reason, true);
}

static void
sg_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	/*
	 * Logged errors (not warnings) count too: librdkafka passes a repeated
	 * broker failure to error_cb once, but logs it every time.
	 */
	if (level <= 3)
		sg_kafka_note((SgKafkaReport *) rd_kafka_opaque(rk), RD_KAFKA_RESP_ERR_UNKNOWN, buf, true);
}

/*
 * A producer's delivery report.  Served by rd_kafka_poll on the backend's
 * thread, but kept as plain as the others: counters under the mutex.
 */
static void
sg_kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	SgKafkaReport *rep = (SgKafkaReport *) opaque;

	if (rep == NULL)
		return;
	pthread_mutex_lock(&rep->lock);
	if (m->err)
	{
		if (rep->failed++ == 0)
			rep->dr_err = m->err;
	}
	else
		rep->delivered++;
	pthread_mutex_unlock(&rep->lock);
}

void
KafkaLastError(SgKafka *k, char *buf, size_t len)
{
	pthread_mutex_lock(&k->report->lock);
	strlcpy(buf, k->report->message, len);
	pthread_mutex_unlock(&k->report->lock);
}

uint64
KafkaErrorCount(SgKafka *k)
{
	uint64		n;

	pthread_mutex_lock(&k->report->lock);
	n = k->report->count;
	pthread_mutex_unlock(&k->report->lock);
	return n;
}

const char *
KafkaServerName(SgKafka *k)
{
	return k->server;
}

/* ---------------------------------------------------------- the client */

static void
sg_kafka_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for Kafka client property \"%s\"", name),
				 errdetail("librdkafka: %s", errstr)));
	}
}

/* the options of the user mapping for `userid` (or PUBLIC), or NIL */
static List *
sg_kafka_mapping_options(Oid userid, Oid serverid)
{
	HeapTuple	tp;
	Datum		datum;
	bool		isnull;
	List	   *options = NIL;

	tp = SearchSysCache2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(userid), ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tp))
		tp = SearchSysCache2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid), ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tp))
		return NIL;
	datum = SysCacheGetAttr(USERMAPPINGUSERSERVER, tp, Anum_pg_user_mapping_umoptions, &isnull);
	if (!isnull)
		options = untransformRelOptions(datum);
	ReleaseSysCache(tp);
	return options;
}

/*
 * A client of `type` for `server` as `userid` (USAGE on the server
 * checked, its user mapping's credentials), in a transaction, with the
 * properties `fixed` (name, value pairs, NULL-terminated) set after the
 * server's options: what the guarantees rest on.  `group_id` is used when
 * the server sets none.  The queue we wait on is the consumer queue of a
 * consumer, the main queue (delivery reports, logs, errors) of a producer.
 */
static SgKafka *
sg_kafka_open(const char *server, Oid userid, rd_kafka_type_t type, const char *group_id,
			  const char *const *fixed)
{
	ForeignServer *fs = GetForeignServerByName(server, false);
	AclResult	aclresult;
	rd_kafka_conf_t *conf;
	ListCell   *lc;
	List	   *options;
	bool		has_group = false;
	bool		has_bootstrap = false;
	bool		has_backoff = false;
	bool		has_socket_timeout = false;
	SgKafka    *k;
	char		errstr[512];
	sigset_t	all,
				old;
	rd_kafka_t *rk;

	if (strcmp(GetForeignDataWrapper(fs->fdwid)->fdwname, SG_KAFKA_WRAPPER) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("server \"%s\" is not a Kafka server", server),
				 errhint("Kafka servers use the foreign-data wrapper %s.", SG_KAFKA_WRAPPER)));
	aclresult = pg_foreign_server_aclcheck(fs->serverid, userid, ACL_USAGE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_FOREIGN_SERVER, fs->servername);

	options = list_concat(list_copy(fs->options), sg_kafka_mapping_options(userid, fs->serverid));
	conf = rd_kafka_conf_new();
	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		char	   *prop = sg_kafka_property(def->defname);

		if (strcmp(prop, "group.id") == 0)
			has_group = true;
		if (strcmp(prop, "bootstrap.servers") == 0)
			has_bootstrap = true;
		if (strcmp(prop, "reconnect.backoff.max.ms") == 0)
			has_backoff = true;
		if (strcmp(prop, "socket.timeout.ms") == 0)
			has_socket_timeout = true;
		/* consumer properties mean nothing to a producer (it would warn) */
		if (type == RD_KAFKA_PRODUCER &&
			(strncmp(prop, "fetch.", 6) == 0 || strcmp(prop, "max.partition.fetch.bytes") == 0 ||
			 strncmp(prop, "queued.", 7) == 0 || strcmp(prop, "check.crcs") == 0 ||
			 strcmp(prop, "group.id") == 0))
			continue;
		sg_kafka_set(conf, prop, defGetString(def));
	}
	if (!has_bootstrap)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("server \"%s\" has no option \"bootstrap.servers\"", server)));
	}
	if (!has_group && type == RD_KAFKA_CONSUMER)
		sg_kafka_set(conf, "group.id", group_id);
	/* an unreachable broker is retried often enough to notice it in time */
	if (!has_backoff)
		sg_kafka_set(conf, "reconnect.backoff.max.ms", "1000");

	/*
	 * A request the broker does not answer fails (and its connection is
	 * closed) after streamguard.remote_timeout rather than librdkafka's
	 * minute, at least 10 s (the consumer's long polls, a loaded machine):
	 * what bounds a call the backend gave up on, which its client's destroy
	 * waits for.
	 */
	if (!has_socket_timeout)
		sg_kafka_set(conf, "socket.timeout.ms", psprintf("%d", Min(Max(sg_remote_timeout_ms, 10000), 300000)));
	/* what the guarantees rest on: not options */
	for (; fixed && fixed[0]; fixed += 2)
		sg_kafka_set(conf, fixed[0], fixed[1]);
	sg_kafka_set(conf, "log.queue", "true");

	k = MemoryContextAllocZero(TopMemoryContext, sizeof(SgKafka));
	k->pipe_fd[0] = k->pipe_fd[1] = -1;
	strlcpy(k->server, server, sizeof(k->server));
	k->report = malloc(sizeof(SgKafkaReport));
	if (k->report == NULL)
	{
		rd_kafka_conf_destroy(conf);
		pfree(k);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	}
	memset(k->report, 0, sizeof(SgKafkaReport));
	pthread_mutex_init(&k->report->lock, NULL);
	rd_kafka_conf_set_opaque(conf, k->report);
	rd_kafka_conf_set_error_cb(conf, sg_kafka_error_cb);
	rd_kafka_conf_set_log_cb(conf, sg_kafka_log_cb);
	if (type == RD_KAFKA_PRODUCER)
		rd_kafka_conf_set_dr_msg_cb(conf, sg_kafka_dr_cb);

	if (!AcquireExternalFD())
	{
		rd_kafka_conf_destroy(conf);
		KafkaClose(k);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to Kafka server \"%s\"", server),
				 errdetail("There are too many open files on the local server.")));
	}
	if (!AcquireExternalFD())
	{
		ReleaseExternalFD();
		rd_kafka_conf_destroy(conf);
		KafkaClose(k);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to Kafka server \"%s\"", server),
				 errdetail("There are too many open files on the local server.")));
	}
	if (pipe2(k->pipe_fd, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		ReleaseExternalFD();
		ReleaseExternalFD();
		k->pipe_fd[0] = k->pipe_fd[1] = -1;
		rd_kafka_conf_destroy(conf);
		KafkaClose(k);
		ereport(ERROR,
				(errcode_for_socket_access(),
				 errmsg("could not create a pipe: %m")));
	}

	/* librdkafka's threads start with every signal blocked */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rk == NULL)
	{
		/* conf is freed by rd_kafka_new only on success */
		rd_kafka_conf_destroy(conf);
		KafkaClose(k);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not create a Kafka client for server \"%s\"", server),
				 errdetail("librdkafka: %s", errstr)));
	}
	k->rk = rk;
	k->producer = type == RD_KAFKA_PRODUCER;
	if (type == RD_KAFKA_CONSUMER)
	{
		/* logs and errors, too, are served by our polls of the consumer queue */
		rd_kafka_poll_set_consumer(rk);
		k->queue = rd_kafka_queue_get_consumer(rk);
	}
	else
		k->queue = rd_kafka_queue_get_main(rk);
	(void) rd_kafka_set_log_queue(rk, NULL);
	rd_kafka_queue_io_event_enable(k->queue, k->pipe_fd[1], "1", 1);
	return k;
}

/*
 * A consumer: read committed, no automatic offset commits or stores, no
 * offset reset: an offset that is out of range is an error, never a silent
 * jump.
 */
SgKafka *
KafkaConsumerOpen(const char *server, Oid userid, const char *group_id)
{
	static const char *const fixed[] = {
		"isolation.level", "read_committed",
		"enable.auto.commit", "false",
		"enable.auto.offset.store", "false",
		"auto.offset.reset", "error",
		"enable.partition.eof", "false",
		"allow.auto.create.topics", "false",
		NULL
	};

	return sg_kafka_open(server, userid, RD_KAFKA_CONSUMER, group_id, fixed);
}

/* what the reaper thread needs: malloc'd */
typedef struct SgKafkaReaper
{
	rd_kafka_t *rk;
	SgKafkaReport *report;
	bool		producer;
	SgKafkaCall *call;			/* a call still running on the client ... */
	int			pipe_fd[2];		/* ... which may still write to this pipe */
} SgKafkaReaper;

/* the end of a call the backend gave up on: join, free */
static void
sg_kafka_call_end(SgKafkaCall *c)
{
	pthread_join(c->thread, NULL);
	sg_kafka_call_free(c);
}

/*
 * The end of a client, on a thread of its own: librdkafka's destroy joins
 * its threads, which can take long or, as seen with the mock cluster after
 * a topic error, never end.  Only librdkafka calls and free() here.
 */
static void *
sg_kafka_reap(void *arg)
{
	SgKafkaReaper *r = (SgKafkaReaper *) arg;

	if (r->call)
	{
		sg_kafka_call_end(r->call);
		close(r->pipe_fd[0]);
		close(r->pipe_fd[1]);
	}
	if (!r->producer)
		(void) rd_kafka_assign(r->rk, NULL);
	rd_kafka_destroy_flags(r->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	pthread_mutex_destroy(&r->report->lock);
	free(r->report);
	free(r);
	return NULL;
}

/*
 * Close a client without waiting for it: its queue and pending message
 * now, then librdkafka's destroy on a detached thread (all signals
 * blocked) that frees the report area when it is done.  If that thread
 * cannot be started, the destroy runs here.
 */
void
KafkaClose(SgKafka *k)
{
	SgKafkaReaper *r = NULL;

	if (k == NULL)
		return;
	if (k->current)
		rd_kafka_message_destroy(k->current);
	k->current = NULL;
	/* topic handles left behind would hold up librdkafka's destroy */
	while (k->ntopics > 0)
	{
		k->ntopics--;
		rd_kafka_topic_destroy(k->topics[k->ntopics]);
	}
	if (k->queue)
	{
		rd_kafka_queue_io_event_enable(k->queue, -1, NULL, 0);
		rd_kafka_queue_destroy(k->queue);
	}
	if (k->rk)
		r = malloc(sizeof(SgKafkaReaper));
	if (r)
	{
		pthread_t	thread;
		pthread_attr_t attr;
		sigset_t	all,
					old;
		int			rc;

		r->rk = k->rk;
		r->report = k->report;
		r->producer = k->producer;
		r->call = k->call;
		r->pipe_fd[0] = k->pipe_fd[0];
		r->pipe_fd[1] = k->pipe_fd[1];
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&thread, &attr, sg_kafka_reap, r);
		pthread_attr_destroy(&attr);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc == 0)
		{
			k->rk = NULL;
			k->report = NULL;
			if (k->call)
			{
				/* the reaper closes the pipe once the call is over */
				k->call = NULL;
				k->pipe_fd[0] = k->pipe_fd[1] = -1;
				ReleaseExternalFD();
				ReleaseExternalFD();
			}
		}
		else
			free(r);
	}
	if (k->call)
		sg_kafka_call_end(k->call);
	if (k->rk)
		rd_kafka_destroy_flags(k->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	if (k->pipe_fd[0] >= 0)
	{
		close(k->pipe_fd[0]);
		close(k->pipe_fd[1]);
		ReleaseExternalFD();
		ReleaseExternalFD();
	}
	if (k->report)
	{
		pthread_mutex_destroy(&k->report->lock);
		free(k->report);
	}
	pfree(k);
}

TimestampTz
KafkaDeadline(void)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), sg_remote_timeout_ms);
}

/* between two bounded librdkafka calls */
static void
sg_kafka_tick(void)
{
	CHECK_FOR_INTERRUPTS();
	if (!PostmasterIsAlive())
		proc_exit(1);
}

static int
sg_kafka_sqlstate(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
		case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
		case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
			return ERRCODE_UNDEFINED_OBJECT;
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
			return ERRCODE_INSUFFICIENT_PRIVILEGE;
		case RD_KAFKA_RESP_ERR__AUTHENTICATION:
		case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
			return ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION;
		case RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE:
		case RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET:
			return ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
		case RD_KAFKA_RESP_ERR__FENCED:
		case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
		case RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS:
			/* another incarnation took over: retried with a new producer */
			return ERRCODE_T_R_SERIALIZATION_FAILURE;
		default:
			return ERRCODE_CONNECTION_FAILURE;
	}
}

/*
 * Raise a Kafka error: the server's name and what we were doing, Kafka's
 * error name and code, and the last thing librdkafka reported.
 */
void
KafkaRaise(SgKafka *k, rd_kafka_resp_err_t err, const char *what)
{
	char		last[256];

	KafkaLastError(k, last, sizeof(last));
	ereport(ERROR,
			(errcode(sg_kafka_sqlstate(err)),
			 errmsg("Kafka server \"%s\": %s: %s (%s)", k->server, what, rd_kafka_err2str(err),
					rd_kafka_err2name(err)),
			 errdetail("Kafka error %s (%d).%s%s", rd_kafka_err2name(err), (int) err,
					   last[0] ? " Last client report: " : "", last)));
}

/* ------------------------------------------ calls that may wait, on a thread */

/*
 * The calls sg_kafka_call runs on their thread: librdkafka calls and
 * malloc/free only, arguments and results in the SgKafkaCall.
 */
static void
sg_call_metadata(SgKafkaCall *c)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(c->rk, c->topic, NULL);
	const struct rd_kafka_metadata *md = NULL;

	c->partitions = -1;
	if (rkt == NULL)
	{
		/* reported as the topic's error */
		c->err = RD_KAFKA_RESP_ERR_NO_ERROR;
		c->topic_err = rd_kafka_last_error();
		return;
	}
	c->err = rd_kafka_metadata(c->rk, 0, rkt, &md, c->timeout_ms);
	if (c->err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (md->topic_cnt == 1)
		{
			c->topic_err = md->topics[0].err;
			if (md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
				c->partitions = md->topics[0].partition_cnt;
		}
		else
			c->topic_err = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
		rd_kafka_metadata_destroy(md);
	}
	/* never left behind: it would hold up the client's end */
	rd_kafka_topic_destroy(rkt);
}

static void
sg_call_watermarks(SgKafkaCall *c)
{
	int64_t		lo = -1,
				hi = -1;

	c->err = rd_kafka_query_watermark_offsets(c->rk, c->topic, c->partition, &lo, &hi, c->timeout_ms);
	c->lo = (int64) lo;
	c->hi = (int64) hi;
}

static void
sg_call_seek(SgKafkaCall *c)
{
	rd_kafka_error_t *error = rd_kafka_seek_partitions(c->rk, c->list, c->timeout_ms);

	c->err = error ? rd_kafka_error_code(error) : c->list->elems[0].err;
	if (error)
		rd_kafka_error_destroy(error);
}

/* rd_kafka_assign waits, without a timeout, for librdkafka's main thread */
static void
sg_call_assign(SgKafkaCall *c)
{
	c->err = rd_kafka_assign(c->rk, c->list);
}

static void
sg_call_assign_more(SgKafkaCall *c)
{
	c->error = rd_kafka_incremental_assign(c->rk, c->list);
}

static void
sg_call_init(SgKafkaCall *c)
{
	c->error = rd_kafka_init_transactions(c->rk, c->timeout_ms);
}

/* rd_kafka_begin_transaction waits, without a timeout, for librdkafka's main thread */
static void
sg_call_begin(SgKafkaCall *c)
{
	c->error = rd_kafka_begin_transaction(c->rk);
}

static void
sg_call_commit(SgKafkaCall *c)
{
	c->error = rd_kafka_commit_transaction(c->rk, c->timeout_ms);
}

static void *
sg_kafka_call_main(void *arg)
{
	SgKafkaCall *c = (SgKafkaCall *) arg;

	c->fn(c);
	pthread_mutex_lock(&c->lock);
	c->done = true;
	pthread_mutex_unlock(&c->lock);
	if (write(c->wake_fd, "1", 1) < 0)
		(void) 0;				/* the waiter also looks at done every 100 ms */
	return NULL;
}

static void
sg_kafka_call_free(SgKafkaCall *c)
{
	if (c->error)
		rd_kafka_error_destroy(c->error);
	if (c->list)
		rd_kafka_topic_partition_list_destroy(c->list);
	free(c->topic);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/*
 * A call of `fn` on `k`, not started yet, with its own copy of `topic`
 * (or NULL).  A call the backend gave up on and that has ended since is
 * reaped here; one still running makes the client unusable (every error
 * path closes it).
 */
static SgKafkaCall *
sg_kafka_call_new(SgKafka *k, SgKafkaCallFn fn, const char *topic)
{
	SgKafkaCall *c;

	if (k->call)
	{
		bool		done;

		pthread_mutex_lock(&k->call->lock);
		done = k->call->done;
		pthread_mutex_unlock(&k->call->lock);
		if (!done)
			elog(ERROR, "a Kafka call is still running on this client");
		sg_kafka_call_end(k->call);
		k->call = NULL;
	}
	c = malloc(sizeof(SgKafkaCall));
	if (c == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	memset(c, 0, sizeof(SgKafkaCall));
	pthread_mutex_init(&c->lock, NULL);
	c->rk = k->rk;
	c->fn = fn;
	c->wake_fd = k->pipe_fd[1];
	if (topic)
	{
		c->topic = strdup(topic);
		if (c->topic == NULL)
		{
			sg_kafka_call_free(c);
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
		}
	}
	return c;
}

/*
 * THE way to make a librdkafka call that may wait: `c` (sg_kafka_call_new,
 * its arguments set) runs on a thread of its own, all signals blocked,
 * with librdkafka's timeout `timeout_ms`, while the backend waits on its
 * latch and the handle's pipe (which the thread writes when done),
 * serving a producer's queue meanwhile and checking interrupts: a SIGTERM
 * ends the process, a cancel raises, at once.  At `give_up` (a deadline of
 * streamguard.remote_timeout, plus a second for librdkafka's own timeout
 * to fire first) the backend gives up with an error, whatever librdkafka
 * does.  Returns with `c` done (its results to read, then
 * sg_kafka_call_free); after an error the call belongs to the client,
 * whose destroy (KafkaClose's reaper) joins the thread first.
 */
static void
sg_kafka_call(SgKafka *k, SgKafkaCall *c, const char *what, int timeout_ms, TimestampTz give_up,
			  uint32 wait_event)
{
	sigset_t	all,
				old;
	int			rc;

	c->timeout_ms = Max(timeout_ms, 1);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&c->thread, NULL, sg_kafka_call_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		sg_kafka_call_free(c);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start a thread for a Kafka call: %s", strerror(rc))));
	}
	/* from here an ERROR leaves the call to KafkaClose */
	k->call = c;
	for (;;)
	{
		bool		done;

		sg_kafka_drain_pipe(k);
		/* a producer's delivery reports; a consumer's queue is KafkaPoll's */
		if (k->producer)
			(void) rd_kafka_poll(k->rk, 0);
		pthread_mutex_lock(&c->lock);
		done = c->done;
		pthread_mutex_unlock(&c->lock);
		if (done)
			break;
		if (!PostmasterIsAlive())
			proc_exit(1);
		if (GetCurrentTimestamp() >= give_up)
			KafkaRaise(k, RD_KAFKA_RESP_ERR__TIMED_OUT,
					   psprintf("%s: no answer within streamguard.remote_timeout (%d ms)", what, sg_remote_timeout_ms));
		sg_kafka_wait(k, give_up, wait_event);
	}
	pthread_join(c->thread, NULL);
	k->call = NULL;
}

/* a pause between two calls (a retry), on the latch */
static void
sg_kafka_pause(long ms)
{
	int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);

	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* milliseconds until `deadline` (at least 1) */
static int
sg_kafka_left_ms(TimestampTz deadline)
{
	int64		left = (deadline - GetCurrentTimestamp()) / 1000;

	return (int) Max(Min(left, INT_MAX), 1);
}

/*
 * The number of partitions of `topic`, from a metadata request; raises an
 * error when the topic does not exist or no broker answered before
 * `deadline`.  Each request waits up to SG_KAFKA_STEP_MS, so that another
 * broker may answer the next one.
 */
int
KafkaTopicPartitions(SgKafka *k, const char *topic, TimestampTz deadline)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);
	char	   *what = psprintf("metadata for topic \"%s\"", topic);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_resp_err_t err;
		rd_kafka_resp_err_t terr;
		int			n;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, sg_call_metadata, topic);
		sg_kafka_call(k, c, what,
					  Min(SG_KAFKA_STEP_MS, sg_kafka_left_ms(deadline)), give_up, PG_WAIT_EXTENSION);
		err = c->err;
		terr = c->topic_err;
		n = c->partitions;
		sg_kafka_call_free(c);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			if (n > 0)
				return n;
			/* a leader election in progress is retried; the rest is final */
			if (terr != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE && terr != RD_KAFKA_RESP_ERR_NO_ERROR)
				KafkaRaise(k, terr, psprintf("topic \"%s\"", topic));
		}
		if (GetCurrentTimestamp() >= deadline)
		{
			char		last[256];

			KafkaLastError(k, last, sizeof(last));
			KafkaRaise(k, err ? err : RD_KAFKA_RESP_ERR__TIMED_OUT,
					   psprintf("no metadata for topic \"%s\" within streamguard.remote_timeout (%d ms)%s%s",
								topic, sg_remote_timeout_ms, last[0] ? " (client: " : "", last[0] ? psprintf("%s)", last) : ""));
		}
		/* an answer that came at once (an error) is not asked again at once */
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
			sg_kafka_pause(50);
	}
}

/*
 * The end of a partition for a read_committed reader (its last stable
 * offset), asked of the broker, within `deadline`; its start in *start
 * when not NULL.  rd_kafka_query_watermark_offsets does not keep to its
 * timeout (it waits for the broker's answer up to socket.timeout.ms, and
 * retries): only sg_kafka_call bounds it.
 */
int64
KafkaPartitionEnd(SgKafka *k, const char *topic, int32 partition, TimestampTz deadline, int64 *start)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);
	char	   *what = psprintf("end of partition %d of topic \"%s\"", partition, topic);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_resp_err_t err;
		int64		lo,
					hi;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, sg_call_watermarks, topic);
		c->partition = partition;
		sg_kafka_call(k, c, what,
					  sg_kafka_left_ms(deadline), give_up, PG_WAIT_EXTENSION);
		err = c->err;
		lo = c->lo;
		hi = c->hi;
		sg_kafka_call_free(c);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			if (start)
				*start = lo;
			return hi;
		}
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT && err != RD_KAFKA_RESP_ERR__TRANSPORT &&
			err != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE && err != RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION)
			KafkaRaise(k, err, what);
		if (GetCurrentTimestamp() >= deadline)
			KafkaRaise(k, err, psprintf("no end offset for partition %d of topic \"%s\" within streamguard.remote_timeout (%d ms)",
										partition, topic, sg_remote_timeout_ms));
		sg_kafka_pause(50);
	}
}

/*
 * Where the consumer stands in each partition 0 .. n-1 (the offset after
 * the last message it returned, past transaction markers and aborted
 * messages a read_committed reader never sees), or -1 when unknown.
 */
void
KafkaPositions(SgKafka *k, const char *topic, int n, int64 *out)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	int			i;

	for (i = 0; i < n; i++)
	{
		rd_kafka_topic_partition_list_add(list, topic, i);
		out[i] = -1;
	}
	if (rd_kafka_position(k->rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR)
		for (i = 0; i < list->cnt; i++)
			if (list->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && list->elems[i].offset >= 0 &&
				list->elems[i].partition >= 0 && list->elems[i].partition < n)
				out[list->elems[i].partition] = list->elems[i].offset;
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * Commit `offsets` (partitions 0 .. n-1; negative: skipped) as the
 * consumer group's offsets, asynchronously, result ignored: a courtesy for
 * Kafka-side monitoring, never read back.
 */
void
KafkaCommitGroupOffsets(SgKafka *k, const char *topic, int n, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
	int			i;

	for (i = 0; i < n; i++)
		if (offsets[i] >= 0)
			rd_kafka_topic_partition_list_add(list, topic, i)->offset = offsets[i];
	if (list->cnt > 0)
		(void) rd_kafka_commit(k->rk, list, 1);
	rd_kafka_topic_partition_list_destroy(list);
}

/* the partition's high watermark as last seen in a fetch (no request) */
bool
KafkaWatermark(SgKafka *k, const char *topic, int32 partition, int64 *high)
{
	int64_t		lo,
				hi;

	if (rd_kafka_get_watermark_offsets(k->rk, topic, partition, &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		hi < 0)
		return false;
	*high = (int64) hi;
	return true;
}

/* a partition list of `topic` holding these partitions at these offsets */
static rd_kafka_topic_partition_list_t *
sg_start_list(const char *topic, const SgKafkaStart *starts, int n)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, topic, starts[i].partition)->offset = starts[i].offset;
	return list;
}

/*
 * Assign exactly these partitions at these offsets: what was fetched
 * ahead for an earlier assignment is dropped by librdkafka.
 */
void
KafkaAssign(SgKafka *k, const char *topic, SgKafkaStart *starts, int n)
{
	SgKafkaCall *c;
	rd_kafka_resp_err_t err;

	KafkaMessageDone(k);
	c = sg_kafka_call_new(k, sg_call_assign, NULL);
	c->list = sg_start_list(topic, starts, n);
	sg_kafka_call(k, c, psprintf("assigning the partitions of topic \"%s\"", topic), sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	err = c->err;
	sg_kafka_call_free(c);
	if (err)
		KafkaRaise(k, err, psprintf("assigning the partitions of topic \"%s\"", topic));
}

/*
 * Add these partitions, at these offsets, to the consumer's assignment,
 * leaving the partitions it holds as they are (partitions added to the
 * topic; see KafkaSeek for why the whole list is never assigned again).
 */
void
KafkaAssignMore(SgKafka *k, const char *topic, SgKafkaStart *starts, int n)
{
	SgKafkaCall *c;
	rd_kafka_error_t *error;

	KafkaMessageDone(k);
	c = sg_kafka_call_new(k, sg_call_assign_more, NULL);
	c->list = sg_start_list(topic, starts, n);
	sg_kafka_call(k, c, psprintf("adding partitions of topic \"%s\" to the assignment", topic), sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	error = c->error;
	c->error = NULL;
	sg_kafka_call_free(c);
	if (error)
		sg_kafka_raise_error(k, error, psprintf("adding partitions of topic \"%s\" to the assignment", topic));
}

/*
 * Move partitions that stay assigned to these offsets: a seek, never a new
 * assignment.  librdkafka 2.0.2 aborts the process on an assertion
 * (rd_kafka_assignment_partition_stopped: rktp->rktp_started) when a
 * partition is assigned again while its previous assignment is still being
 * stopped, which a consumer holding its partitions risked whenever it was
 * given the whole list again (stored positions that differ from its own,
 * partitions added to the topic).  Each seek
 * waits up to SG_KAFKA_STEP_MS for the fetcher to take the new offset
 * (after which nothing fetched for the old one is passed to us); one that
 * did not finish in that time is made again, up to `deadline`, with the
 * interrupts checked in between.
 */
void
KafkaSeek(SgKafka *k, const char *topic, SgKafkaStart *starts, int n, TimestampTz deadline)
{
	int			i;

	KafkaMessageDone(k);
	for (i = 0; i < n; i++)
	{
		char	   *what = psprintf("moving to offset %lld of partition %d of topic \"%s\"",
									(long long) starts[i].offset, (int) starts[i].partition, topic);

		for (;;)
		{
			SgKafkaCall *c;
			rd_kafka_resp_err_t err;

			sg_kafka_tick();
			c = sg_kafka_call_new(k, sg_call_seek, NULL);
			c->list = sg_start_list(topic, &starts[i], 1);
			sg_kafka_call(k, c, what,
						  Min(SG_KAFKA_STEP_MS, sg_kafka_left_ms(deadline)),
						  TimestampTzPlusMilliseconds(deadline, 1000), PG_WAIT_EXTENSION);
			err = c->err;
			sg_kafka_call_free(c);
			if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
				break;
			if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
				KafkaRaise(k, err, what);
			if (GetCurrentTimestamp() >= deadline)
				KafkaRaise(k, err, psprintf("moving to offset %lld of partition %d of topic \"%s\" within streamguard.remote_timeout (%d ms)",
											(long long) starts[i].offset, (int) starts[i].partition, topic,
											sg_remote_timeout_ms));
		}
	}
}

static void
sg_kafka_drain_pipe(SgKafka *k)
{
	char		buf[64];

	while (read(k->pipe_fd[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * The next message or consumer error, waiting at most `timeout_ms` (0: do
 * not wait) on the queue's pipe and our latch; NULL when none came.  The
 * message stays the handle's until KafkaMessageDone or the next call.
 */
rd_kafka_message_t *
KafkaPoll(SgKafka *k, long timeout_ms, uint32 wait_event)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	KafkaMessageDone(k);
	for (;;)
	{
		rd_kafka_message_t *m;
		long		left;
		int			rc;

		sg_kafka_drain_pipe(k);
		m = rd_kafka_consumer_poll(k->rk, 0);
		if (m != NULL)
		{
			k->current = m;
			return m;
		}
		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
		if (left <= 0)
			return NULL;
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   k->pipe_fd[0], left, wait_event);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

void
KafkaMessageDone(SgKafka *k)
{
	if (k->current)
		rd_kafka_message_destroy(k->current);
	k->current = NULL;
}

/* ------------------------------------------------------------ producers */

/*
 * A producer for `server` as `userid`: idempotent always (no duplicates
 * or reordering from its own retries), transactional with
 * `transactional_id` when not NULL.  Messages not acknowledged within
 * streamguard.remote_timeout fail (a delivery error, or an abortable
 * transaction error).
 */
SgKafka *
KafkaProducerOpen(const char *server, Oid userid, const char *transactional_id)
{
	const char *fixed[16];
	int			n = 0;
	int			msg_timeout = Max(sg_remote_timeout_ms, 1000);

	fixed[n++] = "enable.idempotence";
	fixed[n++] = "true";
	fixed[n++] = "acks";
	fixed[n++] = "all";
	/* a batch is produced at once and then waited for: no lingering */
	fixed[n++] = "linger.ms";
	fixed[n++] = "0";
	fixed[n++] = "message.timeout.ms";
	fixed[n++] = psprintf("%d", msg_timeout);
	if (transactional_id)
	{
		fixed[n++] = "transactional.id";
		fixed[n++] = transactional_id;
		fixed[n++] = "transaction.timeout.ms";
		fixed[n++] = psprintf("%d", Max(msg_timeout, 60000));
	}
	fixed[n] = NULL;
	return sg_kafka_open(server, userid, RD_KAFKA_PRODUCER, NULL, fixed);
}

/* serve the producer's main queue: delivery reports, logs, errors */
static void
sg_kafka_serve(SgKafka *k)
{
	sg_kafka_drain_pipe(k);
	(void) rd_kafka_poll(k->rk, 0);
}

/* wait for the producer's queue, the latch, or `deadline` (at most 100 ms) */
static void
sg_kafka_wait(SgKafka *k, TimestampTz deadline, uint32 wait_event)
{
	long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
	int			rc;

	if (left <= 0)
		return;
	rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   k->pipe_fd[0], Min(left, 100), wait_event);
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* raise a transactional API error: its code, its text, what we were doing */
static void
sg_kafka_raise_error(SgKafka *k, rd_kafka_error_t *error, const char *what)
{
	rd_kafka_resp_err_t err = rd_kafka_error_code(error);
	char	   *text = pstrdup(rd_kafka_error_string(error));
	bool		fatal = rd_kafka_error_is_fatal(error);
	char		last[256];

	rd_kafka_error_destroy(error);
	KafkaLastError(k, last, sizeof(last));
	ereport(ERROR,
			(errcode(sg_kafka_sqlstate(err)),
			 errmsg("Kafka server \"%s\": %s: %s (%s)", k->server, what, text, rd_kafka_err2name(err)),
			 errdetail("Kafka error %s (%d)%s.%s%s", rd_kafka_err2name(err), (int) err,
					   fatal ? ", fatal for this producer" : "",
					   last[0] ? " Last client report: " : "", last)));
}

/*
 * A transactional call (on its thread: sg_kafka_call), made again while it
 * fails with an error that says so (retriable, a timeout) until
 * `deadline`; any other error raised with its code.
 */
static void
sg_kafka_txn_call(SgKafka *k, SgKafkaCallFn fn, const char *what, TimestampTz deadline)
{
	TimestampTz give_up = TimestampTzPlusMilliseconds(deadline, 1000);

	for (;;)
	{
		SgKafkaCall *c;
		rd_kafka_error_t *error;

		sg_kafka_tick();
		c = sg_kafka_call_new(k, fn, NULL);
		sg_kafka_call(k, c, what, sg_kafka_left_ms(deadline), give_up, PG_WAIT_EXTENSION);
		error = c->error;
		c->error = NULL;
		sg_kafka_call_free(c);
		if (error == NULL)
			return;
		if ((rd_kafka_error_is_retriable(error) || rd_kafka_error_code(error) == RD_KAFKA_RESP_ERR__TIMED_OUT) &&
			!rd_kafka_error_is_fatal(error) && !rd_kafka_error_txn_requires_abort(error) &&
			GetCurrentTimestamp() < deadline)
		{
			rd_kafka_error_destroy(error);
			sg_kafka_pause(50);
			continue;
		}
		sg_kafka_raise_error(k, error, what);
	}
}

/*
 * init_transactions: the producer gets its id and a new epoch from the
 * transaction coordinator, which aborts what an earlier producer with the
 * same transactional.id left open and fences that producer
 * (PRODUCER_FENCED) from now on.
 */
void
KafkaTxnInit(SgKafka *k, TimestampTz deadline)
{
	sg_kafka_txn_call(k, sg_call_init, "initializing the transactional producer", deadline);
}

void
KafkaTxnBegin(SgKafka *k)
{
	SgKafkaCall *c = sg_kafka_call_new(k, sg_call_begin, NULL);
	rd_kafka_error_t *error;

	sg_kafka_call(k, c, "beginning a transaction", sg_remote_timeout_ms,
				  TimestampTzPlusMilliseconds(KafkaDeadline(), 1000), PG_WAIT_EXTENSION);
	error = c->error;
	c->error = NULL;
	sg_kafka_call_free(c);
	if (error)
		sg_kafka_raise_error(k, error, "beginning a transaction");
	KafkaDeliveryReset(k);
}

/* flush and commit the transaction: every message of it, or none */
void
KafkaTxnCommit(SgKafka *k, TimestampTz deadline)
{
	sg_kafka_txn_call(k, sg_call_commit, "committing the transaction", deadline);
}

/* forget the delivery reports counted so far */
void
KafkaDeliveryReset(SgKafka *k)
{
	pthread_mutex_lock(&k->report->lock);
	k->report->delivered = k->report->failed = 0;
	k->report->dr_err = RD_KAFKA_RESP_ERR_NO_ERROR;
	pthread_mutex_unlock(&k->report->lock);
}

static rd_kafka_topic_t *
sg_kafka_topic(SgKafka *k, const char *topic)
{
	int			i;
	rd_kafka_topic_t *rkt;

	for (i = 0; i < k->ntopics; i++)
		if (strcmp(rd_kafka_topic_name(k->topics[i]), topic) == 0)
			return k->topics[i];
	if (k->ntopics == SG_KAFKA_MAX_TOPICS)
		elog(ERROR, "too many Kafka topics for one producer");
	rkt = rd_kafka_topic_new(k->rk, topic, NULL);
	if (rkt == NULL)
		KafkaRaise(k, rd_kafka_last_error(), psprintf("topic \"%s\"", topic));
	k->topics[k->ntopics++] = rkt;
	return rkt;
}

/*
 * Queue one message (copied): partition -1 lets the partitioner choose
 * from the key.  `headers` (or NULL) belong to the message from here on.
 * A full queue is waited out (delivery reports served meanwhile), up to
 * streamguard.remote_timeout.
 */
void
KafkaProduce(SgKafka *k, const char *topic, int32 partition, const char *key, size_t key_len,
			 const char *value, size_t value_len, rd_kafka_headers_t *headers, uint32 wait_event)
{
	rd_kafka_topic_t *rkt;
	TimestampTz deadline = 0;

	PG_TRY();
	{
		rkt = sg_kafka_topic(k, topic);
	}
	PG_CATCH();
	{
		if (headers)
			rd_kafka_headers_destroy(headers);
		PG_RE_THROW();
	}
	PG_END_TRY();
	for (;;)
	{
		rd_kafka_resp_err_t err;

		err = rd_kafka_producev(k->rk,
								RD_KAFKA_V_RKT(rkt),
								RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
								RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
								RD_KAFKA_V_KEY(key, key ? key_len : 0),
								RD_KAFKA_V_VALUE((void *) value, value ? value_len : 0),
								RD_KAFKA_V_HEADERS(headers),
								RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			return;
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			KafkaRaise(k, err, psprintf("producing to partition %d of topic \"%s\"", (int) partition, topic));
		}
		if (deadline == 0)
			deadline = KafkaDeadline();
		if (GetCurrentTimestamp() >= deadline)
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			KafkaRaise(k, err, psprintf("producing to topic \"%s\": the queue stayed full for streamguard.remote_timeout (%d ms)",
										topic, sg_remote_timeout_ms));
		}
		sg_kafka_serve(k);
		PG_TRY();
		{
			sg_kafka_wait(k, deadline, wait_event);
		}
		PG_CATCH();
		{
			if (headers)
				rd_kafka_headers_destroy(headers);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
}

/*
 * Wait until every message queued is acknowledged or failed (bounded:
 * message.timeout.ms is streamguard.remote_timeout); raise the first
 * delivery error since KafkaDeliveryReset.  Returns the messages
 * acknowledged since then.
 */
uint64
KafkaFlush(SgKafka *k, uint32 wait_event)
{
	/*
	 * message.timeout.ms, plus time for the last reports to be served
	 * (librdkafka looks for messages timed out once a second)
	 */
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   (int64) Max(sg_remote_timeout_ms, 1000) + 2000);
	uint64		failed,
				delivered;
	rd_kafka_resp_err_t err;

	for (;;)
	{
		sg_kafka_tick();
		sg_kafka_serve(k);
		if (rd_kafka_outq_len(k->rk) == 0)
			break;
		if (GetCurrentTimestamp() >= deadline)
			KafkaRaise(k, RD_KAFKA_RESP_ERR__TIMED_OUT, "waiting for the acknowledgements of the batch's messages");
		sg_kafka_wait(k, deadline, wait_event);
	}
	pthread_mutex_lock(&k->report->lock);
	failed = k->report->failed;
	delivered = k->report->delivered;
	err = k->report->dr_err;
	pthread_mutex_unlock(&k->report->lock);
	if (failed > 0)
		KafkaRaise(k, err, psprintf("%llu of the batch's messages could not be delivered",
									(unsigned long long) failed));
	return delivered;
}
