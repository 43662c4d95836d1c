/*
 * dns/reply.c — reading a reply we wrote for what response rate limiting
 * keys it by (dns_reply_key, dns.h). A walk over the question, the answer
 * records and the authority records up to the first SOA; at most one name
 * copied besides the question's. No allocation.
 */
#include "dns/dns.h"
#include "dns/wire.h"

#include <string.h>

/* Step over one record at msg[*pos]; its owner into owner (lower-cased) and
 * its type into *type. false when it does not fit in len. */
static bool read_record(const uint8_t *msg, size_t len, size_t *pos, uint8_t owner[DNS_MAX_NAME],
			int *owner_len, uint16_t *type)
{
	*owner_len = dns_name_read(msg, len, pos, owner, true);
	if (*owner_len < 0 || len - *pos < 10)
		return false;
	*type = dns_get16(msg + *pos);
	size_t rdlen = dns_get16(msg + *pos + 8);
	if (len - *pos - 10 < rdlen)
		return false;
	*pos += 10 + rdlen;
	return true;
}

/* The owner of the first SOA in the authority section, or 0 when none. */
static size_t authority_soa(const uint8_t *msg, size_t len, size_t pos, uint8_t out[DNS_MAX_NAME])
{
	unsigned answers = dns_get16(msg + 6), authority = dns_get16(msg + 8);
	uint8_t owner[DNS_MAX_NAME];
	uint16_t type;
	int n;

	for (unsigned i = 0; i < answers; i++)
		if (!read_record(msg, len, &pos, owner, &n, &type))
			return 0;
	for (unsigned i = 0; i < authority; i++) {
		if (!read_record(msg, len, &pos, owner, &n, &type))
			return 0;
		if (type == DNS_T_SOA) {
			memcpy(out, owner, (size_t)n);
			return (size_t)n;
		}
	}
	return 0;
}

void dns_reply_key(const uint8_t *reply, size_t len, struct dns_reply_key *out)
{
	size_t pos = DNS_HEADER_LEN;
	int n;

	*out = (struct dns_reply_key){.kind = DNS_REPLY_ERROR};
	if (len < DNS_HEADER_LEN || dns_get16(reply + 4) != 1)
		return;
	unsigned rcode = reply[3] & 0xf;
	if (rcode != DNS_R_NOERROR && rcode != DNS_R_NXDOMAIN)
		return;
	n = dns_name_read(reply, len, &pos, out->name, true);
	if (n < 0 || len - pos < 4)
		return;
	out->name_len = (size_t)n;
	pos += 4;
	if (rcode == DNS_R_NXDOMAIN) {
		size_t zone = authority_soa(reply, len, pos, out->name);
		out->kind = DNS_REPLY_NXDOMAIN;
		out->name_len = zone ? zone : out->name_len;
		return;
	}
	out->kind = dns_get16(reply + 6) ? DNS_REPLY_ANSWER : DNS_REPLY_NODATA;
	out->type = dns_get16(reply + pos - 4);
}
