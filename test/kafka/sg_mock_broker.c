/*-------------------------------------------------------------------------
 *
 * sg_mock_broker.c
 *		A Kafka test broker for the TAP tests: librdkafka's in-process mock
 *		cluster, on loopback, driven by commands on stdin.
 *
 * Built by "make kafka-tools" (never installed).  Usage:
 *
 *	sg_mock_broker [--port PORT] [NBROKERS]
 *
 * NBROKERS mock brokers (default 1) listen on 127.0.0.1 at ports the system
 * picks.  With --port, a bootstrap listener on 127.0.0.1:PORT also relays
 * each connection to the first broker, so that clients (kcat, a server's
 * bootstrap_servers) can be given a fixed address; the brokers' own
 * addresses, which clients learn from the metadata, stay the random ones.
 * On start it prints "bootstrap <host:port,...>" (with --port, that fixed
 * address) and then answers each command line with one line, "ok [...]" or
 * "error <text>".  It stays up until killed, "quit", or the end of its
 * standard input.
 *
 * Commands (a key "-" means no key; VALUE is the rest of the line, raw):
 *	topic NAME NPARTS				create a topic
 *	produce TOPIC PART KEY VALUE	one message, acknowledged before "ok"
 *	produce_header TOPIC PART KEY HNAME HVALUE VALUE
 *									the same with one header
 *	produce_json TOPIC N [FROM]		N keyed JSON messages {"i":i} for
 *									i = FROM .. FROM+N-1 (FROM default 0),
 *									key "k<i>", partition i % NPARTS
 *	produce_big TOPIC PART BYTES	one JSON message {"big":"xxx..."} of
 *									about BYTES bytes
 *	txn TOPIC PART N commit|abort	N messages {"txn":i} in one
 *									transaction, committed or aborted
 *	watermarks TOPIC PART			"ok <low> <high>"
 *	dump TOPIC FILE					the audit consumer: every message of
 *									every partition of TOPIC up to its
 *									end, read_committed, into FILE, one
 *									line each: partition TAB offset TAB
 *									key TAB value TAB headers (name=value,
 *									comma-separated; "\N" for none);
 *									"ok <messages>"
 *	committed GROUP TOPIC NPARTS	the group's committed offsets,
 *									"ok <p0> <p1> ..." (-1001: none)
 *	down BROKER / up BROKER			a mock broker stops / resumes
 *									answering (connections are refused)
 *	rtt BROKER MS					a mock broker's round-trip delay
 *	error APIKEY CODE COUNT			the next COUNT requests of that API
 *									(by number) fail with error CODE
 *	delay BROKER APIKEY MS			the broker's answer to the next request
 *									of that API is held back MS ms (and
 *									every later answer on that connection
 *									behind it): a broker that hangs at
 *									exactly that request
 *	pending BROKER APIKEY			"ok <n>": delays of that API not yet
 *									met by a request (0: it arrived)
 *	topic_error TOPIC CODE			the topic's metadata carries CODE
 *	quit
 *
 * Every connection the brokers accept has TCP_NODELAY set, as a real
 * broker's has (see nodelay() below).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static rd_kafka_t *host;
static rd_kafka_mock_cluster_t *mc;
static char bootstraps[1024];
static rd_kafka_t *producer;
static rd_kafka_t *txn_producer;

/*
 * The mock brokers' connections with TCP_NODELAY, as a Kafka broker sets it
 * on every connection it accepts.  Without it a client with several
 * requests in flight on one connection (a produce request per partition,
 * AddPartitionsToTxn, EndTxn) waits, between two answers, for its kernel's
 * delayed acknowledgement (up to 40 ms on Linux): Nagle's algorithm holds
 * the broker's next small answer until the previous one is acknowledged.
 * librdkafka's mock cluster accepts its connections itself, with no option
 * for this, so accept() and accept4() are wrapped here: an executable's
 * exported definitions come before libc's for the libraries' calls too.
 */
