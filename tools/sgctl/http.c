/*-------------------------------------------------------------------------
 *
 * http.c
 *	  The small HTTP/1.1 server of sgctl serve and sgctl metrics --listen:
 *	  listen on HOST:PORT, read one request head bounded in size and time,
 *	  write one response and close.
 *
 * One connection at a
 * time; every response closes the connection; a request head larger than
 * SG_HTTP_REQUEST_MAX or slower than the timeout is refused; a client that
 * stops reading is given up after the same timeout (SO_SNDTIMEO).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "sgctl.h"

static bool
http_write_all(int fd, const char *p, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, p, n);

		if (w < 0)
		{
			if (errno == EINTR && !sg_interrupted)
				continue;
			return false;
		}
		p += w;
		n -= (size_t) w;
	}
	return true;
}

/*
 * Write a whole response: status line, the given extra header lines (each
 * ending in "\r\n", may be NULL), Content-Type and Content-Length, close.
 */
void
SgHttpRespond(int fd, const char *status, const char *headers,
			  const char *ctype, const char *body, size_t len)
{
	StrBuf		out;

	SbInit(&out);
	SbAppendf(&out, "HTTP/1.1 %s\r\n%sContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			  status, headers ? headers : "", ctype, len);
	SbAppend(&out, body, len);
	(void) http_write_all(fd, out.data, out.len);
	SbFree(&out);
}

/*
 * Read the request head, up to its blank line, into req: SG_HTTP_OK, or
 * SG_HTTP_TOO_LARGE when it grows past max bytes, SG_HTTP_BAD on a time
 * out, a closed connection or a NUL byte.
 */
int
SgHttpReadRequest(int fd, StrBuf *req, size_t max, int timeout_ms)
{
	double		until = SgNow() + timeout_ms / 1000.0;

	while (strstr(req->data, "\r\n\r\n") == NULL && strstr(req->data, "\n\n") == NULL)
	{
		struct pollfd pfd = {fd, POLLIN, 0};
		char		buf[1024];
		double		left = until - SgNow();
		ssize_t		n;

		if (req->len > max)
			return SG_HTTP_TOO_LARGE;
		if (left <= 0 || sg_interrupted)
			return SG_HTTP_BAD;
		if (poll(&pfd, 1, (int) (left * 1000) + 1) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return SG_HTTP_BAD;
		if (memchr(buf, '\0', (size_t) n))
			return SG_HTTP_BAD;
		SbAppend(req, buf, (size_t) n);
	}
	return req->len > max ? SG_HTTP_TOO_LARGE : SG_HTTP_OK;
}

/* true for 127.0.0.0/8, ::1 and ::ffff:127.x.x.x */
static bool
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
	{
		const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6)
	{
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;

		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return true;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			return in6->sin6_addr.s6_addr[12] == 127;
	}
	return false;
}

/*
 * Listen on listen_at ("HOST:PORT", "[V6]:PORT"; an empty HOST is
 * 127.0.0.1).  Returns the socket, or -1 after reporting why.  shown gets
 * "host:port" as bound (PORT 0 picks one), *loopback whether it is a
 * loopback address, *port the port.
 */
int
SgHttpListen(const char *cmd, const char *listen_at, char *shown, size_t shownlen,
			 bool *loopback, int *port)
{
	char	   *spec = strdup(listen_at);
	char	   *colon = spec ? strrchr(spec, ':') : NULL;
	char	   *host = spec;
	struct addrinfo hints,
			   *ai = NULL;
	int			lfd = -1,
				one = 1,
				err;
	struct sockaddr_storage bound;
	socklen_t	blen = sizeof(bound);
	char		hbuf[NI_MAXHOST],
				pbuf[NI_MAXSERV];

	if (colon == NULL || colon[1] == '\0')
	{
		SgUsageError(cmd, "--listen takes HOST:PORT");
		free(spec);
		return -1;
	}
	*colon = '\0';
	if (host[0] == '[' && colon > host && colon[-1] == ']')
	{
		host++;
		colon[-1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	err = getaddrinfo(host[0] ? host : "127.0.0.1", colon + 1, &hints, &ai);
	if (err != 0)
	{
		SgError("cannot listen on \"%s\": %s", listen_at, gai_strerror(err));
		free(spec);
		return -1;
	}
	lfd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (lfd < 0 ||
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 ||
		listen(lfd, 16) < 0 ||
		getsockname(lfd, (struct sockaddr *) &bound, &blen) < 0)
	{
		SgError("cannot listen on \"%s\": %s", listen_at, strerror(errno));
		if (lfd >= 0)
			close(lfd);
		freeaddrinfo(ai);
		free(spec);
		return -1;
	}
	freeaddrinfo(ai);
	free(spec);
	*loopback = is_loopback((struct sockaddr *) &bound);
	*port = 0;
	shown[0] = '\0';
	if (getnameinfo((struct sockaddr *) &bound, blen, hbuf, sizeof(hbuf), pbuf, sizeof(pbuf),
					NI_NUMERICHOST | NI_NUMERICSERV) == 0)
	{
		snprintf(shown, shownlen, "%s%s%s:%s", strchr(hbuf, ':') ? "[" : "", hbuf,
				 strchr(hbuf, ':') ? "]" : "", pbuf);
		*port = atoi(pbuf);
	}
	return lfd;
}

/* give a client that stops reading or writing up after timeout_ms */
void
SgHttpSetTimeouts(int fd, int timeout_ms)
{
	struct timeval tv;

	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	(void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	(void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/*
 * Close a connection after its response: stop sending, then read and drop
 * what the client still sends (a request refused before it was all read)
 * for a moment, so that closing with unread data does not reset the
 * connection before the client has read the response.
 */
void
SgHttpClose(int fd)
{
	double		until = SgNow() + 0.5;
	size_t		dropped = 0;

	(void) shutdown(fd, SHUT_WR);
	while (dropped < 256 * 1024 && !sg_interrupted)
	{
		struct pollfd pfd = {fd, POLLIN, 0};
		char		buf[4096];
		double		left = until - SgNow();
		ssize_t		n;

		if (left <= 0 || poll(&pfd, 1, (int) (left * 1000) + 1) <= 0)
			break;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		dropped += (size_t) n;
	}
	close(fd);
}
