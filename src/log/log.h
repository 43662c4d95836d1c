/*
 * log — structured log lines on stderr, in logfmt or JSON.
 *
 * Owns: the process-wide level and format, and the formatting of one line:
 *   ts=2026-11-21T13:04:05.123Z level=info msg="listening" address=127.0.0.1
 * Fields are given as NULL-terminated key/value string pairs.
 *
 * Must never: be called on the per-query hot path (it formats and writes),
 * or print secrets (callers pass what may be shown).
 */
#ifndef LOCALDNS_LOG_H
#define LOCALDNS_LOG_H

#include <stdbool.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON };

void log_setup(enum log_level level, enum log_format format);
bool log_enabled(enum log_level level);

/* log_write(LOG_INFO, "listening", "address", "127.0.0.1", "port", "53", NULL) */
void log_write(enum log_level level, const char *msg, ...)
	__attribute__((sentinel));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__, NULL)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__, NULL)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__, NULL)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__, NULL)

#endif
