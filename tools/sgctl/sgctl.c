/*-------------------------------------------------------------------------
 *
 * sgctl.c
 *	  Entry point of sgctl: global options, subcommand dispatch, usage and
 *	  the small helpers every subcommand shares (messages, number parsing,
 *	  the string buffer).
 *
 * Command line: sgctl [CONNECTION OPTIONS] COMMAND [OPTIONS] [ARGS].  The
 * connection options (-d CONNINFO, -h, -p, -U, like psql's) are accepted
 * before the command and after it; anything not given comes from the PG*
 * environment variables and ~/.pgpass, as libpq reads them.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sgctl.h"

const char *progname = "sgctl";

typedef struct SgCommandDef
{
	const char *name;
	int			(*run) (int argc, char **argv, SgConnOpts *conn);
	const char *summary;
} SgCommandDef;

static const SgCommandDef commands[] = {
	{"produce", CmdProduce, "append NDJSON or CSV events from a file or stdin"},
	{"tail", CmdTail, "print a stream's events as NDJSON, optionally following it"},
	{"top", CmdTop, "refreshing view of streams, consumers and pipelines"},
	{"verify", CmdVerify, "exactly-once check: a stream against its sink table"},
	{"metrics", CmdMetrics, "print or serve streamguard.metrics() (Prometheus text)"},
	{"serve", CmdServe, "a read-only web console of streams, pipelines and more"},
	{NULL, NULL, NULL}
};

static void
usage(FILE *out)
{
	const SgCommandDef *c;

	fprintf(out,
			"sgctl, the command-line tool of streamguard.\n\n"
			"Usage:\n"
			"  sgctl [CONNECTION OPTIONS] COMMAND [OPTIONS] [ARGS]\n\n"
			"Commands:\n");
	for (c = commands; c->name; c++)
		fprintf(out, "  %-9s %s\n", c->name, c->summary);
	fprintf(out,
			"\nConnection options (also accepted after COMMAND):\n"
			"  -d, --dbname=CONNINFO   database name or connection string\n"
			"  -h, --host=HOST         server host or socket directory\n"
			"  -p, --port=PORT         server port\n"
			"  -U, --username=USER     user name\n"
			"Unset options come from PGDATABASE, PGHOST, PGPORT, PGUSER, ... and ~/.pgpass.\n\n"
			"Other options:\n"
			"  -V, --version           print the version and exit\n"
			"  -?, --help              print this help and exit\n\n"
			"\"sgctl COMMAND --help\" describes a command.  Exit status: 0 success,\n"
			"1 failure, 2 usage error (verify: 3 when it found a difference).\n");
}

void
SgError(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void
SgUsageError(const char *cmd, const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	if (cmd)
		fprintf(stderr, "%s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry \"%s %s%s--help\" for more information.\n",
			progname, cmd ? cmd : "", cmd ? " " : "");
}

/* a connection option of any subcommand; false when c is not one */
bool
SgConnOption(SgConnOpts *opts, int c, const char *arg)
{
	switch (c)
	{
		case 'd':
			opts->dbname = arg;
			return true;
		case 'h':
			opts->host = arg;
			return true;
		case 'p':
			opts->port = arg;
			return true;
		case 'U':
			opts->user = arg;
			return true;
		default:
			return false;
	}
}

/* "-?" (getopt returns '?' for it and for unknown options alike) */
bool
SgIsHelpFlag(const char *arg)
{
	return arg != NULL && strcmp(arg, "-?") == 0;
}

/*
 * The end of a subcommand's option switch: what its getopt loop was given
 * that is none of its own options.  --help and -? print the usage (exit
 * 0); a missing argument (':') and an unknown option are usage errors.
 * Returns the exit code.
 */
int
SgOptionOther(const char *cmd, int opt, char **argv, void (*usage) (FILE *out))
{
	if (opt == SG_OPT_HELP || SgIsHelpFlag(argv[optind - 1]))
	{
		usage(stdout);
		return SG_EXIT_OK;
	}
	if (opt == ':')
		SgUsageError(cmd, "option \"%s\" needs an argument", argv[optind - 1]);
	else
		SgUsageError(cmd, "unknown option \"%s\"", argv[optind - 1]);
	return SG_EXIT_USAGE;
}

/* a non-negative number of seconds, fractions allowed */
bool
SgParseSeconds(const char *s, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= 0) || v > 86400.0 * 365)
		return false;
	*out = v;
	return true;
}