static void
nodelay(int fd)
{
	int			one = 1;

	if (fd >= 0)
		(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

__attribute__((visibility("default"))) int
accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	static int	(*real) (int, struct sockaddr *, socklen_t *);
	int			s;

	if (real == NULL)
		real = (int (*) (int, struct sockaddr *, socklen_t *)) dlsym(RTLD_NEXT, "accept");
	s = real(fd, addr, len);
	nodelay(s);
	return s;
}

__attribute__((visibility("default"))) int
accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	static int	(*real) (int, struct sockaddr *, socklen_t *, int);
	int			s;

	if (real == NULL)
		real = (int (*) (int, struct sockaddr *, socklen_t *, int)) dlsym(RTLD_NEXT, "accept4");
	s = real(fd, addr, len, flags);
	nodelay(s);
	return s;
}

static void
quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void) rk;
	(void) level;
	(void) fac;
	(void) buf;
}

static rd_kafka_t *
make_producer(const char *txn_id)
{
	char		err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;

	rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, err, sizeof(err));
	rd_kafka_conf_set(conf, "message.max.bytes", "20000000", err, sizeof(err));
	rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err));
	rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err));
	if (txn_id)
		rd_kafka_conf_set(conf, "transactional.id", txn_id, err, sizeof(err));
	rd_kafka_conf_set_log_cb(conf, quiet_log);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk)
	{
		fprintf(stderr, "sg_mock_broker: producer: %s\n", err);
		exit(1);
	}
	return rk;
}

/* produce one message and wait for its acknowledgement */
static int
produce_hdr(rd_kafka_t *rk, const char *topic, int part, const char *key,
			const char *value, size_t vlen, const char *hname, const char *hvalue,
			char *why, size_t whylen)
{
	rd_kafka_resp_err_t err;
	rd_kafka_headers_t *hdrs = NULL;

	if (hname)
	{
		hdrs = rd_kafka_headers_new(1);
		rd_kafka_header_add(hdrs, hname, -1, hvalue, -1);
	}
	err = rd_kafka_producev(rk,
							RD_KAFKA_V_TOPIC(topic),
							RD_KAFKA_V_PARTITION(part),
							RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
							RD_KAFKA_V_VALUE((void *) value, vlen),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_HEADERS(hdrs),
							RD_KAFKA_V_END);
	if (err && hdrs)
		rd_kafka_headers_destroy(hdrs);
	if (err)
	{
		snprintf(why, whylen, "%s", rd_kafka_err2name(err));
		return -1;
	}
	return 0;
}

static int
produce_one(rd_kafka_t *rk, const char *topic, int part, const char *key,
			const char *value, size_t vlen, char *why, size_t whylen)
{
	return produce_hdr(rk, topic, part, key, value, vlen, NULL, NULL, why, whylen);
}

static int
flush_all(rd_kafka_t *rk, char *why, size_t whylen)
{
	rd_kafka_resp_err_t err = rd_kafka_flush(rk, 30000);

	if (err)
	{
		snprintf(why, whylen, "flush: %s", rd_kafka_err2name(err));
		return -1;
	}
	return 0;
}

static int
topic_partitions(const char *topic)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *t = rd_kafka_topic_new(producer, topic, NULL);
	int			n = -1;

	if (rd_kafka_metadata(producer, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (md->topic_cnt == 1 && md->topics[0].err == 0)
			n = md->topics[0].partition_cnt;
		rd_kafka_metadata_destroy(md);
	}
	rd_kafka_topic_destroy(t);
	return n;
}

/* a field of a dump line: tabs, newlines and backslashes escaped */
static void
dump_field(FILE *f, const void *data, size_t len)
{
	const unsigned char *c = data;
	size_t		i;

	if (data == NULL)
	{
		fputs("\\N", f);
		return;
	}
	for (i = 0; i < len; i++)
	{
		if (c[i] == '\t')
			fputs("\\t", f);
		else if (c[i] == '\n')
			fputs("\\n", f);
		else if (c[i] == '\\')
			fputs("\\\\", f);
		else
			fputc(c[i], f);
	}
}

