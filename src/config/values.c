/*
 * config/values.c — the text syntax of every scalar in the configuration:
 * integers, booleans, durations, sizes, IP literals, ip:port pairs and DNS
 * names.
 *
 * Pure functions of their input (no YAML, no positions, no allocation), so
 * the loader, tools and tests share one definition of each syntax. A failure
 * comes back as a static phrase that reads after the quoted input, which
 * lets the loader say `listen.port: "abc" is not a decimal integer` without
 * each parser knowing about keys or files.
 *
 * The syntaxes are strict on purpose: a number without a unit, a YAML 1.1
 * boolean such as "yes", or an octal-looking "010" is refused rather than
 * guessed at, because a DNS cache silently running with the wrong TTL or
 * port is worse than one that refuses to start.
 */
#include "config/config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

struct unit {
	const char *name;
	uint64_t factor;
};

/* A number-with-unit syntax: its units and what to say when it is wrong. */
struct unit_syntax {
	const struct unit *units;
	size_t n_units;
	const char *not_number, *no_unit, *bad_unit;
};

static const struct unit duration_units[] = {
	{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}, {"d", 86400 * 1000},
};

static const struct unit size_units[] = {
	{"B", 1},
	{"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000},
	{"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},
};

static const struct unit_syntax duration_syntax = {
	duration_units, sizeof duration_units / sizeof duration_units[0],
	"is not a duration (a whole number and a unit, e.g. \"10s\")",
	"has no unit (ms, s, m, h or d)",
	"has an unknown unit (use ms, s, m, h or d)",
};

static const struct unit_syntax size_syntax = {
	size_units, sizeof size_units / sizeof size_units[0],
	"is not a size (a whole number and a unit, e.g. \"64MiB\")",
	"has no unit (B, KiB, MiB, GiB, K, M or G)",
	"has an unknown unit (use B, KiB, MiB, GiB, K, M or G)",
};

static const char too_large[] = "is too large";

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Reads the decimal digits at *p (at least one), refusing overflow. */
static int read_digits(const char **p, uint64_t *out, const char **why)
{
	uint64_t v = 0;
	const char *s = *p;

	for (; is_digit(*s); s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10) {
			*why = too_large;
			return -1;
		}
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return 0;
}

/* A whole number immediately followed by exactly one unit: "10s", "64MiB". */
static int parse_with_unit(const char *text, const struct unit_syntax *syn, uint64_t *out,
			   const char **why)
{
	const char *p = text;
	uint64_t v;

	if (!is_digit(*p)) {
		*why = syn->not_number;
		return -1;
	}
	if (read_digits(&p, &v, why) < 0)
		return -1;
	if (*p == '\0') {
		*why = syn->no_unit;
		return -1;
	}
	for (size_t i = 0; i < syn->n_units; i++) {
		const struct unit *u = &syn->units[i];
		if (strcmp(p, u->name) != 0)
			continue;
		if (v > UINT64_MAX / u->factor) {
			*why = too_large;
			return -1;
		}
		*out = v * u->factor;
		return 0;
	}
	*why = is_digit(*p) || *p == '.' ? syn->not_number : syn->bad_unit;
	return -1;
}

int config_value_duration_ms(const char *text, uint64_t *out, const char **why)
{
	return parse_with_unit(text, &duration_syntax, out, why);
}

int config_value_size(const char *text, uint64_t *out, const char **why)
{
	return parse_with_unit(text, &size_syntax, out, why);
}

int config_parse_duration_ms(const char *text, uint64_t *out)
{
	const char *why;

	return config_value_duration_ms(text, out, &why);
}

int config_parse_size(const char *text, uint64_t *out)
{
	const char *why;

	return config_value_size(text, out, &why);
}

int config_value_uint(const char *text, uint64_t *out, const char **why)
{
	const char *p = text;
	uint64_t v;

	if (!is_digit(*p) || (p[0] == '0' && p[1] != '\0')) {
		*why = "is not a decimal integer";
		return -1;
	}
	if (read_digits(&p, &v, why) < 0)
		return -1;
	if (*p != '\0') {
		*why = "is not a decimal integer";
		return -1;
	}
	*out = v;
	return 0;
}

int config_value_bool(const char *text, bool *out, const char **why)
{
	if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
		*out = text[0] == 't';
		return 0;
	}
	*why = "is not true or false";
	return -1;
}

int config_value_ip(const char *text, struct config_ip *out, const char **why)
{
	memset(out, 0, sizeof *out);
	if (inet_pton(AF_INET, text, &out->v4) == 1)
		out->family = AF_INET;
	else if (inet_pton(AF_INET6, text, &out->v6) == 1)
		out->family = AF_INET6;
	else {
		*why = strchr(text, '/') ? "is a prefix, not a single IP address"
					 : "is not an IP address";
		return -1;
	}
	inet_ntop(out->family, out->family == AF_INET ? (const void *)&out->v4
						      : (const void *)&out->v6,
		  out->text, sizeof out->text);
	return 0;
}

/* The private and local ranges (RFC 1918, RFC 6598, loopback, link-local, RFC 4193). */
const char *const config_default_allow[] = {
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
	"169.254.0.0/16", "fc00::/7", "fe80::/10", "::1", NULL};

/* Does ip have any bit set past the first prefix bits? */
static bool host_bits_set(const struct config_ip *ip, unsigned prefix)
{
	const uint8_t *b = ip->family == AF_INET ? (const uint8_t *)&ip->v4
						 : (const uint8_t *)&ip->v6;
	unsigned bits = ip->family == AF_INET ? 32 : 128;

	for (unsigned i = prefix; i < bits; i++)
		if (b[i / 8] & (0x80 >> (i % 8)))
			return true;
	return false;
}

int config_value_cidr(const char *text, struct config_cidr *out, const char **why)
{
	char addr[64];
	const char *slash = strchr(text, '/');
	size_t n = slash ? (size_t)(slash - text) : strlen(text);
	uint64_t prefix;

	memset(out, 0, sizeof *out);
	if (n >= sizeof addr) {
		*why = "is not an IP network (\"10.0.0.0/8\", \"fd00::/8\" or one address)";
		return -1;
	}
	memcpy(addr, text, n);
	addr[n] = '\0';
	if (config_value_ip(addr, &out->ip, why) < 0) {
		*why = "is not an IP network (\"10.0.0.0/8\", \"fd00::/8\" or one address)";
		return -1;
	}
	unsigned bits = out->ip.family == AF_INET ? 32 : 128;
	prefix = bits;
	if (slash && (config_value_uint(slash + 1, &prefix, why) < 0 || prefix > bits)) {
		*why = out->ip.family == AF_INET ? "has a bad prefix length (0..32)"
						 : "has a bad prefix length (0..128)";
		return -1;
	}
	if (host_bits_set(&out->ip, (unsigned)prefix)) {
		*why = "has bits set past its prefix length (write the network address)";
		return -1;
	}
	out->prefix = (uint8_t)prefix;
	snprintf(out->text, sizeof out->text, "%s/%u", out->ip.text, out->prefix);
	return 0;
}

/*
 * Split "host[:port]" into host text and port text (NULL when absent).
 * Brackets are required around an IPv6 address only when a port follows;
 * with more than one colon and no brackets the whole text is an address.
 */
static int split_hostport(const char *text, char *host, size_t hostlen, const char **port,
			  const char **why)
{
	const char *end;

	*port = NULL;
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close || (close[1] != '\0' && close[1] != ':')) {
			*why = "is not ip, ip:port or [ipv6]:port";
			return -1;
		}
		if (close[1] == ':')
			*port = close + 2;
		text++;
		end = close;
	} else {
		const char *colon = strchr(text, ':');
		bool one_colon = colon && !strchr(colon + 1, ':');
		if (one_colon)
			*port = colon + 1;
		end = one_colon ? colon : text + strlen(text);
	}
	if ((size_t)(end - text) >= hostlen) {
		*why = "is not an IP address";
		return -1;
	}
	memcpy(host, text, (size_t)(end - text));
	host[end - text] = '\0';
	return 0;
}

