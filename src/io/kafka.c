/*-------------------------------------------------------------------------
 *
 * kafka.c
 *		Kafka clients through librdkafka: the streamguard_kafka
 *		foreign-data wrapper's option validator, consumers and producers
 *		built from a foreign server and a user mapping, and interruptible,
 *		time-bounded waits on them.
 *
 * This file: the option list and its validator, the callbacks
 * librdkafka's threads report through, a client's configuration and
 * open (sg_kafka_open, for KafkaConsumerOpen and KafkaProducerOpen), and
 * KafkaClose with its reaper thread.  The rest is in kafka_call.c (the
 * calls that may wait, on a thread; the waits; errors), kafka_consume.c
 * and kafka_produce.c; what they share is in kafka_int.h.  Lock rule of
 * all four: report->lock and an SgKafkaCall's lock are never held across
 * a PostgreSQL call.
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
#include "io/kafka_int.h"

PG_FUNCTION_INFO_V1(sg_kafka_validator);

#define SG_KAFKA_WRAPPER "streamguard_kafka"

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
 * A configuration holding `options` (the server's, then the user
 * mapping's) and our defaults for the properties they do not set; a
 * producer skips the consumer properties.  `group_id` is a consumer's
 * group when the options name none.
 */
static rd_kafka_conf_t *
sg_kafka_conf_from_options(const char *server, List *options, rd_kafka_type_t type,
						   const char *group_id)
{
	rd_kafka_conf_t *conf;
	ListCell   *lc;
	bool		has_group = false;
	bool		has_bootstrap = false;
	bool		has_backoff = false;
	bool		has_socket_timeout = false;

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
	return conf;
}

/*
 * The pipe librdkafka writes into when the queue turns non-empty, its two
 * descriptors counted with AcquireExternalFD.  On an error `conf` is
 * destroyed and `k` closed.
 */
static void
sg_kafka_open_pipe(SgKafka *k, rd_kafka_conf_t *conf, const char *server)
{
	int			nfd;

	for (nfd = 0; nfd < 2; nfd++)
		if (!AcquireExternalFD())
			break;
	if (nfd < 2)
	{
		while (nfd-- > 0)
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
}

/*
 * A client of `type` for `server` as `userid` (USAGE on the server
 * checked, its user mapping's credentials), in a transaction, with the
 * properties `fixed` (name, value pairs, NULL-terminated) set after the
 * server's options: what the guarantees rest on.  `group_id` is used when
 * the server sets none.  The queue we wait on is the consumer queue of a
 * consumer, the main queue (delivery reports, logs, errors) of a producer.
 */
SgKafka *
sg_kafka_open(const char *server, Oid userid, rd_kafka_type_t type, const char *group_id,
			  const char *const *fixed)
{
	ForeignServer *fs = GetForeignServerByName(server, false);
	AclResult	aclresult;
	rd_kafka_conf_t *conf;
	List	   *options;
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
	conf = sg_kafka_conf_from_options(server, options, type, group_id);
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

	sg_kafka_open_pipe(k, conf, server);

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

void
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
void
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
void
sg_kafka_tick(void)
{
	CHECK_FOR_INTERRUPTS();
	if (!PostmasterIsAlive())
		proc_exit(1);
}