/*
 * The audit consumer: a read_committed reader of every partition of
 * `topic` from its start to its end (as a read_committed reader sees it
 * now), written to `path`.  Returns the messages, or -1 (why says why).
 */
static long
dump_topic(const char *topic, const char *path, char *why, size_t whylen)
{
	char		err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *list;
	int			n = topic_partitions(topic);
	int64_t    *end;
	int			i,
				left = 0;
	long		count = 0;
	FILE	   *f;
	time_t		until = time(NULL) + 60;

	if (n <= 0)
	{
		snprintf(why, whylen, "no metadata for %s", topic);
		return -1;
	}
	rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, err, sizeof(err));
	rd_kafka_conf_set(conf, "group.id", "sg-audit", err, sizeof(err));
	rd_kafka_conf_set(conf, "isolation.level", "read_committed", err, sizeof(err));
	rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
	rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err));
	rd_kafka_conf_set_log_cb(conf, quiet_log);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!rk)
	{
		snprintf(why, whylen, "consumer: %s", err);
		return -1;
	}
	end = calloc(n, sizeof(int64_t));
	list = rd_kafka_topic_partition_list_new(n);
	for (i = 0; i < n; i++)
	{
		int64_t		lo;

		if (rd_kafka_query_watermark_offsets(rk, topic, i, &lo, &end[i], 10000) != 0)
		{
			snprintf(why, whylen, "watermarks of partition %d", i);
			rd_kafka_destroy(rk);
			free(end);
			return -1;
		}
		rd_kafka_topic_partition_list_add(list, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
		if (end[i] > lo)
			left++;
		else
			end[i] = -1;		/* empty: nothing to wait for */
	}
	rd_kafka_assign(rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	f = fopen(path, "w");
	if (f == NULL)
	{
		snprintf(why, whylen, "cannot write %s", path);
		rd_kafka_destroy(rk);
		free(end);
		return -1;
	}
	while (left > 0 && time(NULL) < until)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
		rd_kafka_headers_t *hdrs;

		if (m == NULL)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			if (m->partition >= 0 && m->partition < n && end[m->partition] >= 0 && m->offset >= end[m->partition])
			{
				end[m->partition] = -1;
				left--;
			}
			rd_kafka_message_destroy(m);
			continue;
		}
		if (m->err)
		{
			rd_kafka_message_destroy(m);
			continue;
		}
		fprintf(f, "%d\t%lld\t", (int) m->partition, (long long) m->offset);
		dump_field(f, m->key, m->key_len);
		fputc('\t', f);
		dump_field(f, m->payload, m->len);
		fputc('\t', f);
		if (rd_kafka_message_headers(m, &hdrs) == 0 && rd_kafka_header_cnt(hdrs) > 0)
		{
			const char *hn;
			const void *hv;
			size_t		hl;
			size_t		h;

			for (h = 0; rd_kafka_header_get_all(hdrs, h, &hn, &hv, &hl) == 0; h++)
			{
				if (h > 0)
					fputc(',', f);
				dump_field(f, hn, strlen(hn));
				fputc('=', f);
				dump_field(f, hv, hl);
			}
		}
		else
			fputs("\\N", f);
		fputc('\n', f);
		count++;
		if (m->offset + 1 >= end[m->partition] && end[m->partition] >= 0)
		{
			end[m->partition] = -1;
			left--;
		}
		rd_kafka_message_destroy(m);
	}
	fclose(f);
	rd_kafka_destroy(rk);
	free(end);
	if (left > 0)
	{
		snprintf(why, whylen, "%d partitions not read to their end within 60 s", left);
		return -1;
	}
	return count;
}