int config_value_hostport(const char *text, uint16_t default_port,
			  struct config_hostport *out, const char **why)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port_text;
	struct config_ip ip;
	uint64_t port = default_port;

	if (split_hostport(text, host, sizeof host, &port_text, why) < 0 ||
	    config_value_ip(host, &ip, why) < 0)
		return -1;
	if (text[0] == '[' && ip.family != AF_INET6) {
		*why = "has brackets around an IPv4 address";
		return -1;
	}
	if (port_text && (config_value_uint(port_text, &port, why) < 0 || port < 1 ||
			  port > 65535)) {
		*why = "has a bad port (1..65535)";
		return -1;
	}
	if (port == 0) {
		*why = "needs a port (ip:port or [ipv6]:port)";
		return -1;
	}

	memset(out, 0, sizeof *out);
	out->addr_len = config_ip_sockaddr(&ip, (uint16_t)port, &out->addr);
	out->port_given = port_text != NULL;
	snprintf(out->text, sizeof out->text, ip.family == AF_INET ? "%s:%u" : "[%s]:%u",
		 ip.text, (unsigned)port);
	return 0;
}

socklen_t config_ip_sockaddr(const struct config_ip *ip, uint16_t port,
			     struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (ip->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr = ip->v4;
		return sizeof *sin;
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(port);
	sin6->sin6_addr = ip->v6;
	return sizeof *sin6;
}

static bool is_name_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
	       c == '_';
}

int config_value_name(char *name, const char **why)
{
	size_t len = strlen(name);

	if (len > 0 && name[len - 1] == '.')
		name[--len] = '\0';
	if (len == 0) {
		*why = "is not a name (empty, or the root)";
		return -1;
	}
	if (name[0] == '*') {
		*why = "is a wildcard; wildcard names are not supported";
		return -1;
	}
	if (len > 253) {
		*why = "is longer than 253 characters";
		return -1;
	}
	size_t label = 0;
	for (char *p = name;; p++) {
		if (*p == '.' || *p == '\0') {
			if (label == 0) {
				*why = "has an empty label";
				return -1;
			}
			if (label > 63) {
				*why = "has a label longer than 63 characters";
				return -1;
			}
			if (*p == '\0')
				return 0;
			label = 0;
			continue;
		}
		if (!is_name_char(*p)) {
			*why = "has a character other than letters, digits, '-', '_' and '.'";
			return -1;
		}
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
		label++;
	}
}
