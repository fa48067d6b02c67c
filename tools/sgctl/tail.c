/*-------------------------------------------------------------------------
 *
 * tail.c
 *	  sgctl tail: print a stream's events as NDJSON, optionally following.
 *
 * Two ways to read:
 *
 * Without --consumer, sgctl keeps the positions itself (one after-seq per
 * partition, in memory) and reads with streamguard.read(), which needs
 * only read privilege and changes nothing on the server.  Following is a
 * short poll: when no partition had anything, sleep --interval and read
 * again.  Nothing is remembered between runs.
 *
 * With --consumer NAME the positions are the server's: each round is one
 * transaction, BEGIN; poll(stream, consumer, max, wait => --wait); print;
 * COMMIT.  The poll is a long-poll (it sleeps until an append commits), so
 * new events show at once without a polling loop.  Positions are
 * committed only after the events were written to stdout and flushed:
 * if sgctl dies between the two, the next run prints those events again
 * (at-least-once).  A write error (a closed pipe) rolls back instead.
 *
 * SIGINT or SIGTERM cancels the statement in flight and ends the run with
 * exit status 0: stopping a follow is its normal end.  A poll cancelled
 * that way rolls back, so the consumer's positions stay where the last
 * printed round committed them.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "sgctl.h"

#define READ_CHUNK 1000

typedef enum
{
	FROM_DEFAULT,
	FROM_BEGINNING,
	FROM_END,
	FROM_SEQ,
	FROM_TIME
} FromKind;

typedef struct Tail
{
	const char *stream;
	const char *consumer;
	FromKind	from;
	int64_t		from_seq;
	const char *from_time;
	int64_t		max;			/* 0: no limit */
	bool		follow;
	bool		payload_only;
	double		wait;			/* consumer long-poll */
	double		interval;		/* short poll without consumer */
	PGconn	   *conn;
	int64_t		printed;
	/* without a consumer: per partition */
	int			nparts;
	int64_t    *after;
	bool	   *seeking;		/* --from time: start not looked up yet */
} Tail;

/* the output line of an event e, $5 = payload only */
#define EVENT_TEXT \
	"CASE WHEN $5::pg_catalog.bool THEN e.payload::pg_catalog.text ELSE pg_catalog.concat(" \
	"'{\"partition\":', e.partition, ',\"seq\":', e.seq, " \
	"',\"key\":', COALESCE(pg_catalog.to_json(e.key)::pg_catalog.text, 'null'), " \
	"',\"dedup_key\":', COALESCE(pg_catalog.to_json(e.dedup_key)::pg_catalog.text, 'null'), " \
	"',\"appended_at\":', pg_catalog.to_json(e.appended_at)::pg_catalog.text, " \
	"',\"payload\":', e.payload::pg_catalog.text, '}') END"

