/*-------------------------------------------------------------------------
 *
 * sgctl.h
 *	  Shared declarations of sgctl, streamguard's command-line tool.
 *
 * sgctl is a libpq client: every subcommand (produce, tail, top, verify,
 * metrics, serve) lives in a file of its own and uses the helpers declared here
 * for the connection, interruptible queries, a growable string buffer and
 * a small JSON scanner.
 *
 * Exit codes, the same for every subcommand: 0 success, 1 failure (bad
 * input, an error from the server, a lost connection), 2 usage error,
 * 130 interrupted (produce; tail treats SIGINT as its normal end and exits
 * 0).  verify adds 3: it ran and found a difference.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SGCTL_H
#define SGCTL_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#define SGCTL_VERSION "0.3"

#define SG_EXIT_OK			0
#define SG_EXIT_FAIL		1
#define SG_EXIT_USAGE		2
#define SG_EXIT_MISMATCH	3
#define SG_EXIT_INTERRUPTED 130

/* connection options: psql's -d -h -p -U, PG* variables as libpq reads them */
typedef struct SgConnOpts
{
	const char *dbname;
	const char *host;
	const char *port;
	const char *user;
} SgConnOpts;

/* the long options every subcommand accepts, and their short letters */
#define SG_CONN_SHORTOPTS "d:h:p:U:"
#define SG_CONN_LONGOPTS \
	{"dbname", required_argument, NULL, 'd'}, \
	{"host", required_argument, NULL, 'h'}, \
	{"port", required_argument, NULL, 'p'}, \
	{"username", required_argument, NULL, 'U'}

/* the value getopt_long returns for --help */
#define SG_OPT_HELP 1000

/* growable string */
typedef struct StrBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} StrBuf;

extern void SbInit(StrBuf *sb);
extern void SbReset(StrBuf *sb);
extern void SbFree(StrBuf *sb);
extern void SbAppend(StrBuf *sb, const char *s, size_t n);
extern void SbAppendStr(StrBuf *sb, const char *s);
extern void SbAppendChar(StrBuf *sb, char c);
extern void SbAppendf(StrBuf *sb, const char *fmt,...) __attribute__((format(printf, 2, 3)));

/* sgctl.c */
extern const char *progname;
extern void SgError(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void SgUsageError(const char *cmd, const char *fmt,...) __attribute__((format(printf, 2, 3)));
extern bool SgIsHelpFlag(const char *arg);
extern int	SgOptionOther(const char *cmd, int opt, char **argv, void (*usage) (FILE *out));
extern bool SgConnOption(SgConnOpts *opts, int c, const char *arg);
extern bool SgParseSeconds(const char *s, double *out);
extern bool SgParseInt64(const char *s, int64_t *out);
extern double SgNow(void);

/* conn.c */
extern volatile sig_atomic_t sg_interrupted;
extern void SgInstallSignals(void);
extern PGconn *SgConnect(const SgConnOpts *opts);
extern PGresult *SgExec(PGconn *conn, const char *sql, int nparams,
						const char *const *params);
extern PGresult *SgExecOk(PGconn *conn, const char *sql, int nparams,
						  const char *const *params);
extern bool SgCommand(PGconn *conn, const char *sql);
extern void SgReportResult(const char *what, const PGresult *res);
extern bool SgResultIsCancel(const PGresult *res);
extern bool SgSleep(double seconds);

/* json.c */
typedef struct JsonPath
{
	char	  **parts;
	int			nparts;
} JsonPath;

extern bool JsonValidate(const char *s, size_t len, StrBuf *err);
extern bool JsonPathParse(const char *spec, JsonPath *path);
extern bool JsonGetPath(const char *s, size_t len, const JsonPath *path, StrBuf *out);
extern void JsonAppendString(StrBuf *sb, const char *s, size_t len);

/* http.c */
#define SG_HTTP_OK			0
#define SG_HTTP_BAD			1
#define SG_HTTP_TOO_LARGE	2
extern int	SgHttpListen(const char *cmd, const char *listen_at, char *shown,
						 size_t shownlen, bool *loopback, int *port);
extern int	SgHttpReadRequest(int fd, StrBuf *req, size_t max, int timeout_ms);
extern void SgHttpRespond(int fd, const char *status, const char *headers,
						  const char *ctype, const char *body, size_t len);
extern void SgHttpSetTimeouts(int fd, int timeout_ms);
extern void SgHttpClose(int fd);

/* the subcommands */
extern int	CmdProduce(int argc, char **argv, SgConnOpts *conn);
extern int	CmdTail(int argc, char **argv, SgConnOpts *conn);
extern int	CmdTop(int argc, char **argv, SgConnOpts *conn);
extern int	CmdVerify(int argc, char **argv, SgConnOpts *conn);
extern int	CmdMetrics(int argc, char **argv, SgConnOpts *conn);
extern int	CmdServe(int argc, char **argv, SgConnOpts *conn);

#endif							/* SGCTL_H */
