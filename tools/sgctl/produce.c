/*-------------------------------------------------------------------------
 *
 * produce.c
 *	  sgctl produce: append events read from a file or stdin.
 *
 * Input is NDJSON (one JSON value per line; empty lines are skipped) or CSV
 * (the header row names the fields; every row becomes a JSON object of
 * strings).  Lines have no length limit.  Each event is checked before it
 * is queued (json.c), so a malformed line stops the run with its line
 * number before anything from that line on is sent: the events queued
 * before it are appended first, then sgctl exits 1 (or, with --skip-bad,
 * reports the line and goes on).
 *
 * Events go out in batches, one streamguard.append_batch() call per batch
 * in its own transaction; arrays travel as text array literals in
 * parameters.  A batch is all or nothing: an error or an interruption
 * rolls back the batch in flight, never part of it.
 *
 * Resuming: run the same command again.  With dedup keys (--dedup FIELD,
 * or --dedup-line, which derives "PREFIX:LINE") every event already
 * appended within the stream's dedup window is recognised by the server
 * and appended no second time.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sgctl.h"

#define DEFAULT_BATCH 500
#define MAX_BATCH 100000
/* a batch is sent early once its payloads reach this many bytes */
#define BATCH_BYTES (16 * 1024 * 1024)

typedef enum
{
	FMT_NDJSON,
	FMT_CSV
} InputFormat;

typedef enum
{
	REC_OK,
	REC_EOF,
	REC_BAD,
	REC_ERROR
} RecStatus;

typedef struct Producer
{
	/* options */
	const char *stream;
	const char *file;
	InputFormat format;
	int			batch_size;
	bool		has_key;
	JsonPath	key_path;
	bool		has_dedup;
	JsonPath	dedup_path;
	bool		dedup_line;
	const char *dedup_prefix;
	bool		skip_bad;
	bool		progress;
	char		delimiter;

	/* input */
	FILE	   *in;
	off_t		in_size;		/* 0 when unknown (a pipe) */
	long		lineno;			/* physical lines read so far */
	char	   *line;
	size_t		linecap;
	int			ncolumns;		/* CSV: header */
	StrBuf	   *columns;
	int			nfields;		/* CSV: the current row */
	int			fieldcap;
	StrBuf	   *fields;

	/* the batch being built: text array literals */
	PGconn	   *conn;
	StrBuf		payloads;
	StrBuf		keys;
	StrBuf		dedups;
	int			nbatch;
	long		batch_first_line;
	long		batch_last_line;

	/* counts */
	long long	appended;
	long long	batches;
	long long	bad;
	double		started;
	double		last_progress;
} Producer;

static void
usage(FILE *out)
{
	fprintf(out,
			"Append events to a stream from a file or standard input.\n\n"
			"Usage:\n"
			"  sgctl produce [OPTIONS] STREAM [FILE]\n\n"
			"FILE is NDJSON (one JSON event per line) or CSV; without FILE or with \"-\",\n"
			"standard input is read.  Empty lines are skipped.\n\n"
			"Options:\n"
			"  --format=ndjson|csv     input format (default ndjson)\n"
			"  --delimiter=CHAR        CSV field separator (default \",\")\n"
			"  --batch=N               events per append_batch call and transaction (default %d)\n"
			"  --key=.FIELD[.SUB]      take the event key from this field\n"
			"  --dedup=.FIELD[.SUB]    take the dedup key from this field (required in every event)\n"
			"  --dedup-line            dedup key PREFIX:LINE (line number in the input)\n"
			"  --dedup-prefix=PREFIX   prefix for --dedup-line (default: FILE as given, or \"stdin\")\n"
			"  --skip-bad              report malformed lines and go on (default: stop at the first)\n"
			"  --progress / --no-progress  progress line on stderr (default: when stderr is a terminal)\n"
			"  -q, --quiet             no summary line on standard output at the end\n"
			"  -d, -h, -p, -U          connection options (see \"sgctl --help\")\n\n"
			"A re-run of the same command after an interruption appends nothing twice when\n"
			"every event has a dedup key (--dedup or --dedup-line) and the re-run comes\n"
			"within the stream's dedup window.\n"
			"Exit status: 0 done, 1 error (bad input line, server error), 2 usage, 130 interrupted.\n",
			DEFAULT_BATCH);
}

