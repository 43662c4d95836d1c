/*
 * cluster/names.c — owner names and addresses in the forms the
 * specification uses: service and endpoint names, dashed IPs (10-0-0-1,
 * 2001-db8--1) and reverse names (in-addr.arpa, ip6.arpa nibbles).
 */
#include "cluster/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>

static bool label_char(int ch)
{
	return isalnum(ch) || ch == '-' || ch == '_';
}

size_t cluster_name(uint8_t out[DNS_MAX_NAME], const uint8_t *apex, const char *const *labels)
{
	size_t n = 0, apex_len = dns_name_len(apex);

	for (; *labels; labels++) {
		size_t len = strlen(*labels);
		if (len == 0 || len > DNS_MAX_LABEL || n + 1 + len + apex_len > DNS_MAX_NAME)
			return 0;
		out[n++] = (uint8_t)len;
		for (size_t i = 0; i < len; i++) {
			unsigned char ch = (unsigned char)(*labels)[i];
			if (!label_char(ch))
				return 0;
			out[n++] = (uint8_t)tolower(ch);
		}
	}
	memcpy(out + n, apex, apex_len);
	return n + apex_len;
}

bool cluster_is_label(const char *text)
{
	size_t len = strlen(text);

	if (len == 0 || len > DNS_MAX_LABEL)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!label_char((unsigned char)text[i]))
			return false;
	return true;
}

unsigned cluster_name_labels(const uint8_t *name)
{
	unsigned n = 0;

	for (size_t pos = 0; pos < DNS_MAX_NAME && name[pos]; pos += 1 + name[pos])
		n++;
	return n;
}

void cluster_dashed_ip(const struct cluster_ip *ip, char out[64])
{
	char *p = out;

	inet_ntop(ip->family, ip->addr, out, 64);
	for (; *p; p++)
		if (*p == '.' || *p == ':')
			*p = '-';
	if (p > out && p[-1] == '-') {
		p[0] = '0';
		p[1] = '\0';
	}
}

size_t cluster_dashed_label(const struct cluster_ip *ip, uint8_t out[64])
{
	char text[64];
	size_t len;

	cluster_dashed_ip(ip, text);
	len = strlen(text);
	out[0] = (uint8_t)len;
	memcpy(out + 1, text, len);
	return 1 + len;
}

bool cluster_parse_dashed_ip(const uint8_t *label, size_t len, struct cluster_ip *out)
{
	char text[64];
	size_t dashes = 0;

	if (len == 0 || len >= sizeof text)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = (char)label[i];
		dashes += ch == '-';
		text[i] = ch;
	}
	text[len] = '\0';
	/* CoreDNS's rule: three dashes and no "::" is IPv4 (fd00-1--5 is not) */
	if (dashes == 3 && !strstr(text, "--") && !strchr(text, ':')) {
		for (char *p = text; *p; p++)
			if (*p == '-')
				*p = '.';
		out->family = AF_INET;
		return inet_pton(AF_INET, text, out->addr) == 1;
	}
	for (char *p = text; *p; p++)
		if (*p == '-')
			*p = ':';
	out->family = AF_INET6;
	return inet_pton(AF_INET6, text, out->addr) == 1;
}

static const uint8_t in_addr_arpa[] = "\7in-addr\4arpa";
static const uint8_t ip6_arpa[] = "\3ip6\4arpa";

/* One byte's decimal label. */
static size_t decimal_label(uint8_t *out, uint8_t v)
{
	size_t len = v >= 100 ? 3 : v >= 10 ? 2 : 1;

	out[0] = (uint8_t)len;
	for (size_t i = len; i > 0; i--, v /= 10)
		out[i] = (uint8_t)('0' + v % 10);
	return 1 + len;
}

size_t cluster_reverse_name(const struct cluster_ip *ip, uint8_t out[DNS_MAX_NAME])
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	if (ip->family == AF_INET) {
		for (int i = 3; i >= 0; i--)
			n += decimal_label(out + n, ip->addr[i]);
		memcpy(out + n, in_addr_arpa, sizeof in_addr_arpa);
		return n + sizeof in_addr_arpa;
	}
	for (int i = 15; i >= 0; i--) {
		out[n++] = 1;
		out[n++] = (uint8_t)hex[ip->addr[i] & 0xf];
		out[n++] = 1;
		out[n++] = (uint8_t)hex[ip->addr[i] >> 4];
	}
	memcpy(out + n, ip6_arpa, sizeof ip6_arpa);
	return n + sizeof ip6_arpa;
}

/* A decimal label 0..255 without a leading zero; -1 otherwise. */
static int decimal_of(const uint8_t *label)
{
	int v = 0;

	if (label[0] < 1 || label[0] > 3 || (label[0] > 1 && label[1] == '0'))
		return -1;
	for (unsigned i = 1; i <= label[0]; i++) {
		if (label[i] < '0' || label[i] > '9')
			return -1;
		v = v * 10 + (label[i] - '0');
	}
	return v <= 255 ? v : -1;
}

/* A one-character lower-case hex label's value; -1 otherwise. */
static int nibble_of(const uint8_t *label)
{
	if (label[0] != 1)
		return -1;
	if (label[1] >= '0' && label[1] <= '9')
		return label[1] - '0';
	return label[1] >= 'a' && label[1] <= 'f' ? label[1] - 'a' + 10 : -1;
}

bool cluster_parse_reverse_name(const uint8_t *name, struct cluster_ip *out)
{
	const uint8_t *p = name;

	memset(out, 0, sizeof *out);
	if (dns_name_is_subdomain(name, in_addr_arpa)) {
		for (int i = 3; i >= 0; i--) {
			int v = decimal_of(p);
			if (v < 0)
				return false;
			out->addr[i] = (uint8_t)v;
			p += 1 + p[0];
		}
		out->family = AF_INET;
		return memcmp(p, in_addr_arpa, sizeof in_addr_arpa) == 0;
	}
	if (!dns_name_is_subdomain(name, ip6_arpa))
		return false;
	for (int i = 31; i >= 0; i--) {
		int v = nibble_of(p);
		if (v < 0)
			return false;
		out->addr[i / 2] |= (uint8_t)(i % 2 ? v : v << 4);
		p += 2;
	}
	out->family = AF_INET6;
	return memcmp(p, ip6_arpa, sizeof ip6_arpa) == 0;
}

int cluster_reverse_zone(const uint8_t *name)
{
	if (dns_name_is_subdomain(name, in_addr_arpa))
		return 0;
	return dns_name_is_subdomain(name, ip6_arpa) ? 1 : -1;
}

const uint8_t *cluster_reverse_apex(int i)
{
	return i == 0 ? in_addr_arpa : ip6_arpa;
}

bool cluster_parse_ip(const char *text, struct cluster_ip *out)
{
	memset(out, 0, sizeof *out);
	if (inet_pton(AF_INET, text, out->addr) == 1) {
		out->family = AF_INET;
		return true;
	}
	if (inet_pton(AF_INET6, text, out->addr) == 1) {
		out->family = AF_INET6;
		return true;
	}
	return false;
}
