/*
 * cluster/names.c — owner names and addresses in the forms the
 * specification uses: service and endpoint names, dashed IPs (10-0-0-1,
 * 2001-db8--1) and reverse names (in-addr.arpa, ip6.arpa nibbles).
 */
#include "cluster/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
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

void cluster_dashed_ip(const struct cluster_ip *ip, char out[64])
{
	inet_ntop(ip->family, ip->addr, out, 64);
	for (char *p = out; *p; p++)
		if (*p == '.' || *p == ':')
			*p = '-';
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

size_t cluster_reverse_name(const struct cluster_ip *ip, uint8_t out[DNS_MAX_NAME])
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	if (ip->family == AF_INET) {
		for (int i = 3; i >= 0; i--) {
			char digits[4];
			int len = snprintf(digits, sizeof digits, "%u", ip->addr[i]);
			out[n++] = (uint8_t)len;
			memcpy(out + n, digits, (size_t)len);
			n += (size_t)len;
		}
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

bool cluster_is_reverse_name(const uint8_t *name)
{
	return dns_name_is_subdomain(name, in_addr_arpa) || dns_name_is_subdomain(name, ip6_arpa);
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
