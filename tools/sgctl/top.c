/*-------------------------------------------------------------------------
 *
 * top.c
 *	  sgctl top: a refreshing view of streams, consumers, pipelines and
 *	  pipeline workers, read from streamguard's views.
 *
 * On a terminal the frame is redrawn in place every --interval seconds
 * (plain ANSI escape codes on the alternate screen, lines cut at the
 * terminal's width); the keyboard is read unbuffered so that "q" quits at
 * once, as does Ctrl-C.  With --once, or when stdout is not a terminal,
 * frames are printed as plain text without escape codes (--once: one
 * frame, then exit).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "sgctl.h"

#define MAX_COL_WIDTH 48

typedef struct Section
{
	const char *title;
	const char *sql;
} Section;

static const Section sections[] = {
	{"Streams",
		"SELECT s.stream, s.partitions AS parts, s.retained_events AS events, s.last_seq, "
		"pg_catalog.round(s.append_rate::pg_catalog.numeric, 1) AS \"append/s\", s.in_flight "
		"FROM streamguard.streams s ORDER BY s.stream"},
	{"Consumers",
		"SELECT c.stream, c.consumer, pg_catalog.sum(c.lag_events) AS lag_events, "
		"pg_catalog.round(pg_catalog.max(c.lag_seconds)::pg_catalog.numeric, 1) AS lag_s, "
		"pg_catalog.sum(c.lost_events) AS lost, pg_catalog.max(c.updated_at)::pg_catalog.timestamptz(0) AS updated "
		"FROM streamguard.consumers c GROUP BY 1, 2 ORDER BY 1, 2"},
	{"Pipelines",
		"SELECT p.pipeline, p.source, p.state, p.guarantee, p.workers, "
		"pg_catalog.round(p.events_per_sec::pg_catalog.numeric, 1) AS \"events/s\", p.lag_events, "
		"pg_catalog.round(p.lag_seconds::pg_catalog.numeric, 1) AS lag_s, p.batches, p.restarts, "
		"p.dead_letters, p.worker_status, "
		"pg_catalog.regexp_replace(p.last_error, '\\s+', ' ', 'g') AS last_error "
		"FROM streamguard.pipelines p ORDER BY p.pipeline"},
	{"Pipeline workers",
		"SELECT w.pipeline, w.worker, w.worker_pid AS pid, w.partitions::pg_catalog.text AS partitions, "
		"pg_catalog.round(w.events_per_sec::pg_catalog.numeric, 1) AS \"events/s\", w.lag_events, "
		"pg_catalog.round(w.lag_seconds::pg_catalog.numeric, 1) AS lag_s, w.worker_status "
		"FROM streamguard.pipeline_workers w ORDER BY 1, 2"},
	{NULL, NULL}
};

static struct termios saved_tio;
static bool tio_saved = false;

static void
usage(FILE *out)
{
	fprintf(out,
			"A refreshing view of streams, consumers, pipelines and pipeline workers.\n\n"
			"Usage:\n"
			"  sgctl top [OPTIONS]\n\n"
			"Options:\n"
			"  --interval=SECONDS      refresh period (default 2)\n"
			"  --once                  print one frame as plain text (no escape codes) and exit\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"Keys: q quits (as does Ctrl-C).  When standard output is not a terminal, each\n"
			"frame is printed as plain text.\n"
			"Exit status: 0 done, 1 error, 2 usage.\n");
}

/* cut a value for display: one line, at most max characters (bytes) */
static int
display_width(const char *s, int max)
{
	int			n = (int) strlen(s);

	return n > max ? max : n;
}

/* one result as an aligned table into frame; lines end with '\n' */
static void
render_table(StrBuf *frame, PGresult *res)
{
	int			ncols = PQnfields(res);
	int			nrows = PQntuples(res);
	int		   *w = calloc((size_t) (ncols > 0 ? ncols : 1), sizeof(int));
	int			r,
				c;

	if (w == NULL)
		return;
	for (c = 0; c < ncols; c++)
	{
		w[c] = display_width(PQfname(res, c), MAX_COL_WIDTH);
		for (r = 0; r < nrows; r++)
		{
			int			v = display_width(PQgetvalue(res, r, c), c == ncols - 1 ? 200 : MAX_COL_WIDTH);

			if (v > w[c])
				w[c] = v;
		}
	}
	SbAppendStr(frame, "  ");
	for (c = 0; c < ncols; c++)
	{
		if (c < ncols - 1)
			SbAppendf(frame, "%-*.*s  ", w[c], w[c], PQfname(res, c));
		else
			SbAppendf(frame, "%.*s", w[c], PQfname(res, c));
	}
	SbAppendChar(frame, '\n');
	for (r = 0; r < nrows; r++)
	{
		SbAppendStr(frame, "  ");
		for (c = 0; c < ncols; c++)
		{
			const char *v = PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
			char	   *nl = strpbrk(v, "\n\r\t");
			int			len = display_width(v, w[c]);

			if (nl && nl - v < len)
				len = (int) (nl - v);
			if (c < ncols - 1)
				SbAppendf(frame, "%-*.*s  ", w[c], len, v);
			else
				SbAppendf(frame, "%.*s", len, v);
		}
		SbAppendChar(frame, '\n');
	}
	if (nrows == 0)
		SbAppendStr(frame, "  (none)\n");
	free(w);
}

