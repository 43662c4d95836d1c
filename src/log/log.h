/*
 * log — structured log lines on stderr, in logfmt or JSON.
 *
 * Owns: the process-wide level and format, and the formatting of one line:
 *   ts=2026-11-21T13:04:05.123Z level=info msg="listening" address=127.0.0.1
 *   {"ts":"2026-11-21T13:04:05.123Z","level":"info","msg":"listening","address":"127.0.0.1"}
 * Fields are given as NULL-terminated key/value string pairs; both formats
 * carry the same keys and values. logfmt quotes a value only when it must
 * (empty, or holding a space, '=', '"', '\' or a control character) and
 * escapes inside the quotes as JSON does (\" \\ \n \r \t, \u00XX), so no
 * value can end a line or forge a field. A line is at most 4 KiB: logfmt
 * cuts the last fields short; a JSON line too long keeps ts, level and msg
 * and says "truncated":"true", so every line stays valid JSON.
 *
 * Must never: be called on the per-query hot path (it formats and writes;
 * the query log hands records to its own thread, see querylog/), or print
 * secrets (callers pass what may be shown: never a token, a key or an
 * Authorization header).
 */
#ifndef LOCALDNS_LOG_H
#define LOCALDNS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON };

/* At start-up and on reload; lines being written meanwhile use either setting. */
void log_setup(enum log_level level, enum log_format format);
bool log_enabled(enum log_level level);

/* log_write(LOG_INFO, "listening", "address", "127.0.0.1", "port", "53", NULL) */
void log_write(enum log_level level, const char *msg, ...)
	__attribute__((sentinel));

/* The same with the fields as an array of n_pairs key/value pairs (at most
 * LOG_MAX_FIELDS are written): for lines whose fields come from a table. */
#define LOG_MAX_FIELDS 32
void log_write_fields(enum log_level level, const char *msg, const char *const *kv,
		      size_t n_pairs);

/*
 * An info line stamped `when` (CLOCK_REALTIME) instead of now, written
 * whatever log.level says: for events recorded earlier on another thread
 * and switched on by a key of their own (log.queries).
 */
void log_event_at(const struct timespec *when, const char *msg, ...)
	__attribute__((sentinel));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__, NULL)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__, NULL)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__, NULL)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__, NULL)

#endif