/* -------------------------------------------------------------- progress */

static void
show_progress(Producer *pr, bool final)
{
	double		now = SgNow();
	double		elapsed = now - pr->started;
	double		rate = elapsed > 0 ? pr->appended / elapsed : 0;

	if (!pr->progress)
		return;
	if (!final && now - pr->last_progress < 0.2)
		return;
	pr->last_progress = now;
	fprintf(stderr, "\r\033[K");
	if (pr->in_size > 0)
	{
		off_t		pos = ftello(pr->in);
		int			pct = pos > 0 ? (int) (pos * 100 / pr->in_size) : 0;
		int			filled = pct / 5;
		int			i;

		if (pct > 100)
			pct = 100;
		fputc('[', stderr);
		for (i = 0; i < 20; i++)
			fputc(i < filled ? '#' : '.', stderr);
		fprintf(stderr, "] %3d%% ", pct);
	}
	fprintf(stderr, "%lld events, %.0f events/s", pr->appended, rate);
	if (pr->bad > 0)
		fprintf(stderr, ", %lld bad lines skipped", pr->bad);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}

/* ----------------------------------------------------------------- input */

/*
 * One NDJSON event into json; lineno is its line.  Lines are read whole,
 * however long (getline).
 */
static RecStatus
next_ndjson(Producer *pr, StrBuf *json, long *lineno, StrBuf *err)
{
	for (;;)
	{
		ssize_t		n;
		size_t		i;
		bool		blank = true;

		errno = 0;
		n = getline(&pr->line, &pr->linecap, pr->in);
		if (n < 0)
		{
			if (ferror(pr->in))
			{
				SbReset(err);
				SbAppendf(err, "read error: %s", strerror(errno));
				return REC_ERROR;
			}
			return REC_EOF;
		}
		pr->lineno++;
		while (n > 0 && (pr->line[n - 1] == '\n' || pr->line[n - 1] == '\r'))
			n--;
		/* a UTF-8 byte order mark opening the input is no part of the event */
		if (pr->lineno == 1 && n >= 3 && memcmp(pr->line, "\xEF\xBB\xBF", 3) == 0)
		{
			memmove(pr->line, pr->line + 3, (size_t) n - 3);
			n -= 3;
		}
		for (i = 0; i < (size_t) n; i++)
			if (pr->line[i] != ' ' && pr->line[i] != '\t')
			{
				blank = false;
				break;
			}
		if (blank)
			continue;
		*lineno = pr->lineno;
		if (memchr(pr->line, '\0', (size_t) n) != NULL)
		{
			SbReset(err);
			SbAppendStr(err, "NUL byte in line");
			return REC_BAD;
		}
		if (!JsonValidate(pr->line, (size_t) n, err))
			return REC_BAD;
		SbReset(json);
		SbAppend(json, pr->line, (size_t) n);
		return REC_OK;
	}
}

/*
 * One CSV record (RFC 4180: quoted fields may hold separators, quotes
 * doubled, line breaks) into pr->fields.  REC_EOF at the end of input.
 */
