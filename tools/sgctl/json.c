/*-------------------------------------------------------------------------
 *
 * json.c
 *	  A small JSON scanner for sgctl produce: checks that an input line is
 *	  one JSON value that jsonb will take, and extracts a field (.a.b) for
 *	  the event key or dedup key.
 *
 * The check runs before anything is sent, so a broken line is reported
 * with its line number and never reaches the server as part of a batch.
 * Besides RFC 8259 syntax it refuses what jsonb refuses although JSON
 * allows it: the escape \u0000 and unpaired UTF-16 surrogates.  Nesting is
 * limited to JSON_MAX_DEPTH levels (the scanner is recursive).
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "sgctl.h"

#define JSON_MAX_DEPTH 2000

typedef struct JsonScan
{
	const char *p;
	const char *start;
	const char *end;
	StrBuf	   *err;
} JsonScan;

static bool scan_value(JsonScan *js, int depth);

static bool
fail(JsonScan *js, const char *what)
{
	if (js->err)
	{
		SbReset(js->err);
		if (js->p >= js->end)
			SbAppendf(js->err, "%s at end of input", what);
		else
			SbAppendf(js->err, "%s at character %zu", what, (size_t) (js->p - js->start) + 1);
	}
	return false;
}

static void
skip_ws(JsonScan *js)
{
	while (js->p < js->end &&
		   (*js->p == ' ' || *js->p == '\t' || *js->p == '\n' || *js->p == '\r'))
		js->p++;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool
read_hex4(JsonScan *js, unsigned *out)
{
	unsigned	v = 0;
	int			i;

	if (js->end - js->p < 4)
		return fail(js, "incomplete \\u escape");
	for (i = 0; i < 4; i++)
	{
		int			h = hexval(js->p[i]);

		if (h < 0)
			return fail(js, "invalid \\u escape");
		v = v * 16 + (unsigned) h;
	}
	js->p += 4;
	*out = v;
	return true;
}

static void
append_utf8(StrBuf *out, unsigned cp)
{
	char		b[4];

	if (cp < 0x80)
	{
		SbAppendChar(out, (char) cp);
		return;
	}
	if (cp < 0x800)
	{
		b[0] = (char) (0xC0 | (cp >> 6));
		b[1] = (char) (0x80 | (cp & 0x3F));
		SbAppend(out, b, 2);
	}
	else if (cp < 0x10000)
	{
		b[0] = (char) (0xE0 | (cp >> 12));
		b[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		b[2] = (char) (0x80 | (cp & 0x3F));
		SbAppend(out, b, 3);
	}
	else
	{
		b[0] = (char) (0xF0 | (cp >> 18));
		b[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
		b[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
		b[3] = (char) (0x80 | (cp & 0x3F));
		SbAppend(out, b, 4);
	}
}

/* a string at js->p (the opening quote); decoded into out when given */
static bool
scan_string(JsonScan *js, StrBuf *out)
{
	js->p++;					/* the quote */
	while (js->p < js->end)
	{
		unsigned char c = (unsigned char) *js->p;

		if (c == '"')
		{
			js->p++;
			return true;
		}
		if (c < 0x20)
			return fail(js, "control character in string");
		if (c != '\\')
		{
			if (out)
				SbAppendChar(out, (char) c);
			js->p++;
			continue;
		}
		js->p++;
		if (js->p >= js->end)
			break;
		c = (unsigned char) *js->p++;
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				if (out)
					SbAppendChar(out, (char) c);
				break;
			case 'b':
				if (out)
					SbAppendChar(out, '\b');
				break;
			case 'f':
				if (out)
					SbAppendChar(out, '\f');
				break;
			case 'n':
				if (out)
					SbAppendChar(out, '\n');
				break;
			case 'r':
				if (out)
					SbAppendChar(out, '\r');
				break;
			case 't':
				if (out)
					SbAppendChar(out, '\t');
				break;
			case 'u':
				{
					unsigned	cp;

					if (!read_hex4(js, &cp))
						return false;
					if (cp == 0)
						return fail(js, "\\u0000 (jsonb cannot store it)");
					if (cp >= 0xDC00 && cp <= 0xDFFF)
						return fail(js, "unpaired Unicode low surrogate");
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						unsigned	lo;

						if (js->end - js->p < 2 || js->p[0] != '\\' || js->p[1] != 'u')
							return fail(js, "unpaired Unicode high surrogate");
						js->p += 2;
						if (!read_hex4(js, &lo))
							return false;
						if (lo < 0xDC00 || lo > 0xDFFF)
							return fail(js, "invalid Unicode surrogate pair");
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					if (out)
						append_utf8(out, cp);
					break;
				}
			default:
				js->p--;
				return fail(js, "invalid escape in string");
		}
	}
	return fail(js, "unterminated string");
}