static void
command(char *line)
{
	char		why[512] = "";
	char	   *cmd = strtok(line, " ");

	if (cmd == NULL)
	{
		printf("error empty command\n");
		return;
	}
	if (strcmp(cmd, "topic") == 0)
	{
		char	   *name = strtok(NULL, " ");
		char	   *n = strtok(NULL, " ");
		rd_kafka_resp_err_t err;

		if (!name || !n)
		{
			printf("error usage: topic NAME NPARTS\n");
			return;
		}
		err = rd_kafka_mock_topic_create(mc, name, atoi(n), 1);
		if (err)
			printf("error %s\n", rd_kafka_err2name(err));
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "produce") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *part = strtok(NULL, " ");
		char	   *key = strtok(NULL, " ");
		char	   *value = strtok(NULL, "");

		if (!topic || !part || !key)
		{
			printf("error usage: produce TOPIC PART KEY VALUE\n");
			return;
		}
		if (strcmp(key, "-") == 0)
			key = NULL;
		if (produce_one(producer, topic, atoi(part), key, value, value ? strlen(value) : 0, why, sizeof(why)) ||
			flush_all(producer, why, sizeof(why)))
			printf("error %s\n", why);
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "produce_header") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *part = strtok(NULL, " ");
		char	   *key = strtok(NULL, " ");
		char	   *hname = strtok(NULL, " ");
		char	   *hvalue = strtok(NULL, " ");
		char	   *value = strtok(NULL, "");

		if (!topic || !part || !key || !hname || !hvalue)
		{
			printf("error usage: produce_header TOPIC PART KEY HNAME HVALUE VALUE\n");
			return;
		}
		if (strcmp(key, "-") == 0)
			key = NULL;
		if (produce_hdr(producer, topic, atoi(part), key, value, value ? strlen(value) : 0,
						hname, hvalue, why, sizeof(why)) ||
			flush_all(producer, why, sizeof(why)))
			printf("error %s\n", why);
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "produce_json") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *n = strtok(NULL, " ");
		char	   *from = strtok(NULL, " ");
		long		i,
					start = from ? atol(from) : 0;
		int			nparts;

		if (!topic || !n)
		{
			printf("error usage: produce_json TOPIC N [FROM]\n");
			return;
		}
		nparts = topic_partitions(topic);
		if (nparts <= 0)
		{
			printf("error unknown topic\n");
			return;
		}
		for (i = start; i < start + atol(n); i++)
		{
			char		key[32],
						value[64];

			snprintf(key, sizeof(key), "k%ld", i);
			snprintf(value, sizeof(value), "{\"i\": %ld}", i);
			while (produce_one(producer, topic, (int) (i % nparts), key, value, strlen(value), why, sizeof(why)))
			{
				if (strcmp(why, "_QUEUE_FULL") != 0)
					break;
				rd_kafka_poll(producer, 100);
				why[0] = '\0';
			}
			if (why[0])
				break;
		}
		if (why[0] || flush_all(producer, why, sizeof(why)))
			printf("error %s\n", why);
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "produce_big") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *part = strtok(NULL, " ");
		char	   *bytes = strtok(NULL, " ");
		long		len;
		char	   *v;

		if (!topic || !part || !bytes || (len = atol(bytes)) < 16)
		{
			printf("error usage: produce_big TOPIC PART BYTES\n");
			return;
		}
		v = malloc(len + 1);
		memcpy(v, "{\"big\":\"", 8);
		memset(v + 8, 'x', len - 10);
		memcpy(v + len - 2, "\"}", 2);
		v[len] = '\0';
		if (produce_one(producer, topic, atoi(part), "big", v, len, why, sizeof(why)) ||
			flush_all(producer, why, sizeof(why)))
			printf("error %s\n", why);
		else
			printf("ok\n");
		free(v);
	}
	else if (strcmp(cmd, "txn") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *part = strtok(NULL, " ");
		char	   *n = strtok(NULL, " ");
		char	   *how = strtok(NULL, " ");
		rd_kafka_error_t *e;
		long		i;

		if (!topic || !part || !n || !how)
		{
			printf("error usage: txn TOPIC PART N commit|abort\n");
			return;
		}
		if (txn_producer == NULL)
		{
			txn_producer = make_producer("sg-mock-broker-txn");
			if ((e = rd_kafka_init_transactions(txn_producer, 30000)))
			{
				printf("error init_transactions: %s\n", rd_kafka_error_string(e));
				rd_kafka_error_destroy(e);
				rd_kafka_destroy(txn_producer);
				txn_producer = NULL;
				return;
			}
		}
		if ((e = rd_kafka_begin_transaction(txn_producer)))
		{
			printf("error begin_transaction: %s\n", rd_kafka_error_string(e));
			rd_kafka_error_destroy(e);
			return;
		}
		for (i = 0; i < atol(n); i++)
		{
			char		value[64];

			snprintf(value, sizeof(value), "{\"txn\": %ld, \"how\": \"%s\"}", i, how);
			if (produce_one(txn_producer, topic, atoi(part), "txn", value, strlen(value), why, sizeof(why)))
				break;
		}
		/* on the broker's log before the end of the transaction */
		if (!why[0])
			(void) flush_all(txn_producer, why, sizeof(why));
		if (why[0])
			e = rd_kafka_abort_transaction(txn_producer, 30000);
		else if (strcmp(how, "commit") == 0)
			e = rd_kafka_commit_transaction(txn_producer, 30000);
		else
			e = rd_kafka_abort_transaction(txn_producer, 30000);
		if (why[0])
			printf("error %s\n", why);
		else if (e)
			printf("error %s\n", rd_kafka_error_string(e));
		else
			printf("ok\n");
		if (e)
			rd_kafka_error_destroy(e);
	}
	else if (strcmp(cmd, "watermarks") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *part = strtok(NULL, " ");
		int64_t		lo,
					hi;
		rd_kafka_resp_err_t err;

		if (!topic || !part)
		{
			printf("error usage: watermarks TOPIC PART\n");
			return;
		}
		err = rd_kafka_query_watermark_offsets(producer, topic, atoi(part), &lo, &hi, 10000);
		if (err)
			printf("error %s\n", rd_kafka_err2name(err));
		else
			printf("ok %lld %lld\n", (long long) lo, (long long) hi);
	}
	else if (strcmp(cmd, "dump") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *path = strtok(NULL, " ");
		long		n;

		if (!topic || !path)
		{
			printf("error usage: dump TOPIC FILE\n");
			return;
		}
		n = dump_topic(topic, path, why, sizeof(why));
		if (n < 0)
			printf("error %s\n", why);
		else
			printf("ok %ld\n", n);
	}
	else if (strcmp(cmd, "committed") == 0)
	{
		char	   *group = strtok(NULL, " ");
		char	   *topic = strtok(NULL, " ");
		char	   *n = strtok(NULL, " ");
		char		err[512];
		rd_kafka_conf_t *conf;
		rd_kafka_t *rk;
		rd_kafka_topic_partition_list_t *list;
		rd_kafka_resp_err_t e;
		int			i;

		if (!group || !topic || !n)
		{
			printf("error usage: committed GROUP TOPIC NPARTS\n");
			return;
		}
		conf = rd_kafka_conf_new();
		rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, err, sizeof(err));
		rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err));
		rd_kafka_conf_set_log_cb(conf, quiet_log);
		rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
		list = rd_kafka_topic_partition_list_new(atoi(n));
		for (i = 0; i < atoi(n); i++)
			rd_kafka_topic_partition_list_add(list, topic, i);
		e = rd_kafka_committed(rk, list, 10000);
		if (e)
			printf("error %s\n", rd_kafka_err2name(e));
		else
		{
			printf("ok");
			for (i = 0; i < list->cnt; i++)
				printf(" %lld", (long long) list->elems[i].offset);
			printf("\n");
		}
		rd_kafka_topic_partition_list_destroy(list);
		rd_kafka_destroy(rk);
	}
	else if (strcmp(cmd, "down") == 0 || strcmp(cmd, "up") == 0)
	{
		char	   *b = strtok(NULL, " ");
		rd_kafka_resp_err_t err;

		if (!b)
		{
			printf("error usage: %s BROKER\n", cmd);
			return;
		}
		err = cmd[0] == 'd' ? rd_kafka_mock_broker_set_down(mc, atoi(b)) :
			rd_kafka_mock_broker_set_up(mc, atoi(b));
		if (err)
			printf("error %s\n", rd_kafka_err2name(err));
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "rtt") == 0)
	{
		char	   *b = strtok(NULL, " ");
		char	   *ms = strtok(NULL, " ");

		if (!b || !ms)
		{
			printf("error usage: rtt BROKER MS\n");
			return;
		}
		rd_kafka_mock_broker_set_rtt(mc, atoi(b), atoi(ms));
		printf("ok\n");
	}
	else if (strcmp(cmd, "error") == 0)
	{
		char	   *api = strtok(NULL, " ");
		char	   *code = strtok(NULL, " ");
		char	   *cnt = strtok(NULL, " ");
		int			i,
					c;

		if (!api || !code || !cnt)
		{
			printf("error usage: error APIKEY CODE COUNT\n");
			return;
		}
		c = atoi(cnt);
		for (i = 0; i < c; i++)
			rd_kafka_mock_push_request_errors(mc, atoi(api), 1, (rd_kafka_resp_err_t) atoi(code));
		printf("ok\n");
	}
	else if (strcmp(cmd, "delay") == 0)
	{
		char	   *b = strtok(NULL, " ");
		char	   *api = strtok(NULL, " ");
		char	   *ms = strtok(NULL, " ");
		rd_kafka_resp_err_t err;

		if (!b || !api || !ms)
		{
			printf("error usage: delay BROKER APIKEY MS\n");
			return;
		}
		err = rd_kafka_mock_broker_push_request_error_rtts(mc, atoi(b), (int16_t) atoi(api), 1,
														   RD_KAFKA_RESP_ERR_NO_ERROR, atoi(ms));
		if (err)
			printf("error %s\n", rd_kafka_err2name(err));
		else
			printf("ok\n");
	}
	else if (strcmp(cmd, "pending") == 0)
	{
		char	   *b = strtok(NULL, " ");
		char	   *api = strtok(NULL, " ");
		size_t		cnt = 0;
		rd_kafka_resp_err_t err;

		if (!b || !api)
		{
			printf("error usage: pending BROKER APIKEY\n");
			return;
		}
		err = rd_kafka_mock_broker_error_stack_cnt(mc, atoi(b), (int16_t) atoi(api), &cnt);
		if (err)
			printf("error %s\n", rd_kafka_err2name(err));
		else
			printf("ok %zu\n", cnt);
	}
	else if (strcmp(cmd, "topic_error") == 0)
	{
		char	   *topic = strtok(NULL, " ");
		char	   *code = strtok(NULL, " ");

		if (!topic || !code)
		{
			printf("error usage: topic_error TOPIC CODE\n");
			return;
		}
		rd_kafka_mock_topic_set_error(mc, topic, (rd_kafka_resp_err_t) atoi(code));
		printf("ok\n");
	}
	else if (strcmp(cmd, "quit") == 0)
	{
		printf("ok\n");
		fflush(stdout);
		_exit(0);
	}
	else
		printf("error unknown command \"%s\"\n", cmd);
}