static RecStatus
read_csv_record(Producer *pr, StrBuf *err)
{
	int			c;
	bool		quoted = false;
	bool		was_quoted = false;
	bool		any = false;

	pr->nfields = 0;
	for (;;)
	{
		StrBuf	   *f;

		if (pr->nfields == pr->fieldcap)
		{
			int			i;

			pr->fieldcap = pr->fieldcap ? pr->fieldcap * 2 : 16;
			pr->fields = realloc(pr->fields, sizeof(StrBuf) * pr->fieldcap);
			if (pr->fields == NULL)
			{
				SgError("out of memory");
				exit(SG_EXIT_FAIL);
			}
			for (i = pr->nfields; i < pr->fieldcap; i++)
				SbInit(&pr->fields[i]);
		}
		f = &pr->fields[pr->nfields];
		SbReset(f);
		quoted = was_quoted = false;
		for (;;)
		{
			c = getc(pr->in);
			if (c == EOF)
			{
				if (ferror(pr->in))
				{
					SbReset(err);
					SbAppendf(err, "read error: %s", strerror(errno));
					return REC_ERROR;
				}
				if (quoted)
				{
					SbReset(err);
					SbAppendStr(err, "unterminated quoted field at end of input");
					return REC_BAD;
				}
				if (!any)
					return REC_EOF;
				pr->lineno++;
				pr->nfields++;
				return REC_OK;
			}
			any = true;
			if (quoted)
			{
				if (c == '"')
				{
					int			d = getc(pr->in);

					if (d == '"')
						SbAppendChar(f, '"');
					else
					{
						if (d != EOF)
							ungetc(d, pr->in);
						quoted = false;
					}
				}
				else
				{
					if (c == '\n')
						pr->lineno++;
					SbAppendChar(f, (char) c);
				}
				continue;
			}
			if (c == '"' && f->len == 0 && !was_quoted)
			{
				quoted = was_quoted = true;
				continue;
			}
			if (c == pr->delimiter)
				break;
			if (c == '\n')
			{
				pr->lineno++;
				if (f->len > 0 && f->data[f->len - 1] == '\r' && !was_quoted)
					f->data[--f->len] = '\0';
				pr->nfields++;
				return REC_OK;
			}
			if (c == '\r' && was_quoted)
				continue;		/* the CR of a CRLF after a quoted field */
			if (was_quoted)
			{
				SbReset(err);
				SbAppendStr(err, "text after a closing quote");
				/* skip the rest of this physical line */
				while ((c = getc(pr->in)) != EOF && c != '\n')
					;
				pr->lineno++;
				return REC_BAD;
			}
			SbAppendChar(f, (char) c);
		}
		pr->nfields++;
	}
}

static bool
utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;

	while (p < end)
	{
		int			n;

		if (*p < 0x80)
		{
			p++;
			continue;
		}
		if ((*p & 0xE0) == 0xC0)
			n = 1;
		else if ((*p & 0xF0) == 0xE0)
			n = 2;
		else if ((*p & 0xF8) == 0xF0)
			n = 3;
		else
			return false;
		if (end - p <= n)
			return false;
		for (p++; n > 0; n--, p++)
			if ((*p & 0xC0) != 0x80)
				return false;
	}
	return true;
}

static RecStatus
next_csv(Producer *pr, StrBuf *json, long *lineno, StrBuf *err)
{
	for (;;)
	{
		long		first = pr->lineno + 1;
		RecStatus	st = read_csv_record(pr, err);
		int			i;

		*lineno = first;
		if (st != REC_OK)
			return st;
		/* an empty line: one empty unquoted field */
		if (pr->nfields == 1 && pr->fields[0].len == 0)
			continue;
		for (i = 0; i < pr->nfields; i++)
		{
			if (memchr(pr->fields[i].data, '\0', pr->fields[i].len) ||
				!utf8_valid(pr->fields[i].data, pr->fields[i].len))
			{
				SbReset(err);
				SbAppendf(err, "field %d is not valid UTF-8 text", i + 1);
				return REC_BAD;
			}
		}
		if (pr->columns == NULL)
		{
			/* the header */
			pr->ncolumns = pr->nfields;
			pr->columns = malloc(sizeof(StrBuf) * pr->ncolumns);
			if (pr->columns == NULL)
			{
				SgError("out of memory");
				exit(SG_EXIT_FAIL);
			}
			for (i = 0; i < pr->ncolumns; i++)
			{
				SbInit(&pr->columns[i]);
				SbAppend(&pr->columns[i], pr->fields[i].data, pr->fields[i].len);
				if (pr->columns[i].len == 0)
				{
					SbReset(err);
					SbAppendf(err, "header column %d has no name", i + 1);
					return REC_ERROR;
				}
			}
			continue;
		}
		if (pr->nfields != pr->ncolumns)
		{
			SbReset(err);
			SbAppendf(err, "row has %d fields, the header %d", pr->nfields, pr->ncolumns);
			return REC_BAD;
		}
		SbReset(json);
		SbAppendChar(json, '{');
		for (i = 0; i < pr->nfields; i++)
		{
			if (i > 0)
				SbAppendChar(json, ',');
			JsonAppendString(json, pr->columns[i].data, pr->columns[i].len);
			SbAppendChar(json, ':');
			JsonAppendString(json, pr->fields[i].data, pr->fields[i].len);
		}
		SbAppendChar(json, '}');
		return REC_OK;
	}
}

