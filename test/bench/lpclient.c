/*
 * lpclient: the consumer of the long-poll benchmark (test/bench/run.pl,
 * BENCH_ONLY=longpoll).  One libpq connection polls a stream with
 * streamguard.poll, each poll in its own transaction (BEGIN; poll; COMMIT)
 * in one of four ways, and writes one line per event received:
 *     <payload id> <receive time, microseconds since the epoch>
 *
 *   wait    poll(stream, consumer, 100, wait => '1 s'): the server sleeps
 *           until events are readable
 *   async   the same, the session's transactions committing with
 *           synchronous_commit = off (the consumer's own COMMIT does not
 *           wait for its WAL flush)
 *   sleep   poll(stream, consumer, 100); when it returns nothing, sleep
 *           the given milliseconds and poll again
 *   notify  LISTEN <channel>; poll; when it returns nothing, wait on the
 *           socket for a notification (1 s at most) and poll again
 *
 * It runs until <stop file> exists and a poll returned nothing.  While
 * <idle seconds> pass at the start (no producer yet), it measures the CPU
 * time it and its server backend use, and prints at exit:
 *     idle_client_ms=<n> idle_backend_ms=<n> polls=<n> events=<n>
 *
 * Usage: lpclient CONNINFO MODE STREAM CONSUMER SLEEP_MS IDLE_S STOP_FILE OUT_FILE
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/time.h>
#include <unistd.h>

#include "libpq-fe.h"

static PGconn *conn;

static void
die(const char *what)
{
	fprintf(stderr, "lpclient: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

static long long
now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (long long) tv.tv_sec * 1000000 + tv.tv_usec;
}

/* this process's CPU time, ms */
static double
self_cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec * 1000.0 + ru.ru_utime.tv_usec / 1000.0 +
		ru.ru_stime.tv_sec * 1000.0 + ru.ru_stime.tv_usec / 1000.0;
}

/* a process's CPU time from /proc/<pid>/stat, ms; -1 if unreadable */
static double
proc_cpu_ms(int pid)
{
	char		path[64];
	char		buf[2048];
	FILE	   *f;
	size_t		n;
	char	   *p;
	unsigned long utime,
				stime;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* fields after the command name, which is in parentheses */
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
		return -1;
	return (utime + stime) * 1000.0 / sysconf(_SC_CLK_TCK);
}

int
main(int argc, char **argv)
{
	const char *mode,
			   *stop_file;
	int			sleep_ms,
				idle_s,
				backend;
	FILE	   *out;
	PGresult   *res;
	const char *params[2];
	const char *sql;
	long long	idle_end;
	double		c0,
				b0,
				idle_client = -1,
				idle_backend = -1;
	long		polls = 0,
				events = 0;
	int			stopping = 0;
	int			waits;

	if (argc != 9)
	{
		fprintf(stderr, "usage: lpclient CONNINFO MODE STREAM CONSUMER SLEEP_MS IDLE_S STOP_FILE OUT_FILE\n");
		return 2;
	}
	mode = argv[2];
	params[0] = argv[3];
	params[1] = argv[4];
	sleep_ms = atoi(argv[5]);
	idle_s = atoi(argv[6]);
	stop_file = argv[7];
	waits = strcmp(mode, "wait") == 0 || strcmp(mode, "async") == 0;
	if (!waits && strcmp(mode, "sleep") != 0 && strcmp(mode, "notify") != 0)
	{
		fprintf(stderr, "lpclient: unknown mode \"%s\"\n", mode);
		return 2;
	}
	if ((out = fopen(argv[8], "w")) == NULL)
	{
		perror(argv[8]);
		return 1;
	}
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		die("connect");
	backend = PQbackendPID(conn);
	if (strcmp(mode, "notify") == 0)
	{
		res = PQexec(conn, "LISTEN lp_bench");
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("LISTEN");
		PQclear(res);
	}
	if (strcmp(mode, "async") == 0)
	{
		res = PQexec(conn, "SET synchronous_commit = off");
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("SET");
		PQclear(res);
	}
	sql = waits
		? "SELECT payload->>'id' FROM streamguard.poll($1, $2, 100, wait => '1 s')"
		: "SELECT payload->>'id' FROM streamguard.poll($1, $2, 100)";

	c0 = self_cpu_ms();
	b0 = proc_cpu_ms(backend);
	idle_end = now_us() + (long long) idle_s * 1000000;
	for (;;)
	{
		int			n,
					i;
		long long	t;

		res = PQexec(conn, "BEGIN");
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("BEGIN");
		PQclear(res);
		res = PQexecParams(conn, sql, 2, NULL, params, NULL, NULL, 0);
		t = now_us();
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die("poll");
		polls++;
		n = PQntuples(res);
		for (i = 0; i < n; i++)
			fprintf(out, "%s %lld\n", PQgetvalue(res, i, 0), t);
		events += n;
		PQclear(res);
		res = PQexec(conn, "COMMIT");
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("COMMIT");
		PQclear(res);
		if (idle_client < 0 && t >= idle_end)
		{
			idle_client = self_cpu_ms() - c0;
			idle_backend = b0 < 0 ? -1 : proc_cpu_ms(backend) - b0;
		}
		if (n > 0)
			continue;
		if (stopping)
			break;
		if (access(stop_file, F_OK) == 0)
		{
			stopping = 1;		/* one more poll: what committed before the stop */
			continue;
		}
		if (strcmp(mode, "sleep") == 0)
			usleep(sleep_ms * 1000);
		else if (strcmp(mode, "notify") == 0)
		{
			int			sock = PQsocket(conn);
			fd_set		fds;
			struct timeval tv = {1, 0};
			PGnotify   *nt;
			int			got = 0;

			/* notifications that arrived with the last result */
			if (!PQconsumeInput(conn))
				die("consume");
			while ((nt = PQnotifies(conn)) != NULL)
			{
				got = 1;
				PQfreemem(nt);
			}
			if (got)
				continue;
			FD_ZERO(&fds);
			FD_SET(sock, &fds);
			if (select(sock + 1, &fds, NULL, NULL, &tv) < 0 && errno != EINTR)
				die("select");
			if (!PQconsumeInput(conn))
				die("consume");
			while ((nt = PQnotifies(conn)) != NULL)
				PQfreemem(nt);
		}
	}
	if (fclose(out) != 0)
	{
		perror("close");
		return 1;
	}
	printf("idle_client_ms=%.0f idle_backend_ms=%.0f polls=%ld events=%ld\n",
		   idle_client, idle_backend, polls, events);
	PQfinish(conn);
	return 0;
}
