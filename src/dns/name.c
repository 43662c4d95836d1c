/*
 * dns/name — domain names: reading a (possibly compressed) name out of a
 * packet, text <-> wire conversion, length, lower-casing and the subdomain
 * test. Everything here works on bounded buffers and never trusts a length
 * byte further than the buffer it sits in.
 */
#include "dns/dns.h"
#include "dns/wire.h"
#include "util/hash.h"

#include <string.h>

/*
 * Strictly backward pointers already make loops impossible, but a chain of
 * pointers to pointers adds no bytes to the name, so without a cap a hostile
 * packet could make us hop once per two bytes of packet. A legitimate name
 * needs at most one hop per label.
 */
#define MAX_POINTER_HOPS ((DNS_MAX_NAME + 1) / 2)

int dns_name_read(const uint8_t *pkt, size_t len, size_t *pos,
		  uint8_t out[DNS_MAX_NAME], bool lower)
{
	size_t cur = *pos;
	size_t resume = 0; /* where the caller continues: set at the first pointer */
	size_t out_len = 0;
	unsigned hops = 0;

	for (;;) {
		if (cur >= len)
			return -1;
		uint8_t b = pkt[cur];

		if ((b & 0xC0) == 0xC0) {
			if (cur + 1 >= len || ++hops > MAX_POINTER_HOPS)
				return -1;
			size_t target = ((size_t)(b & 0x3F) << 8) | pkt[cur + 1];
			if (target >= cur)
				return -1;
			if (resume == 0)
				resume = cur + 2;
			cur = target;
			continue;
		}
		if (b & 0xC0)
			return -1; /* 0x40 extended and 0x80 reserved label types */
		if (b == 0)
			break;
		/* +1 for the length byte, +1 for the root label still to come */
		if (cur + 1 + b > len || out_len + 1 + b + 1 > DNS_MAX_NAME)
			return -1;
		out[out_len++] = b;
		for (size_t i = 1; i <= b; i++)
			out[out_len++] = lower ? dns_ascii_lower(pkt[cur + i]) : pkt[cur + i];
		cur += 1 + b;
	}
	out[out_len++] = 0;
	*pos = resume ? resume : cur + 1;
	return (int)out_len;
}

int dns_name_from_text(const char *text, uint8_t out[DNS_MAX_NAME])
{
	if (strcmp(text, ".") == 0) {
		out[0] = 0;
		return 1;
	}

	size_t out_len = 0;
	const char *p = text;

	while (*p) {
		size_t label = strcspn(p, ".");
		if (label == 0 || label > DNS_MAX_LABEL)
			return -1;
		if (out_len + 1 + label + 1 > DNS_MAX_NAME)
			return -1;
		out[out_len++] = (uint8_t)label;
		for (size_t i = 0; i < label; i++)
			out[out_len++] = dns_ascii_lower((uint8_t)p[i]);
		p += label;
		if (*p == '.')
			p++; /* the trailing dot is optional, so "a." and "a" agree */
	}
	if (out_len == 0)
		return -1; /* "" is not a name; the root is spelled "." */
	out[out_len++] = 0;
	return (int)out_len;
}

/* Bytes a name's text shows as themselves; every other one is written \DDD. */
static const bool plain_text_byte[256] = {
	['a' ... 'z'] = true, ['A' ... 'Z'] = true, ['0' ... '9'] = true,
	['-'] = true, ['_'] = true, ['*'] = true,
};

static bool label_is_plain(const uint8_t *label, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!plain_text_byte[label[i]])
			return false;
	return true;
}

/* The label's bytes at out + n, escaped; the new n, or 0 when out (outlen) has no room. */
static size_t escape_label(const uint8_t *label, size_t len, char *out, size_t n, size_t outlen)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t c = label[i];
		size_t width = plain_text_byte[c] ? 1 : 4;
		/* every label byte is still followed by a dot and the NUL,
		 * so passing this check also makes room for those */
		if (n + width + 2 > outlen)
			return 0;
		if (width == 1) {
			out[n++] = (char)c;
		} else {
			out[n++] = '\\';
			out[n++] = (char)('0' + c / 100);
			out[n++] = (char)('0' + c / 10 % 10);
			out[n++] = (char)('0' + c % 10);
		}
	}
	return n;
}

/*
 * A label of letters, digits, '-', '_' and '*' (nearly every one) is
 * copied whole: this runs for every question the resolver asks
 * (libunbound's API takes text), so it is on a miss's path.
 */