/* ----------------------------------------------------------------- batch */

/* one element of a text array literal: "..." with \ and " escaped */
static void
array_add(StrBuf *arr, const char *s, size_t len, bool isnull)
{
	size_t		i;

	SbAppendChar(arr, arr->len == 0 ? '{' : ',');
	if (isnull)
	{
		SbAppendStr(arr, "NULL");
		return;
	}
	SbAppendChar(arr, '"');
	for (i = 0; i < len; i++)
	{
		if (s[i] == '"' || s[i] == '\\')
			SbAppendChar(arr, '\\');
		SbAppendChar(arr, s[i]);
	}
	SbAppendChar(arr, '"');
}

/* after a batch that did not go in: what went in before it */
static void
sg_report_appended(Producer *pr)
{
	SgError("%lld events in %lld batches were sent before line %ld; the batch from there on was not "
			"acknowledged (a re-run with the same dedup keys appends nothing twice)",
			pr->appended, pr->batches, pr->batch_first_line);
}

static bool
flush_batch(Producer *pr)
{
	const char *params[4];
	PGresult   *res;

	if (pr->nbatch == 0)
		return true;
	SbAppendChar(&pr->payloads, '}');
	if (pr->has_key)
		SbAppendChar(&pr->keys, '}');
	if (pr->has_dedup || pr->dedup_line)
		SbAppendChar(&pr->dedups, '}');
	params[0] = pr->stream;
	params[1] = pr->payloads.data;
	params[2] = pr->has_key ? pr->keys.data : NULL;
	params[3] = (pr->has_dedup || pr->dedup_line) ? pr->dedups.data : NULL;

	res = SgExec(pr->conn,
				 "SELECT pg_catalog.count(*) FROM streamguard.append_batch($1, "
				 "$2::pg_catalog.jsonb[], $3::pg_catalog.text[], $4::pg_catalog.text[])",
				 4, params);
	if (res == NULL)
	{
		/* the connection is gone: say how far the input got */
		if (!sg_interrupted)
			sg_report_appended(pr);
		return false;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		char		lines[64];
		char		what[96];

		if (pr->batch_first_line == pr->batch_last_line)
			snprintf(lines, sizeof(lines), "line %ld", pr->batch_first_line);
		else
			snprintf(lines, sizeof(lines), "lines %ld-%ld",
					 pr->batch_first_line, pr->batch_last_line);
		snprintf(what, sizeof(what), "%s: batch not appended", lines);
		if (sg_interrupted && SgResultIsCancel(res))
			SgError("interrupted: the batch of %s was rolled back; %lld events appended before it",
					lines, pr->appended);
		else
		{
			SgReportResult(what, res);
			sg_report_appended(pr);
		}
		PQclear(res);
		return false;
	}
	PQclear(res);
	pr->appended += pr->nbatch;
	pr->batches++;
	pr->nbatch = 0;
	SbReset(&pr->payloads);
	SbReset(&pr->keys);
	SbReset(&pr->dedups);
	show_progress(pr, false);
	return true;
}

/* one checked event into the batch; false (with err) when a key is missing */
static bool
queue_event(Producer *pr, const StrBuf *json, long lineno, StrBuf *scratch, StrBuf *err)
{
	if (pr->has_dedup)
	{
		if (!JsonGetPath(json->data, json->len, &pr->dedup_path, scratch))
		{
			SbReset(err);
			SbAppendStr(err, "no dedup key: the --dedup field is missing or null");
			return false;
		}
		array_add(&pr->dedups, scratch->data, scratch->len, false);
	}
	else if (pr->dedup_line)
	{
		SbReset(scratch);
		SbAppendf(scratch, "%s:%ld", pr->dedup_prefix, lineno);
		array_add(&pr->dedups, scratch->data, scratch->len, false);
	}
	if (pr->has_key)
	{
		bool		found = JsonGetPath(json->data, json->len, &pr->key_path, scratch);

		array_add(&pr->keys, scratch->data, found ? scratch->len : 0, !found);
	}
	array_add(&pr->payloads, json->data, json->len, false);
	if (pr->nbatch == 0)
		pr->batch_first_line = lineno;
	pr->batch_last_line = lineno;
	pr->nbatch++;
	return true;
}

