/* log — see log.h. One write(2) per line so concurrent threads never interleave. */
#include "log/log.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum log_level min_level = LOG_INFO;
static enum log_format line_format = LOG_FORMAT_LOGFMT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(enum log_level level, enum log_format format)
{
	min_level = level;
	line_format = format;
}

bool log_enabled(enum log_level level)
{
	return level >= min_level;
}

static void format_timestamp(char *out, size_t outlen)
{
	struct timeval tv;
	struct tm tm;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	size_t n = strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, outlen - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
}

/* logfmt quotes a value only when it must: empty, or holding space, '=' or '"'. */
static void append_logfmt_value(char *line, size_t cap, size_t *len, const char *v)
{
	bool quote = *v == '\0' || strpbrk(v, " =\"\t\n\\") != NULL;
	size_t n = *len;

	if (quote && n < cap)
		line[n++] = '"';
	for (; *v && n + 2 < cap; v++) {
		if (quote && (*v == '"' || *v == '\\')) {
			line[n++] = '\\';
			line[n++] = *v;
		} else if (*v == '\n' || *v == '\t') {
			line[n++] = ' ';
		} else {
			line[n++] = *v;
		}
	}
	if (quote && n < cap)
		line[n++] = '"';
	*len = n;
}

static size_t format_logfmt(char *line, size_t cap, const char *ts,
			    enum log_level level, const char *msg, va_list ap)
{
	size_t len = (size_t)snprintf(line, cap, "ts=%s level=%s msg=", ts,
				      level_names[level]);
	append_logfmt_value(line, cap, &len, msg);
	for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
		const char *v = va_arg(ap, const char *);
		if (len + strlen(k) + 3 >= cap)
			break;
		len += (size_t)snprintf(line + len, cap - len, " %s=", k);
		append_logfmt_value(line, cap, &len, v ? v : "");
	}
	return len;
}

static size_t format_json(char *line, size_t cap, const char *ts,
			  enum log_level level, const char *msg, va_list ap)
{
	json_object *obj = json_object_new_object();

	json_object_object_add(obj, "ts", json_object_new_string(ts));
	json_object_object_add(obj, "level", json_object_new_string(level_names[level]));
	json_object_object_add(obj, "msg", json_object_new_string(msg));
	for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
		const char *v = va_arg(ap, const char *);
		json_object_object_add(obj, k, json_object_new_string(v ? v : ""));
	}
	const char *text = json_object_to_json_string_ext(
		obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	size_t len = (size_t)snprintf(line, cap, "%s", text);
	json_object_put(obj);
	return len < cap ? len : cap - 1;
}

void log_write(enum log_level level, const char *msg, ...)
{
	char ts[40], line[4096];
	va_list ap;
	size_t len;

	if (!log_enabled(level))
		return;
	format_timestamp(ts, sizeof ts);
	va_start(ap, msg);
	if (line_format == LOG_FORMAT_JSON)
		len = format_json(line, sizeof line - 1, ts, level, msg, ap);
	else
		len = format_logfmt(line, sizeof line - 1, ts, level, msg, ap);
	va_end(ap);
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, len);
	(void)ignored;
}