int dns_name_to_text(const uint8_t *name, char *out, size_t outlen)
{
	size_t n = 0;
	size_t pos = 0;

	if (name[0] == 0) {
		if (outlen < 2)
			return -1;
		memcpy(out, ".", 2);
		return 1;
	}
	while (name[pos] != 0) {
		uint8_t label = name[pos];
		const uint8_t *bytes = name + pos + 1;
		if (label > DNS_MAX_LABEL || pos + 1 + label >= DNS_MAX_NAME)
			return -1;
		if (label_is_plain(bytes, label)) {
			if (n + label + 2 > outlen) /* the label, its dot, the NUL */
				return -1;
			memcpy(out + n, bytes, label);
			n += label;
		} else if (!(n = escape_label(bytes, label, out, n, outlen))) {
			return -1;
		}
		out[n++] = '.';
		pos += 1 + label;
	}
	out[n] = '\0';
	return (int)n;
}

uint64_t dns_name_hash(const uint8_t *name, size_t len)
{
	return fnv1a(FNV1A_SEED, name, len);
}

size_t dns_name_len(const uint8_t *name)
{
	size_t pos = 0;

	/* stops at DNS_MAX_NAME so a corrupt name cannot walk off its buffer */
	while (pos < DNS_MAX_NAME && name[pos] != 0)
		pos += 1 + name[pos];
	return pos + 1;
}

bool dns_name_is_subdomain(const uint8_t *name, const uint8_t *suffix)
{
	size_t name_len = dns_name_len(name);
	size_t suffix_len = dns_name_len(suffix);

	if (suffix_len > name_len)
		return false;

	/* The suffix must start on one of name's label boundaries, otherwise
	 * "xcluster.local" would count as being under "cluster.local". */
	size_t start = name_len - suffix_len;
	size_t pos = 0;
	while (pos < start)
		pos += 1 + name[pos];
	return pos == start && memcmp(name + pos, suffix, suffix_len) == 0;
}

/*
 * Eight bytes lower-cased at once: a byte gets 0x20 when it is below 0x80,
 * at least 'A' and not above 'Z'. Each test adds a constant to the byte's
 * low seven bits, which cannot carry into the next byte, and reads the top
 * bit.
 */
static uint64_t lower8(uint64_t x)
{
	const uint64_t ones = 0x0101010101010101ull;
	uint64_t low7 = x & (0x7f * ones);
	uint64_t at_least_a = low7 + (0x80 - 'A') * ones;
	uint64_t above_z = low7 + (0x7f - 'Z') * ones;
	uint64_t capital = at_least_a & ~above_z & ~x & (0x80 * ones);

	return x | (capital >> 2);
}

/*
 * Length bytes are at most 63, below 'A', so they pass through unchanged and
 * the name can be lowered as a flat byte string, eight bytes at a time (the
 * last eight may overlap the ones before: lowering twice changes nothing).
 * Every query's name goes through here.
 */
void dns_name_copy_lower(uint8_t *dst, const uint8_t *src, size_t len)
{
	uint64_t w;

	if (len < 8) {
		for (size_t i = 0; i < len; i++)
			dst[i] = (uint8_t)(src[i] | ((uint8_t)(src[i] - 'A') < 26 ? 0x20 : 0));
		return;
	}
	for (size_t i = 0; i + 8 < len; i += 8) {
		memcpy(&w, src + i, 8);
		w = lower8(w);
		memcpy(dst + i, &w, 8);
	}
	memcpy(&w, src + len - 8, 8);
	w = lower8(w);
	memcpy(dst + len - 8, &w, 8);
}

void dns_query_set_name(struct dns_query *q, const uint8_t *name)
{
	size_t len = dns_name_len(name);
	uint8_t labels = 0;

	for (size_t pos = 0; pos + 1 < len; pos += 1 + name[pos])
		labels++;
	memcpy(q->qname, name, len);
	memcpy(q->qname_orig, name, len);
	q->qname_len = (uint16_t)len;
	q->qname_labels = labels;
}

bool dns_rdata_names(uint16_t type, struct dns_rdata_names *out)
{
	enum { MD = 3, MF = 4, MB = 7, MG = 8, MR = 9, MINFO = 14, RP = 17, AFSDB = 18, RT = 21,
	       DNAME = 39, SOA_FIXED = 20 };

	switch (type) {
	case DNS_T_NS: case DNS_T_CNAME: case DNS_T_PTR:
		*out = (struct dns_rdata_names){0, 1, 0, true};
		return true;
	case DNS_T_MX:
		*out = (struct dns_rdata_names){2, 1, 0, true};
		return true;
	case DNS_T_SOA:
		*out = (struct dns_rdata_names){0, 2, SOA_FIXED, true};
		return true;
	case DNAME: case MD: case MF: case MB: case MG: case MR:
		*out = (struct dns_rdata_names){0, 1, 0, false};
		return true;
	case AFSDB: case RT:
		*out = (struct dns_rdata_names){2, 1, 0, false};
		return true;
	case DNS_T_SRV:
		*out = (struct dns_rdata_names){6, 1, 0, false};
		return true;
	case MINFO: case RP:
		*out = (struct dns_rdata_names){0, 2, 0, false};
		return true;
	default:
		return false;
	}
}