int
CmdProduce(int argc, char **argv, SgConnOpts *copts)
{
	static const struct option longopts[] = {
		SG_CONN_LONGOPTS,
		{"format", required_argument, NULL, 'f'},
		{"delimiter", required_argument, NULL, 'D'},
		{"batch", required_argument, NULL, 'b'},
		{"key", required_argument, NULL, 'k'},
		{"dedup", required_argument, NULL, 'K'},
		{"dedup-line", no_argument, NULL, 'L'},
		{"dedup-prefix", required_argument, NULL, 'P'},
		{"skip-bad", no_argument, NULL, 's'},
		{"progress", no_argument, NULL, 'g'},
		{"no-progress", no_argument, NULL, 'G'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, SG_OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	Producer	pr;
	StrBuf		json,
				err,
				scratch;
	int			opt;
	int			progress_opt = -1;
	bool		quiet = false;
	int			rc = SG_EXIT_OK;
	int64_t		n;
	struct stat st;

	memset(&pr, 0, sizeof(pr));
	pr.format = FMT_NDJSON;
	pr.batch_size = DEFAULT_BATCH;
	pr.delimiter = ',';

	while ((opt = getopt_long(argc, argv, ":q" SG_CONN_SHORTOPTS, longopts, NULL)) != -1)
	{
		if (SgConnOption(copts, opt, optarg))
			continue;
		switch (opt)
		{
			case 'f':
				if (strcmp(optarg, "ndjson") == 0 || strcmp(optarg, "json") == 0)
					pr.format = FMT_NDJSON;
				else if (strcmp(optarg, "csv") == 0)
					pr.format = FMT_CSV;
				else
				{
					SgUsageError("produce", "unknown format \"%s\" (ndjson or csv)", optarg);
					return SG_EXIT_USAGE;
				}
				break;
			case 'D':
				if (strlen(optarg) != 1 || optarg[0] == '"' || optarg[0] == '\n' || optarg[0] == '\r')
				{
					SgUsageError("produce", "--delimiter takes one character other than a quote or line break");
					return SG_EXIT_USAGE;
				}
				pr.delimiter = optarg[0];
				break;
			case 'b':
				if (!SgParseInt64(optarg, &n) || n < 1 || n > MAX_BATCH)
				{
					SgUsageError("produce", "--batch must be between 1 and %d", MAX_BATCH);
					return SG_EXIT_USAGE;
				}
				pr.batch_size = (int) n;
				break;
			case 'k':
				if (!JsonPathParse(optarg, &pr.key_path))
				{
					SgUsageError("produce", "invalid field path \"%s\" (write .field or .field.sub)", optarg);
					return SG_EXIT_USAGE;
				}
				pr.has_key = true;
				break;
			case 'K':
				if (!JsonPathParse(optarg, &pr.dedup_path))
				{
					SgUsageError("produce", "invalid field path \"%s\" (write .field or .field.sub)", optarg);
					return SG_EXIT_USAGE;
				}
				pr.has_dedup = true;
				break;
			case 'L':
				pr.dedup_line = true;
				break;
			case 'P':
				pr.dedup_prefix = optarg;
				break;
			case 's':
				pr.skip_bad = true;
				break;
			case 'g':
				progress_opt = 1;
				break;
			case 'G':
				progress_opt = 0;
				break;
			case 'q':
				quiet = true;
				break;
			default:
				return SgOptionOther("produce", opt, argv, usage);
		}
	}
	if (optind >= argc)
	{
		SgUsageError("produce", "no stream given");
		return SG_EXIT_USAGE;
	}
	pr.stream = argv[optind++];
	if (optind < argc)
		pr.file = argv[optind++];
	if (optind < argc)
	{
		SgUsageError("produce", "too many arguments");
		return SG_EXIT_USAGE;
	}
	if (pr.has_dedup && pr.dedup_line)
	{
		SgUsageError("produce", "--dedup and --dedup-line exclude each other");
		return SG_EXIT_USAGE;
	}
	if (pr.dedup_prefix && !pr.dedup_line)
	{
		SgUsageError("produce", "--dedup-prefix needs --dedup-line");
		return SG_EXIT_USAGE;
	}
	if (pr.file == NULL || strcmp(pr.file, "-") == 0)
	{
		pr.in = stdin;
		if (!pr.dedup_prefix)
			pr.dedup_prefix = "stdin";
	}
	else
	{
		pr.in = fopen(pr.file, "r");
		if (pr.in == NULL)
		{
			SgError("could not open \"%s\": %s", pr.file, strerror(errno));
			return SG_EXIT_FAIL;
		}
		if (!pr.dedup_prefix)
			pr.dedup_prefix = pr.file;
	}
	if (fstat(fileno(pr.in), &st) == 0 && S_ISREG(st.st_mode))
		pr.in_size = st.st_size;
	pr.progress = progress_opt >= 0 ? progress_opt == 1 : isatty(STDERR_FILENO);

	pr.conn = SgConnect(copts);
	if (pr.conn == NULL)
		return SG_EXIT_FAIL;

	SbInit(&json);
	SbInit(&err);
	SbInit(&scratch);
	SbInit(&pr.payloads);
	SbInit(&pr.keys);
	SbInit(&pr.dedups);
	pr.started = SgNow();

	while (!sg_interrupted)
	{
		long		lineno = 0;
		RecStatus	status;
		size_t		nbytes;

		status = pr.format == FMT_CSV
			? next_csv(&pr, &json, &lineno, &err)
			: next_ndjson(&pr, &json, &lineno, &err);
		/* a signal can break a read (EINTR): the record is not queued */
		if (status == REC_EOF || sg_interrupted)
			break;
		if (status == REC_OK && !queue_event(&pr, &json, lineno, &scratch, &err))
			status = REC_BAD;
		if (status == REC_ERROR)
		{
			if (flush_batch(&pr))
				SgError("%s:%ld: %s", pr.file ? pr.file : "stdin", lineno, err.data);
			rc = SG_EXIT_FAIL;
			break;
		}
		if (status == REC_BAD)
		{
			if (pr.skip_bad)
			{
				if (pr.progress)
					fprintf(stderr, "\r\033[K");
				SgError("%s:%ld: skipped: %s", pr.file ? pr.file : "stdin", lineno, err.data);
				pr.bad++;
				continue;
			}
			/* what came before the bad line goes in; nothing from it on */
			if (!flush_batch(&pr))
			{
				rc = sg_interrupted ? SG_EXIT_INTERRUPTED : SG_EXIT_FAIL;
				break;
			}
			show_progress(&pr, true);
			SgError("%s:%ld: invalid input: %s", pr.file ? pr.file : "stdin", lineno, err.data);
			SgError("stopped at line %ld: %lld events before it were appended, none from it on",
					lineno, pr.appended);
			rc = SG_EXIT_FAIL;
			goto done;
		}
		nbytes = pr.payloads.len;
		if (pr.nbatch >= pr.batch_size || nbytes >= BATCH_BYTES)
		{
			if (!flush_batch(&pr))
			{
				rc = sg_interrupted ? SG_EXIT_INTERRUPTED : SG_EXIT_FAIL;
				goto done;
			}
		}
		show_progress(&pr, false);
	}
	if (rc == SG_EXIT_OK && !sg_interrupted && !flush_batch(&pr))
		rc = sg_interrupted ? SG_EXIT_INTERRUPTED : SG_EXIT_FAIL;
	if (rc == SG_EXIT_OK && sg_interrupted)
	{
		rc = SG_EXIT_INTERRUPTED;
		SgError("interrupted after line %ld: %lld events appended; the events queued after them were not sent",
				pr.lineno, pr.appended);
	}
	show_progress(&pr, true);
	/*
	 * Off a terminal there is no progress line: say once what was done, so a
	 * script's log shows it (a terminal has the final progress line already).
	 */
	if (rc == SG_EXIT_OK && !quiet && !pr.progress)
	{
		printf("%lld event%s sent to stream \"%s\" in %lld batch%s",
			   pr.appended, pr.appended == 1 ? "" : "s", pr.stream, pr.batches, pr.batches == 1 ? "" : "es");
		if (pr.bad > 0)
			printf(", %lld bad line%s skipped", pr.bad, pr.bad == 1 ? "" : "s");
		printf("\n");
		fflush(stdout);
	}
done:
	if (pr.in != stdin)
		fclose(pr.in);
	PQfinish(pr.conn);
	return rc;
}