/* ---------------------------------------------- fixed-port bootstrap ---- */

static struct sockaddr_in relay_target;

/* copy both ways between a client and the first broker until either closes */
static void *
relay_main(void *arg)
{
	int			client = (int) (intptr_t) arg;
	int			broker = socket(AF_INET, SOCK_STREAM, 0);
	struct pollfd fds[2];
	char		buf[65536];

	if (broker < 0 ||
		connect(broker, (struct sockaddr *) &relay_target, sizeof(relay_target)) != 0)
	{
		close(client);
		if (broker >= 0)
			close(broker);
		return NULL;
	}
	fds[0].fd = client;
	fds[1].fd = broker;
	fds[0].events = fds[1].events = POLLIN;
	for (;;)
	{
		int			i;
		int			done = 0;

		if (poll(fds, 2, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			break;
		}
		for (i = 0; i < 2 && !done; i++)
		{
			ssize_t		n,
						off = 0;

			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(fds[i].fd, buf, sizeof(buf));
			if (n <= 0)
			{
				done = 1;
				break;
			}
			while (off < n)
			{
				ssize_t		w = write(fds[1 - i].fd, buf + off, n - off);

				if (w <= 0)
				{
					done = 1;
					break;
				}
				off += w;
			}
		}
		if (done)
			break;
	}
	close(client);
	close(broker);
	return NULL;
}

static void *
accept_main(void *arg)
{
	int			listener = (int) (intptr_t) arg;

	for (;;)
	{
		int			client = accept(listener, NULL, NULL);
		pthread_t	t;

		if (client < 0)
		{
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		if (pthread_create(&t, NULL, relay_main, (void *) (intptr_t) client) != 0)
			close(client);
		else
			pthread_detach(t);
	}
}

/*
 * Listen on 127.0.0.1:port and relay to the first broker of "first"
 * ("host:port,..."); false (with a message) when that cannot be done.
 */
static int
start_fixed_bootstrap(int port, const char *first)
{
	struct sockaddr_in addr;
	int			listener;
	int			one = 1;
	int			bport;
	pthread_t	t;

	if (sscanf(first, "%*[^:]:%d", &bport) != 1)
	{
		fprintf(stderr, "sg_mock_broker: cannot read the broker address \"%s\"\n", first);
		return 0;
	}
	memset(&relay_target, 0, sizeof(relay_target));
	relay_target.sin_family = AF_INET;
	relay_target.sin_port = htons(bport);
	relay_target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons(port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 ||
		setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		bind(listener, (struct sockaddr *) &addr, sizeof(addr)) != 0 ||
		listen(listener, 64) != 0)
	{
		fprintf(stderr, "sg_mock_broker: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
		return 0;
	}
	if (pthread_create(&t, NULL, accept_main, (void *) (intptr_t) listener) != 0)
	{
		fprintf(stderr, "sg_mock_broker: cannot start the bootstrap listener\n");
		return 0;
	}
	pthread_detach(t);
	return 1;
}

static void
usage_exit(void)
{
	fprintf(stderr, "usage: sg_mock_broker [--port PORT] [NBROKERS]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	char		err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	int			nbrokers = 1;
	int			port = 0;
	int			i;
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;

	for (i = 1; i < argc; i++)
	{
		char	   *end;

		if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
		{
			port = (int) strtol(argv[++i], &end, 10);
			if (*end != '\0' || port < 1 || port > 65535)
				usage_exit();
		}
		else if (strcmp(argv[i], "--help") == 0 || argv[i][0] == '-')
			usage_exit();
		else
		{
			nbrokers = (int) strtol(argv[i], &end, 10);
			if (*end != '\0' || nbrokers < 1 || nbrokers > 16)
				usage_exit();
		}
	}

	rd_kafka_conf_set_log_cb(conf, quiet_log);
	host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!host)
	{
		fprintf(stderr, "sg_mock_broker: %s\n", err);
		return 1;
	}
	mc = rd_kafka_mock_cluster_new(host, nbrokers);
	if (!mc)
	{
		fprintf(stderr, "sg_mock_broker: could not create the mock cluster\n");
		return 1;
	}
	snprintf(bootstraps, sizeof(bootstraps), "%s", rd_kafka_mock_cluster_bootstraps(mc));
	if (port > 0 && !start_fixed_bootstrap(port, bootstraps))
		return 1;
	producer = make_producer(NULL);
	if (port > 0)
		printf("bootstrap 127.0.0.1:%d\n", port);
	else
		printf("bootstrap %s\n", bootstraps);
	fflush(stdout);

	while ((len = getline(&line, &cap, stdin)) > 0)
	{
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		command(line);
		fflush(stdout);
	}
	/* end of input: the test is over */
	_exit(0);
}
