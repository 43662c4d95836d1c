/* log — see log.h. One write(2) per line so concurrent threads never interleave. */
#include "log/log.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096

/* A reload may change them while other threads write lines. */
static atomic_int min_level = LOG_INFO;
static atomic_int line_format = LOG_FORMAT_LOGFMT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(enum log_level level, enum log_format format)
{
	atomic_store_explicit(&min_level, level, memory_order_relaxed);
	atomic_store_explicit(&line_format, format, memory_order_relaxed);
}

bool log_enabled(enum log_level level)
{
	return (int)level >= atomic_load_explicit(&min_level, memory_order_relaxed);
}

static void format_timestamp(const struct timespec *when, char *out, size_t outlen)
{
	struct tm tm;

	gmtime_r(&when->tv_sec, &tm);
	size_t n = strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, outlen - n, ".%03ldZ", when->tv_nsec / 1000000);
}

static bool is_control(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

/* Empty, or a byte that would split the pair or the line: quote it. */
static bool logfmt_needs_quotes(const char *v)
{
	if (*v == '\0')
		return true;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p == ' ' || *p == '=' || *p == '"' || *p == '\\' || is_control(*p))
			return true;
	return false;
}

/* One byte as it appears inside logfmt quotes: the escapes JSON uses. */
static size_t logfmt_escape(unsigned char c, char out[7])
{
	static const char hex[] = "0123456789abcdef";

	switch (c) {
	case '"':
	case '\\':
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	case '\n':
		memcpy(out, "\\n", 2);
		return 2;
	case '\r':
		memcpy(out, "\\r", 2);
		return 2;
	case '\t':
		memcpy(out, "\\t", 2);
		return 2;
	}
	if (is_control(c)) {
		memcpy(out, "\\u00", 4);
		out[4] = hex[c >> 4];
		out[5] = hex[c & 0xf];
		return 6;
	}
	out[0] = (char)c;
	return 1;
}

/* Appends v; a value cut short by the line limit still gets its closing quote. */
static void append_logfmt_value(char *line, size_t cap, size_t *len, const char *v)
{
	bool quote = logfmt_needs_quotes(v);
	size_t n = *len;
	char piece[7];

	if (quote && n < cap)
		line[n++] = '"';
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		size_t w = logfmt_escape(*p, piece);
		if (n + w + (quote ? 1 : 0) > cap)
			break;
		memcpy(line + n, piece, w);
		n += w;
	}
	if (quote && n < cap)
		line[n++] = '"';
	*len = n;
}

/* A line's key/value pairs: kv[2i] the key, kv[2i+1] the value (NULL: ""). */
struct fields {
	const char *kv[2 * LOG_MAX_FIELDS];
	size_t n;
};

static size_t format_logfmt(char *line, size_t cap, const char *ts,
			    enum log_level level, const char *msg, const struct fields *f)
{
	size_t len = (size_t)snprintf(line, cap, "ts=%s level=%s msg=", ts,
				      level_names[level]);
	append_logfmt_value(line, cap, &len, msg);
	for (size_t i = 0; i < f->n; i++) {
		const char *k = f->kv[2 * i], *v = f->kv[2 * i + 1];
		if (len + strlen(k) + 3 >= cap)
			break;
		len += (size_t)snprintf(line + len, cap - len, " %s=", k);
		append_logfmt_value(line, cap, &len, v ? v : "");
	}
	return len;
}

static json_object *json_head(const char *ts, enum log_level level, const char *msg)
{
	json_object *obj = json_object_new_object();

	json_object_object_add(obj, "ts", json_object_new_string(ts));
	json_object_object_add(obj, "level", json_object_new_string(level_names[level]));
	json_object_object_add(obj, "msg", json_object_new_string(msg));
	return obj;
}

/* obj as one line into line[0..cap); 0 when it does not fit. */
static size_t json_put(json_object *obj, char *line, size_t cap)
{
	size_t n;
	const char *text = json_object_to_json_string_length(
		obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);

	if (n >= cap) {
		json_object_put(obj);
		return 0;
	}
	memcpy(line, text, n);
	json_object_put(obj);
	return n;
}

static size_t format_json(char *line, size_t cap, const char *ts,
			  enum log_level level, const char *msg, const struct fields *f)
{
	json_object *obj = json_head(ts, level, msg);

	for (size_t i = 0; i < f->n; i++) {
		const char *k = f->kv[2 * i], *v = f->kv[2 * i + 1];
		json_object_object_add(obj, k, json_object_new_string(v ? v : ""));
	}
	size_t len = json_put(obj, line, cap);
	if (len > 0)
		return len;
	/* Half a JSON object is no JSON at all: keep what says what happened. */
	obj = json_head(ts, level, msg);
	json_object_object_add(obj, "truncated", json_object_new_string("true"));
	return json_put(obj, line, cap);
}

static void write_line(enum log_level level, const struct timespec *when, const char *msg,
		       const struct fields *f)
{
	char ts[40], line[LINE_MAX_BYTES];
	size_t len;

	format_timestamp(when, ts, sizeof ts);
	if (atomic_load_explicit(&line_format, memory_order_relaxed) == LOG_FORMAT_JSON)
		len = format_json(line, sizeof line - 1, ts, level, msg, f);
	else
		len = format_logfmt(line, sizeof line - 1, ts, level, msg, f);
	line[len++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, len);
	(void)ignored;
}

/* The key/value pairs of a NULL-terminated argument list (past LOG_MAX_FIELDS: cut). */
static void gather_fields(struct fields *f, va_list ap)
{
	const char *k;

	f->n = 0;
	while (f->n < LOG_MAX_FIELDS && (k = va_arg(ap, const char *)) != NULL) {
		f->kv[2 * f->n] = k;
		f->kv[2 * f->n + 1] = va_arg(ap, const char *);
		f->n++;
	}
}

void log_write(enum log_level level, const char *msg, ...)
{
	struct timespec now;
	struct fields f;
	va_list ap;

	if (!log_enabled(level))
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	va_start(ap, msg);
	gather_fields(&f, ap);
	va_end(ap);
	write_line(level, &now, msg, &f);
}

void log_write_fields(enum log_level level, const char *msg, const char *const *kv,
		      size_t n_pairs)
{
	struct timespec now;
	struct fields f = {.n = n_pairs < LOG_MAX_FIELDS ? n_pairs : LOG_MAX_FIELDS};

	if (!log_enabled(level))
		return;
	memcpy(f.kv, kv, 2 * f.n * sizeof *kv);
	clock_gettime(CLOCK_REALTIME, &now);
	write_line(level, &now, msg, &f);
}

void log_event_at(const struct timespec *when, const char *msg, ...)
{
	struct fields f;
	va_list ap;

	va_start(ap, msg);
	gather_fields(&f, ap);
	va_end(ap);
	write_line(LOG_INFO, when, msg, &f);
}