bool
SgParseInt64(const char *s, int64_t *out)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return false;
	*out = (int64_t) v;
	return true;
}

double
SgNow(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------- string buffer */

void
SbInit(StrBuf *sb)
{
	sb->cap = 256;
	sb->len = 0;
	sb->data = malloc(sb->cap);
	if (sb->data == NULL)
	{
		SgError("out of memory");
		exit(SG_EXIT_FAIL);
	}
	sb->data[0] = '\0';
}

void
SbReset(StrBuf *sb)
{
	sb->len = 0;
	sb->data[0] = '\0';
}

void
SbFree(StrBuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = sb->cap = 0;
}

static void
sb_reserve(StrBuf *sb, size_t more)
{
	size_t		need = sb->len + more + 1;

	if (need <= sb->cap)
		return;
	while (sb->cap < need)
	{
		if (sb->cap > SIZE_MAX / 2)
		{
			SgError("out of memory");
			exit(SG_EXIT_FAIL);
		}
		sb->cap *= 2;
	}
	sb->data = realloc(sb->data, sb->cap);
	if (sb->data == NULL)
	{
		SgError("out of memory");
		exit(SG_EXIT_FAIL);
	}
}

void
SbAppend(StrBuf *sb, const char *s, size_t n)
{
	sb_reserve(sb, n);
	memcpy(sb->data + sb->len, s, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
}

void
SbAppendStr(StrBuf *sb, const char *s)
{
	SbAppend(sb, s, strlen(s));
}

void
SbAppendChar(StrBuf *sb, char c)
{
	sb_reserve(sb, 1);
	sb->data[sb->len++] = c;
	sb->data[sb->len] = '\0';
}

void
SbAppendf(StrBuf *sb, const char *fmt,...)
{
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	sb_reserve(sb, (size_t) n);
	va_start(ap, fmt);
	vsnprintf(sb->data + sb->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t) n;
}

/* ------------------------------------------------------------------- main */

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"help", no_argument, NULL, SG_OPT_HELP},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	SgConnOpts	conn = {NULL, NULL, NULL, NULL};
	const SgCommandDef *c;
	const char *cmd;
	int			opt;

	/* '+': stop at the command; ':' first: report missing arguments ourselves */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:" SG_CONN_SHORTOPTS "V?", longopts, NULL)) != -1)
	{
		if (SgConnOption(&conn, opt, optarg))
			continue;
		switch (opt)
		{
			case 'V':
				printf("sgctl (streamguard) %s\n", SGCTL_VERSION);
				return SG_EXIT_OK;
			case SG_OPT_HELP:
				usage(stdout);
				return SG_EXIT_OK;
			case '?':
				if (SgIsHelpFlag(argv[optind - 1]))
				{
					usage(stdout);
					return SG_EXIT_OK;
				}
				SgUsageError(NULL, "unknown option \"%s\"", argv[optind - 1]);
				return SG_EXIT_USAGE;
			case ':':
				SgUsageError(NULL, "option \"%s\" needs an argument", argv[optind - 1]);
				return SG_EXIT_USAGE;
			default:
				SgUsageError(NULL, "unknown option \"%s\"", argv[optind - 1]);
				return SG_EXIT_USAGE;
		}
	}
	if (optind >= argc)
	{
		SgUsageError(NULL, "no command given");
		return SG_EXIT_USAGE;
	}
	cmd = argv[optind];
	if (strcmp(cmd, "help") == 0)
	{
		if (optind + 1 < argc)
		{
			char	   *hargv[3];

			for (c = commands; c->name; c++)
				if (strcmp(c->name, argv[optind + 1]) == 0)
					break;
			if (c->name == NULL)
			{
				SgUsageError(NULL, "unknown command \"%s\"", argv[optind + 1]);
				return SG_EXIT_USAGE;
			}
			hargv[0] = (char *) c->name;
			hargv[1] = "--help";
			hargv[2] = NULL;
			optind = 0;
			return c->run(2, hargv, &conn);
		}
		usage(stdout);
		return SG_EXIT_OK;
	}
	for (c = commands; c->name; c++)
	{
		if (strcmp(c->name, cmd) == 0)
		{
			int			sub_argc = argc - optind;
			char	  **sub_argv = argv + optind;

			/* the subcommand parses its own options: restart getopt */
			optind = 0;
			opterr = 0;
			SgInstallSignals();
			return c->run(sub_argc, sub_argv, &conn);
		}
	}
	SgUsageError(NULL, "unknown command \"%s\"", cmd);
	return SG_EXIT_USAGE;
}