static void
usage(FILE *out)
{
	fprintf(out,
			"Print a stream's events as NDJSON, one JSON object per line.\n\n"
			"Usage:\n"
			"  sgctl tail [OPTIONS] STREAM\n\n"
			"Options:\n"
			"  --from=beginning|end|seq:N|time:TIMESTAMP\n"
			"                          where to start (default: end when following, beginning\n"
			"                          with --no-follow; with --consumer: the consumer's positions)\n"
			"  --consumer=NAME         read as this consumer (poll with long-poll) and commit\n"
			"                          its positions after printing (at-least-once)\n"
			"  --max=N                 stop after N events\n"
			"  --follow / --no-follow  keep waiting for new events (default) or stop at the end\n"
			"  --payload-only          print only each event's payload\n"
			"  --wait=SECONDS          long-poll wait of one --consumer round (default 5)\n"
			"  --interval=SECONDS      pause between reads without --consumer (default 0.2)\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"Lines: {\"partition\":P,\"seq\":S,\"key\":...,\"dedup_key\":...,\"appended_at\":...,\"payload\":...}\n"
			"Ctrl-C (SIGINT) or SIGTERM ends the run cleanly with status 0.\n"
			"Exit status: 0 done or interrupted, 1 error, 2 usage.\n");
}

static bool
parse_from(Tail *t, const char *arg)
{
	if (strcmp(arg, "beginning") == 0 || strcmp(arg, "start") == 0)
		t->from = FROM_BEGINNING;
	else if (strcmp(arg, "end") == 0)
		t->from = FROM_END;
	else if (strncmp(arg, "seq:", 4) == 0)
	{
		if (!SgParseInt64(arg + 4, &t->from_seq) || t->from_seq < 1)
			return false;
		t->from = FROM_SEQ;
	}
	else if (strncmp(arg, "time:", 5) == 0 && arg[5] != '\0')
	{
		t->from = FROM_TIME;
		t->from_time = arg + 5;
	}
	else
		return false;
	return true;
}

/* print the first column of every row; false on a write error */
static bool
print_rows(Tail *t, PGresult *res, int col)
{
	int			i;

	for (i = 0; i < PQntuples(res); i++)
	{
		fwrite(PQgetvalue(res, i, col), 1, (size_t) PQgetlength(res, i, col), stdout);
		fputc('\n', stdout);
		t->printed++;
	}
	if (fflush(stdout) != 0 || ferror(stdout))
	{
		if (errno != EPIPE)
			SgError("could not write to standard output: %s", strerror(errno));
		return false;
	}
	return true;
}

/* the stream's partition count; -1 (reported) when it does not exist */
static int
stream_partitions(Tail *t)
{
	const char *params[1] = {t->stream};
	PGresult   *res = SgExecOk(t->conn,
							   "SELECT s.partitions FROM streamguard.streams s WHERE s.stream OPERATOR(pg_catalog.=) $1",
							   1, params);
	int			n;

	if (res == NULL)
		return -1;
	if (PQntuples(res) == 0)
	{
		SgError("stream \"%s\" does not exist", t->stream);
		PQclear(res);
		return -1;
	}
	n = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
}

/* grow the per-partition state to n partitions (new ones per --from) */
static bool
set_partitions(Tail *t, int n, bool initial)
{
	int			old = t->nparts;
	int			i;

	if (n <= old)
		return true;
	t->after = realloc(t->after, sizeof(int64_t) * n);
	t->seeking = realloc(t->seeking, sizeof(bool) * n);
	if (!t->after || !t->seeking)
	{
		SgError("out of memory");
		return false;
	}
	for (i = old; i < n; i++)
	{
		t->after[i] = 0;
		t->seeking[i] = false;
		if (!initial)
			continue;			/* a partition added later: from its start */
		if (t->from == FROM_SEQ)
			t->after[i] = t->from_seq - 1;
		else if (t->from == FROM_TIME)
			t->seeking[i] = true;
	}
	if (initial && t->from == FROM_END)
	{
		const char *params[1] = {t->stream};
		PGresult   *res = SgExecOk(t->conn,
								   "SELECT p.partition, p.readable_horizon - 1 FROM streamguard.stream_partitions p "
								   "WHERE p.stream OPERATOR(pg_catalog.=) $1",
								   1, params);

		if (res == NULL)
			return false;
		for (i = 0; i < PQntuples(res); i++)
		{
			int			p = atoi(PQgetvalue(res, i, 0));

			if (p >= 0 && p < n && !PQgetisnull(res, i, 1))
				t->after[p] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
		}
		PQclear(res);
	}
	t->nparts = n;
	return true;
}

/*
 * --from time without a consumer: partition p starts at its first event
 * appended at or after the time, which the server finds (seq_at_time)
 * without reading the events before it.
 */
static bool
seek_time(Tail *t, int p)
{
	char		pbuf[16];
	const char *params[3];
	PGresult   *res;

	snprintf(pbuf, sizeof(pbuf), "%d", p);
	params[0] = t->stream;
	params[1] = pbuf;
	params[2] = t->from_time;
	res = SgExecOk(t->conn,
				   "SELECT streamguard.seq_at_time($1, $2::pg_catalog.int4, $3::pg_catalog.timestamptz)",
				   3, params);
	if (res == NULL)
		return false;
	t->after[p] = strtoll(PQgetvalue(res, 0, 0), NULL, 10) - 1;
	t->seeking[p] = false;
	PQclear(res);
	return true;
}

static int
tail_read(Tail *t)
{
	int			n = stream_partitions(t);

	if (n < 0)
		return SG_EXIT_FAIL;
	if (!set_partitions(t, n, true))
		return SG_EXIT_FAIL;

	while (!sg_interrupted)
	{
		int64_t		got = 0;
		int			p;

		for (p = 0; p < t->nparts && !sg_interrupted; p++)
		{
			char		pbuf[16],
						abuf[32],
						mbuf[32];
			const char *params[5];
			PGresult   *res;
			int64_t		want = READ_CHUNK;
			int			rows;

			if (t->seeking[p] && !seek_time(t, p))
				return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
			if (t->max > 0 && t->max - t->printed < want)
				want = t->max - t->printed;
			if (want <= 0)
				break;
			snprintf(pbuf, sizeof(pbuf), "%d", p);
			snprintf(abuf, sizeof(abuf), "%lld", (long long) t->after[p]);
			snprintf(mbuf, sizeof(mbuf), "%lld", (long long) want);
			params[0] = t->stream;
			params[1] = pbuf;
			params[2] = abuf;
			params[3] = mbuf;
			params[4] = t->payload_only ? "true" : "false";
			res = SgExecOk(t->conn,
						   "SELECT e.seq, " EVENT_TEXT " FROM streamguard.read($1, $2::pg_catalog.int4, "
						   "$3::pg_catalog.int8, $4::pg_catalog.int4) e ORDER BY e.seq",
						   5, params);
			if (res == NULL)
				return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
			rows = PQntuples(res);
			if (rows > 0)
				t->after[p] = strtoll(PQgetvalue(res, rows - 1, 0), NULL, 10);
			if (!print_rows(t, res, 1))
			{
				PQclear(res);
				return SG_EXIT_FAIL;
			}
			PQclear(res);
			got += rows;
		}
		if (t->max > 0 && t->printed >= t->max)
			break;
		if (got > 0)
			continue;
		if (!t->follow)
			break;
		if (!SgSleep(t->interval))
			break;
		/* alter_stream may have added partitions */
		n = stream_partitions(t);
		if (n < 0)
			return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
		if (!set_partitions(t, n, false))
			return SG_EXIT_FAIL;
	}
	return SG_EXIT_OK;
}

/* --from with a consumer: move its positions with seek() before polling */
static bool
consumer_seek(Tail *t)
{
	const char *params[3] = {t->stream, t->consumer, NULL};
	PGresult   *res;
	char		seqbuf[32];

	if (!SgCommand(t->conn, "BEGIN"))
		return false;
	switch (t->from)
	{
		case FROM_TIME:
			params[2] = t->from_time;
			res = SgExecOk(t->conn,
						   "SELECT streamguard.seek($1, $2, $3::pg_catalog.timestamptz)", 3, params);
			break;
		case FROM_BEGINNING:
		case FROM_END:
		case FROM_SEQ:
			/*
			 * every partition: beginning = first retained (or next) seq, end
			 * = the readable horizon, seq:N = N, but never past the next seq
			 */
			snprintf(seqbuf, sizeof(seqbuf), "%lld",
					 (long long) (t->from == FROM_SEQ ? t->from_seq : 0));
			params[2] = t->from == FROM_BEGINNING ? "beginning" : t->from == FROM_END ? "end" : seqbuf;
			res = SgExecOk(t->conn,
						   "SELECT pg_catalog.count(streamguard.seek($1, $2, p.partition, "
						   "  CASE $3 WHEN 'beginning' THEN COALESCE(p.first_seq, p.next_seq) "
						   "          WHEN 'end' THEN p.readable_horizon "
						   "          ELSE GREATEST(1, LEAST($3::pg_catalog.int8, p.next_seq)) END)) "
						   "FROM streamguard.stream_partitions p WHERE p.stream OPERATOR(pg_catalog.=) $1",
						   3, params);
			break;
		default:
			res = NULL;
			break;
	}
	if (res == NULL)
	{
		PGresult   *r = SgExec(t->conn, "ROLLBACK", 0, NULL);

		PQclear(r);
		return false;
	}
	PQclear(res);
	return SgCommand(t->conn, "COMMIT");
}

static int
tail_consumer(Tail *t)
{
	char		waitbuf[32];

	if (stream_partitions(t) < 0)
		return SG_EXIT_FAIL;
	if (t->from != FROM_DEFAULT && !consumer_seek(t))
		return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
	snprintf(waitbuf, sizeof(waitbuf), "%.3f s", t->wait);

	while (!sg_interrupted)
	{
		char		mbuf[32];
		const char *params[5];
		PGresult   *res;
		int64_t		want = READ_CHUNK;
		int			rows;

		if (t->max > 0 && t->max - t->printed < want)
			want = t->max - t->printed;
		if (want <= 0)
			break;
		snprintf(mbuf, sizeof(mbuf), "%lld", (long long) want);
		params[0] = t->stream;
		params[1] = t->consumer;
		params[2] = mbuf;
		params[3] = t->follow ? waitbuf : NULL;
		params[4] = t->payload_only ? "true" : "false";
		if (!SgCommand(t->conn, "BEGIN"))
			return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
		res = SgExecOk(t->conn,
					   "SELECT " EVENT_TEXT " FROM streamguard.poll($1, $2, $3::pg_catalog.int4, "
					   "wait => $4::pg_catalog.interval) e",
					   5, params);
		if (res == NULL)
		{
			PGresult   *r = SgExec(t->conn, "ROLLBACK", 0, NULL);

			PQclear(r);
			return sg_interrupted ? SG_EXIT_OK : SG_EXIT_FAIL;
		}
		rows = PQntuples(res);
		if (!print_rows(t, res, 0))
		{
			/* not shown: not acknowledged */
			PGresult   *r = SgExec(t->conn, "ROLLBACK", 0, NULL);

			PQclear(r);
			PQclear(res);
			return SG_EXIT_FAIL;
		}
		PQclear(res);

		/*
		 * The events are out: acknowledge them even when a signal came in
		 * meanwhile.  Clear the flag for the commit so that it is not
		 * cancelled, and restore it after.
		 */
		{
			sig_atomic_t was = sg_interrupted;
			bool		ok;

			sg_interrupted = 0;
			ok = SgCommand(t->conn, "COMMIT");
			if (was)
				sg_interrupted = 1;
			if (!ok)
				return SG_EXIT_FAIL;
		}
		if (rows == 0 && !t->follow)
			break;
	}
	return SG_EXIT_OK;
}

int
CmdTail(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"from", required_argument, NULL, 'F'},
		{"consumer", required_argument, NULL, 'c'},
		{"group", required_argument, NULL, 'c'},
		{"max", required_argument, NULL, 'm'},
		{"follow", no_argument, NULL, 'f'},
		{"no-follow", no_argument, NULL, 'n'},
		{"payload-only", no_argument, NULL, 'P'},
		{"wait", required_argument, NULL, 'w'},
		{"interval", required_argument, NULL, 'i'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	Tail		t;
	int			opt;
	int			rc;

	memset(&t, 0, sizeof(t));
	t.follow = true;
	t.wait = 5;
	t.interval = 0.2;
	while ((opt = getopt_long(argc, argv, ":" SG_CONN_SHORTOPTS "f", longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 'F':
				if (!parse_from(&t, optarg))
				{
					SgUsageError("tail", "invalid --from \"%s\" (beginning, end, seq:N or time:TIMESTAMP)", optarg);
					return SG_EXIT_USAGE;
				}
				break;
			case 'c':
				t.consumer = optarg;
				break;
			case 'm':
				if (!SgParseInt64(optarg, &t.max) || t.max < 1)
				{
					SgUsageError("tail", "--max must be a positive number");
					return SG_EXIT_USAGE;
				}
				break;
			case 'f':
				t.follow = true;
				break;
			case 'n':
				t.follow = false;
				break;
			case 'P':
				t.payload_only = true;
				break;
			case 'w':
				if (!SgParseSeconds(optarg, &t.wait) || t.wait > 3600)
				{
					SgUsageError("tail", "--wait must be between 0 and 3600 seconds");
					return SG_EXIT_USAGE;
				}
				break;
			case 'i':
				if (!SgParseSeconds(optarg, &t.interval) || t.interval < 0.01)
				{
					SgUsageError("tail", "--interval must be at least 0.01 seconds");
					return SG_EXIT_USAGE;
				}
				break;
			default:
				return SgOptionOther("tail", opt, argv, usage);
		}
	}
	if (optind >= argc)
	{
		SgUsageError("tail", "no stream given");
		return SG_EXIT_USAGE;
	}
	t.stream = argv[optind++];
	if (optind < argc)
	{
		SgUsageError("tail", "too many arguments");
		return SG_EXIT_USAGE;
	}
	if (t.from == FROM_DEFAULT && t.consumer == NULL)
		t.from = t.follow ? FROM_END : FROM_BEGINNING;

	t.conn = SgConnect(copts);
	if (t.conn == NULL)
		return SG_EXIT_FAIL;
	if (t.from == FROM_TIME)
	{
		/* a bad timestamp is a usage error, reported before anything else */
		const char *params[1] = {t.from_time};
		PGresult   *res = SgExec(t.conn, "SELECT $1::pg_catalog.timestamptz", 1, params);

		if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			if (res)
				SgReportResult("invalid --from time", res);
			PQclear(res);
			PQfinish(t.conn);
			return SG_EXIT_USAGE;
		}
		PQclear(res);
	}
	rc = t.consumer ? tail_consumer(&t) : tail_read(&t);
	PQfinish(t.conn);
	free(t.after);
	free(t.seeking);
	return rc;
}