static bool
scan_number(JsonScan *js)
{
	const char *p = js->p;

	if (p < js->end && *p == '-')
		p++;
	if (p >= js->end)
		return fail(js, "invalid number");
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (p < js->end && *p >= '0' && *p <= '9')
			p++;
	else
		return fail(js, "invalid number");
	if (p < js->end && *p == '.')
	{
		p++;
		if (p >= js->end || *p < '0' || *p > '9')
		{
			js->p = p;
			return fail(js, "invalid number");
		}
		while (p < js->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < js->end && (*p == 'e' || *p == 'E'))
	{
		p++;
		if (p < js->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= js->end || *p < '0' || *p > '9')
		{
			js->p = p;
			return fail(js, "invalid number");
		}
		while (p < js->end && *p >= '0' && *p <= '9')
			p++;
	}
	js->p = p;
	return true;
}

static bool
scan_literal(JsonScan *js, const char *word)
{
	size_t		n = strlen(word);

	if ((size_t) (js->end - js->p) < n || memcmp(js->p, word, n) != 0)
		return fail(js, "invalid token");
	js->p += n;
	return true;
}

static bool
scan_value(JsonScan *js, int depth)
{
	skip_ws(js);
	if (js->p >= js->end)
		return fail(js, "expected a value");
	if (depth > JSON_MAX_DEPTH)
		return fail(js, "nesting too deep");
	switch (*js->p)
	{
		case '{':
			js->p++;
			skip_ws(js);
			if (js->p < js->end && *js->p == '}')
			{
				js->p++;
				return true;
			}
			for (;;)
			{
				skip_ws(js);
				if (js->p >= js->end || *js->p != '"')
					return fail(js, "expected a member name");
				if (!scan_string(js, NULL))
					return false;
				skip_ws(js);
				if (js->p >= js->end || *js->p != ':')
					return fail(js, "expected \":\"");
				js->p++;
				if (!scan_value(js, depth + 1))
					return false;
				skip_ws(js);
				if (js->p < js->end && *js->p == ',')
				{
					js->p++;
					continue;
				}
				if (js->p < js->end && *js->p == '}')
				{
					js->p++;
					return true;
				}
				return fail(js, "expected \",\" or \"}\"");
			}
		case '[':
			js->p++;
			skip_ws(js);
			if (js->p < js->end && *js->p == ']')
			{
				js->p++;
				return true;
			}
			for (;;)
			{
				if (!scan_value(js, depth + 1))
					return false;
				skip_ws(js);
				if (js->p < js->end && *js->p == ',')
				{
					js->p++;
					continue;
				}
				if (js->p < js->end && *js->p == ']')
				{
					js->p++;
					return true;
				}
				return fail(js, "expected \",\" or \"]\"");
			}
		case '"':
			return scan_string(js, NULL);
		case 't':
			return scan_literal(js, "true");
		case 'f':
			return scan_literal(js, "false");
		case 'n':
			return scan_literal(js, "null");
		default:
			if (*js->p == '-' || (*js->p >= '0' && *js->p <= '9'))
				return scan_number(js);
			return fail(js, "invalid token");
	}
}

/* exactly one JSON value (surrounded by white space); err gets the reason */
bool
JsonValidate(const char *s, size_t len, StrBuf *err)
{
	JsonScan	js = {s, s, s + len, err};

	if (!scan_value(&js, 0))
		return false;
	skip_ws(&js);
	if (js.p != js.end)
		return fail(&js, "unexpected data after the value");
	return true;
}

/* ".a.b" or "a.b" into its parts; false on an empty part */
bool
JsonPathParse(const char *spec, JsonPath *path)
{
	const char *p = spec;

	path->parts = NULL;
	path->nparts = 0;
	if (*p == '.')
		p++;
	if (*p == '\0')
		return false;
	for (;;)
	{
		const char *dot = strchr(p, '.');
		size_t		n = dot ? (size_t) (dot - p) : strlen(p);

		if (n == 0)
			return false;
		path->parts = realloc(path->parts, sizeof(char *) * (path->nparts + 1));
		if (path->parts == NULL)
			return false;
		path->parts[path->nparts] = strndup(p, n);
		path->nparts++;
		if (!dot)
			return true;
		p = dot + 1;
	}
}

/*
 * The value at path in the (valid) JSON text s, as the event key text:
 * a string's decoded contents, any other value's JSON text.  False when a
 * part is missing, a step is not an object, or the value is null.
 */
bool
JsonGetPath(const char *s, size_t len, const JsonPath *path, StrBuf *out)
{
	JsonScan	js = {s, s, s + len, NULL};
	StrBuf		name;
	int			i;
	bool		found = false;

	SbInit(&name);
	for (i = 0; i < path->nparts; i++)
	{
		skip_ws(&js);
		if (js.p >= js.end || *js.p != '{')
			goto done;
		js.p++;
		found = false;
		for (;;)
		{
			skip_ws(&js);
			if (js.p >= js.end || *js.p != '"')
				goto done;	/* "}" of an object without the member */
			SbReset(&name);
			if (!scan_string(&js, &name))
				goto done;
			skip_ws(&js);
			js.p++;				/* ':' */
			if (strlen(name.data) == name.len && strcmp(name.data, path->parts[i]) == 0)
			{
				/* jsonb keeps the last of duplicate names; so do we */
				const char *save = js.p;
				const char *later = NULL;

				if (!scan_value(&js, 0))
					goto done;
				found = true;
				for (;;)
				{
					skip_ws(&js);
					if (js.p >= js.end || *js.p != ',')
						break;
					js.p++;
					skip_ws(&js);
					SbReset(&name);
					if (!scan_string(&js, &name))
						goto done;
					skip_ws(&js);
					js.p++;
					if (strlen(name.data) == name.len && strcmp(name.data, path->parts[i]) == 0)
						later = js.p;
					if (!scan_value(&js, 0))
						goto done;
				}
				js.p = later ? later : save;
				break;
			}
			if (!scan_value(&js, 0))
				goto done;
			skip_ws(&js);
			if (js.p < js.end && *js.p == ',')
			{
				js.p++;
				continue;
			}
			goto done;
		}
		if (!found)
			goto done;
	}
	/* js.p is at the value */
	skip_ws(&js);
	SbReset(out);
	if (*js.p == '"')
		found = scan_string(&js, out);
	else if (*js.p == 'n')
		found = false;
	else
	{
		const char *start = js.p;

		found = scan_value(&js, 0);
		if (found)
			SbAppend(out, start, (size_t) (js.p - start));
	}
done:
	SbFree(&name);
	return found && (path->nparts > 0);
}

/* s as a JSON string literal */
void
JsonAppendString(StrBuf *sb, const char *s, size_t len)
{
	size_t		i;

	SbAppendChar(sb, '"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		switch (c)
		{
			case '"':
				SbAppend(sb, "\\\"", 2);
				break;
			case '\\':
				SbAppend(sb, "\\\\", 2);
				break;
			case '\n':
				SbAppend(sb, "\\n", 2);
				break;
			case '\r':
				SbAppend(sb, "\\r", 2);
				break;
			case '\t':
				SbAppend(sb, "\\t", 2);
				break;
			default:
				if (c < 0x20)
					SbAppendf(sb, "\\u%04x", c);
				else
					SbAppendChar(sb, (char) c);
		}
	}
	SbAppendChar(sb, '"');
}