/* the whole frame as text; false when a query failed (message in frame) */
static bool
build_frame(PGconn *conn, StrBuf *frame, double interval)
{
	const Section *s;
	PGresult   *res;
	char		when[64];
	time_t		now = time(NULL);
	bool		ok = true;

	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
	SbReset(frame);
	SbAppendf(frame, "sgctl top  %s  database %s on %s:%s  (every %gs, q quits)\n",
			  when, PQdb(conn), PQhost(conn) ? PQhost(conn) : "", PQport(conn), interval);
	for (s = sections; s->title; s++)
	{
		SbAppendf(frame, "\n%s\n", s->title);
		res = SgExec(conn, s->sql, 0, NULL);
		if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);

			SbAppendf(frame, "  error: %s", msg);
			if (frame->len > 0 && frame->data[frame->len - 1] != '\n')
				SbAppendChar(frame, '\n');
			PQclear(res);
			ok = false;
			if (PQstatus(conn) != CONNECTION_OK)
				break;
			continue;
		}
		render_table(frame, res);
		PQclear(res);
	}
	return ok;
}

static void
restore_terminal(void)
{
	if (tio_saved)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
	tio_saved = false;
	fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
}

/* draw frame over the previous one, each line cut at the terminal width */
static void
draw(const StrBuf *frame)
{
	struct winsize ws;
	int			cols = 80,
				rows = 24,
				row = 0;
	const char *p = frame->data;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
	{
		cols = ws.ws_col;
		rows = ws.ws_row;
	}
	fputs("\033[H", stdout);
	while (*p && row < rows)
	{
		const char *nl = strchr(p, '\n');
		int			len = nl ? (int) (nl - p) : (int) strlen(p);

		fwrite(p, 1, (size_t) (len > cols ? cols : len), stdout);
		fputs("\033[K", stdout);
		row++;
		if (!nl)
			break;
		p = nl + 1;
		if (row < rows && *p)
			fputs("\r\n", stdout);
	}
	fputs("\033[J", stdout);
	fflush(stdout);
}

int
CmdTop(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"interval", required_argument, NULL, 'i'},
		{"once", no_argument, NULL, '1'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	double		interval = 2;
	bool		once = false;
	bool		tty;
	int			opt;
	PGconn	   *conn;
	StrBuf		frame;
	int			rc = SG_EXIT_OK;

	while ((opt = getopt_long(argc, argv, ":" SG_CONN_SHORTOPTS, longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 'i':
				if (!SgParseSeconds(optarg, &interval) || interval < 0.1)
				{
					SgUsageError("top", "--interval must be at least 0.1 seconds");
					return SG_EXIT_USAGE;
				}
				break;
			case '1':
				once = true;
				break;
			default:
				return SgOptionOther("top", opt, argv, usage);
		}
	}
	if (optind < argc)
	{
		SgUsageError("top", "too many arguments");
		return SG_EXIT_USAGE;
	}
	conn = SgConnect(copts);
	if (conn == NULL)
		return SG_EXIT_FAIL;
	SbInit(&frame);
	tty = !once && isatty(STDOUT_FILENO);

	if (!tty)
	{
		for (;;)
		{
			bool		ok = build_frame(conn, &frame, interval);

			fputs(frame.data, stdout);
			fflush(stdout);
			if (!ok && once)
				rc = SG_EXIT_FAIL;
			if (once || !SgSleep(interval))
				break;
			fputc('\n', stdout);
			if (PQstatus(conn) != CONNECTION_OK)
				PQreset(conn);
		}
		PQfinish(conn);
		SbFree(&frame);
		return rc;
	}

	if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tio) == 0)
	{
		struct termios raw = saved_tio;

		/* no line buffering, no echo; ISIG stays: Ctrl-C still signals */
		raw.c_lflag &= ~(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tio_saved = true;
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	atexit(restore_terminal);
	fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);

	while (!sg_interrupted)
	{
		double		until;
		bool		quit = false;

		build_frame(conn, &frame, interval);
		draw(&frame);
		if (PQstatus(conn) != CONNECTION_OK)
			PQreset(conn);
		until = SgNow() + interval;
		while (!sg_interrupted && !quit)
		{
			struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
			double		left = until - SgNow();
			int			n;

			if (left <= 0)
				break;
			n = poll(&pfd, 1, (int) (left * 1000) + 1);
			if (n > 0 && (pfd.revents & (POLLIN | POLLHUP)))
			{
				char		buf[64];
				ssize_t		got = read(STDIN_FILENO, buf, sizeof(buf));
				ssize_t		i;

				if (got <= 0 && (pfd.revents & POLLHUP))
					quit = true;	/* the terminal went away */
				for (i = 0; i < got; i++)
					if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 3)
						quit = true;
			}
		}
		if (quit)
			break;
	}
	restore_terminal();
	PQfinish(conn);
	SbFree(&frame);
	return SG_EXIT_OK;
}
