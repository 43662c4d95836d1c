/*
 * dns/write — building replies: the response writer (header, echoed
 * question, records with name compression, the EDNS0 OPT record, clean
 * truncation) and dns_error_reply for queries we cannot or will not parse.
 * Every byte written is checked against the writer's limit first.
 */
#include "dns/dns.h"
#include "dns/wire.h"

#include <string.h>

#define RR_FIXED_LEN 10   /* type, class, TTL, rdlength */
#define OPT_RR_LEN 11     /* root owner + RR_FIXED_LEN */
#define MAX_POINTER 0x3FFF
#define FLAGS_OPCODE_MASK 0x7800
#define FLAGS_RCODE_MASK 0x000F

/*
 * BADVERS and friends need OPT's extended-rcode byte. Without OPT the low
 * four bits alone would read as NOERROR (16 & 0xF == 0), a lie; SERVFAIL
 * at least tells the client the answer is not usable. In practice BADVERS
 * only arises from a query that carried OPT, so this is a safety net.
 */
static uint16_t header_rcode(uint16_t rcode, bool has_opt)
{
	if (rcode > FLAGS_RCODE_MASK && !has_opt)
		return DNS_R_SERVFAIL;
	return rcode & FLAGS_RCODE_MASK;
}

#define COOKIE_OPTION_LEN (4 + DNS_CLIENT_COOKIE_LEN + DNS_SERVER_COOKIE_LEN)

/*
 * Room for the COOKIE answer is kept whenever the query brought a cookie,
 * since the caller decides to set one only after begin. A reply may carry
 * the client cookie only together with a server cookie: RFC 7873 5.3 has
 * clients discard a reply whose COOKIE lacks one.
 */
static size_t opt_record_len(const struct dns_query *q)
{
	if (!q->has_edns)
		return 0;
	return OPT_RR_LEN + (q->cookie_len ? COOKIE_OPTION_LEN : 0);
}

void dns_response_set_server_cookie(struct dns_writer *w,
				    const uint8_t cookie[DNS_SERVER_COOKIE_LEN])
{
	if (!w->q->has_edns || w->q->cookie_len < DNS_CLIENT_COOKIE_LEN)
		return;
	memcpy(w->server_cookie, cookie, DNS_SERVER_COOKIE_LEN);
	w->has_server_cookie = true;
}

static void write_question(uint8_t *at, const struct dns_query *q)
{
	memcpy(at, q->qname_orig, q->qname_len);
	dns_put16(at + q->qname_len, q->qtype);
	dns_put16(at + q->qname_len + 2, q->qclass);
}

/* A name we wrote at off, name_len bytes long uncompressed, as a pointer target. */
static void remember_name_offset(struct dns_writer *w, size_t off, size_t name_len)
{
	if (w->ncomp < DNS_COMPRESS_SLOTS && off <= MAX_POINTER) {
		w->comp[w->ncomp] = (uint16_t)off;
		w->comp_len[w->ncomp++] = (uint8_t)name_len;
		w->comp_lens[name_len / 64] |= 1ull << (name_len % 64);
	}
}

/* The question's labels first, so that they are the targets tried first. */
static void remember_question_labels(struct dns_writer *w)
{
	const uint8_t *name = w->q->qname_orig;
	size_t len = w->q->qname_len;

	w->ncomp = 0;
	memset(w->comp_lens, 0, sizeof w->comp_lens);
	for (size_t pos = 0; pos < len && name[pos] != 0; pos += 1 + name[pos])
		remember_name_offset(w, DNS_HEADER_LEN + pos, len - pos);
	w->comp_base = w->ncomp;
	w->comp_question = true;
}

void dns_response_begin(struct dns_writer *w, uint8_t *buf, size_t limit,
			const struct dns_query *q, enum dns_rcode rcode)
{
	size_t qname_len = q->qname_len;

	w->buf = buf;
	w->limit = limit;
	w->len = 0;
	w->question_end = 0;
	w->reserve = opt_record_len(q);
	w->q = q;
	memset(w->count, 0, sizeof(w->count));
	w->section = DNS_SEC_ANSWER;
	w->rcode = (uint16_t)rcode;
	w->has_server_cookie = false;
	w->ncomp = 0;
	w->comp_base = 0;
	w->comp_question = false;

	/* len == 0 marks a writer that never started: adds are refused and
	 * finish returns 0, so a misuse cannot write past the buffer. */
	w->truncated = true;
	if (!q->question_ok || qname_len == 0 || qname_len > DNS_MAX_NAME ||
	    limit < DNS_HEADER_LEN + qname_len + 4 + w->reserve)
		return;
	w->truncated = false;

	uint16_t flags = DNS_F_QR | DNS_F_RA |
			 (q->flags & (FLAGS_OPCODE_MASK | DNS_F_RD | DNS_F_CD));
	dns_put16(buf, q->id);
	dns_put16(buf + 2, flags);
	dns_put16(buf + 4, 1);
	memset(buf + 6, 0, 6);
	write_question(buf + DNS_HEADER_LEN, q);
	w->len = w->question_end = DNS_HEADER_LEN + qname_len + 4;
}

void dns_response_rewind(struct dns_writer *w)
{
	if (w->len == 0)
		return;
	w->len = w->question_end;
	memset(w->count, 0, sizeof(w->count));
	w->section = DNS_SEC_ANSWER;
	w->rcode = DNS_R_NOERROR;
	w->truncated = false;
	w->ncomp = 0;
	w->comp_base = 0;
	w->comp_question = false;
	dns_response_set_aa(w, false);
}

void dns_response_set_aa(struct dns_writer *w, bool aa)
{
	if (w->len == 0)
		return;
	uint16_t flags = dns_get16(w->buf + 2);
	dns_put16(w->buf + 2, aa ? (flags | DNS_F_AA) : (flags & ~DNS_F_AA));
}

const uint8_t *dns_response_owner(const struct dns_writer *w, const struct dns_query *q)
{
	return q == w->q ? NULL : q->qname;
}

void dns_response_set_rcode(struct dns_writer *w, enum dns_rcode rcode)
{
	w->rcode = (uint16_t)rcode; /* reaches the header in dns_response_finish */
}

/* The same bytes is the usual case (the client's question in lower case,
 * or a name we wrote ourselves), so that is tried first. */
static bool labels_equal_nocase(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (memcmp(a, b, n) == 0)
		return true;
	for (size_t i = 0; i < n; i++)
		if (dns_ascii_lower(a[i]) != dns_ascii_lower(b[i]))
			return false;
	return true;
}

/*
 * Does the name at message offset `off` spell `name`? The message side may
 * itself end in a pointer, so it is followed; everything stays below w->len
 * (a slot can mark a name still being written, which ends at w->len).
 */
static bool message_name_equals(const struct dns_writer *w, size_t off,
				const uint8_t *name)
{
	size_t npos = 0;

	for (;;) {
		if (off >= w->len)
			return false;
		uint8_t b = w->buf[off];
		if ((b & 0xC0) == 0xC0) {
			if (off + 1 >= w->len)
				return false;
			size_t target = ((size_t)(b & 0x3F) << 8) | w->buf[off + 1];
			/* we only ever write backward pointers; insisting on
			 * it keeps this walk provably finite */
			if (target >= off)
				return false;
			off = target;
			continue;
		}
		if (b != name[npos])
			return false;
		if (b == 0)
			return true;
		if (off + 1 + b > w->len ||
		    !labels_equal_nocase(w->buf + off + 1, name + npos + 1, b))
			return false;
		off += 1 + b;
		npos += 1 + b;
	}
}

static bool find_compression_target(const struct dns_writer *w, const uint8_t *suffix,
				    size_t suffix_len, uint16_t *target)
{
	if (!(w->comp_lens[suffix_len / 64] & (1ull << (suffix_len % 64))))
		return false;
	for (uint8_t i = 0; i < w->ncomp; i++) {
		if (w->comp_len[i] == suffix_len && message_name_equals(w, w->comp[i], suffix)) {
			*target = w->comp[i];
			return true;
		}
	}
	return false;
}

static bool put_bytes(struct dns_writer *w, const void *p, size_t n, size_t end)
{
	if (n > end - w->len)
		return false;
	memcpy(w->buf + w->len, p, n);
	w->len += n;
	return true;
}

static bool put_pointer(struct dns_writer *w, uint16_t target, size_t end)
{
	uint8_t ptr[2];

	dns_put16(ptr, (uint16_t)(0xC000 | target));
	return put_bytes(w, ptr, 2, end);
}

/* Length of the uncompressed name at p, which may not run past n bytes; -1
 * when it does, or when it is not a plain wire name. */
static int bounded_name_len(const uint8_t *p, size_t n)
{
	size_t pos = 0;

	while (pos < n && pos < DNS_MAX_NAME) {
		uint8_t label = p[pos];
		if (label == 0)
			return (int)pos + 1;
		if (label > DNS_MAX_LABEL)
			return -1;
		pos += 1 + label;
	}
	return -1;
}

/*
 * Write an uncompressed wire name, replacing its longest suffix already in
 * the message with a pointer. Labels written out are remembered as targets
 * for later names. The name is caller-supplied, so a walk past DNS_MAX_NAME
 * is refused rather than trusted.
 */
static bool put_name(struct dns_writer *w, const uint8_t *name, size_t end)
{
	int name_len = bounded_name_len(name, DNS_MAX_NAME);

	if (name_len < 0)
		return false;
	if (!w->comp_question)
		remember_question_labels(w);
	for (size_t pos = 0; name[pos] != 0;) {
		uint8_t label = name[pos];
		uint16_t target;

		if (find_compression_target(w, name + pos, (size_t)name_len - pos, &target))
			return put_pointer(w, target, end);
		size_t at = w->len;
		if (!put_bytes(w, name + pos, 1 + (size_t)label, end))
			return false;
		remember_name_offset(w, at, (size_t)name_len - pos);
		pos += 1 + label;
	}
	return put_bytes(w, "", 1, end);
}

static bool put_owner(struct dns_writer *w, const uint8_t *owner, size_t end)
{
	if (owner == NULL)
		return put_pointer(w, DNS_HEADER_LEN, end); /* the client's own case */
	return put_name(w, owner, end);
}

static bool rdata_fits_shape(const uint8_t *rdata, size_t rdlen,
			     struct dns_rdata_names shape)
{
	size_t off = shape.before;

	for (uint8_t i = 0; i < shape.names; i++) {
		if (off > rdlen)
			return false;
		int n = bounded_name_len(rdata + off, rdlen - off);
		if (n < 0)
			return false;
		off += (size_t)n;
	}
	return off + shape.after == rdlen;
}

static bool put_compressed_rdata(struct dns_writer *w, const uint8_t *rdata,
				 uint16_t rdlen, struct dns_rdata_names shape,
				 size_t end)
{
	size_t off = shape.before;

	if (!put_bytes(w, rdata, shape.before, end))
		return false;
	for (uint8_t i = 0; i < shape.names; i++) {
		if (!put_name(w, rdata + off, end))
			return false;
		off += dns_name_len(rdata + off);
	}
	return put_bytes(w, rdata + off, rdlen - off, end);
}

/* Rdata that does not match its type's shape goes out verbatim: we never
 * reinterpret bytes we cannot vouch for. */
static bool put_rdata(struct dns_writer *w, uint16_t type, const uint8_t *rdata,
		      uint16_t rdlen, size_t end)
{
	struct dns_rdata_names shape;

	/* RFC 3597 section 4: only the RFC 1035 types may be compressed. */
	if (dns_rdata_names(type, &shape) && shape.compress &&
	    rdata_fits_shape(rdata, rdlen, shape))
		return put_compressed_rdata(w, rdata, rdlen, shape, end);
	return put_bytes(w, rdata, rdlen, end);
}

static bool put_rr(struct dns_writer *w, const uint8_t *owner, uint16_t type,
		   uint16_t rclass, uint32_t ttl, const uint8_t *rdata,
		   uint16_t rdlen, size_t end)
{
	if (!put_owner(w, owner, end) || RR_FIXED_LEN > end - w->len)
		return false;
	uint8_t *fixed = w->buf + w->len;
	dns_put16(fixed, type);
	dns_put16(fixed + 2, rclass);
	dns_put32(fixed + 4, ttl);
	w->len += RR_FIXED_LEN;

	size_t rdata_start = w->len;
	if (!put_rdata(w, type, rdata, rdlen, end))
		return false;
	/* compression only shrinks rdata, so this still fits in 16 bits */
	dns_put16(fixed + 8, (uint16_t)(w->len - rdata_start));
	return true;
}

bool dns_response_add_rr(struct dns_writer *w, enum dns_section section,
			 const uint8_t *owner, uint16_t type, uint16_t rclass,
			 uint32_t ttl, const uint8_t *rdata, uint16_t rdlen)
{
	if (w->truncated || section < w->section || section > DNS_SEC_ADDITIONAL)
		return false;
	w->section = section;

	size_t start_len = w->len;
	uint8_t start_ncomp = w->ncomp;
	if (put_rr(w, owner, type, rclass, ttl, rdata, rdlen, w->limit - w->reserve)) {
		w->count[section]++;
		return true;
	}
	/* Undo the partial record, and forget names that pointed into it (the
	 * question's stay, even when this record was the first to add them). */
	w->len = start_len;
	w->ncomp = start_ncomp > w->comp_base ? start_ncomp : w->comp_base;
	if (section != DNS_SEC_ADDITIONAL)
		w->truncated = true; /* RFC 2181 9: additional data may just be omitted */
	return false;
}

/* ---- records of a zone's apex -------------------------------------------- */

/* Does name (len bytes) end in suffix (a whole name of suffix_len bytes) at a label boundary? */
static bool name_ends_in(const uint8_t *name, size_t len, const uint8_t *suffix,
			 size_t suffix_len)
{
	size_t start, pos = 0;

	if (suffix_len > len)
		return false;
	start = len - suffix_len;
	if (memcmp(name + start, suffix, suffix_len) != 0)
		return false;
	while (pos < start)
		pos += 1u + name[pos];
	return pos == start;
}

/* Copy a name, its apex suffix (if it ends in the apex) as a pointer to patch. */
static bool apex_rr_put_name(struct dns_apex_rr *rr, const uint8_t *name)
{
	size_t len = dns_name_len(name);

	if (!name_ends_in(name, len, rr->apex, rr->apex_len)) {
		if (rr->len + len > DNS_APEX_RR_MAX)
			return false;
		memcpy(rr->bytes + rr->len, name, len);
		rr->len = (uint16_t)(rr->len + len);
		return true;
	}
	size_t keep = len - rr->apex_len, last = 0;
	if (rr->len + keep + 2 > DNS_APEX_RR_MAX || rr->n_patches == DNS_APEX_RR_PATCHES)
		return false;
	for (size_t pos = 0; pos < keep; pos += 1u + name[pos])
		last = pos;
	rr->before[rr->n_patches] = keep ? (uint16_t)(rr->len + last) : 0;
	memcpy(rr->bytes + rr->len, name, keep);
	rr->len = (uint16_t)(rr->len + keep);
	rr->patch[rr->n_patches++] = rr->len;
	rr->len = (uint16_t)(rr->len + 2);
	return true;
}

/* Offsets of name's labels (the root excluded); returns how many. */
static size_t label_offsets(const uint8_t *name, uint16_t out[DNS_MAX_NAME / 2])
{
	size_t n = 0;

	for (size_t pos = 0; name[pos] != 0; pos += 1u + name[pos])
		out[n++] = (uint16_t)pos;
	return n;
}

/* Wire length of the longest suffix a and b share at label boundaries (1: the root alone). */
static size_t common_suffix_len(const uint8_t *a, const uint8_t *b)
{
	uint16_t la[DNS_MAX_NAME / 2], lb[DNS_MAX_NAME / 2];
	size_t na = label_offsets(a, la), nb = label_offsets(b, lb);
	size_t len_a = dns_name_len(a), common = 1;

	while (na && nb && a[la[na - 1]] == b[lb[nb - 1]] &&
	       memcmp(a + la[na - 1], b + lb[nb - 1], 1u + a[la[na - 1]]) == 0) {
		na--;
		nb--;
		common = len_a - la[na];
	}
	return common;
}

/*
 * Would add_rr point one of the rdata's names anywhere but at the apex in
 * the question? It would when a name not ending in the apex shares a suffix
 * with it, or when two names share a suffix longer than the apex (the later
 * one points into the earlier). Such a record is not encoded.
 */
static bool apex_rr_names_point_elsewhere(const struct dns_apex_rr *rr,
					  struct dns_rdata_names shape)
{
	size_t off_i = shape.before;

	for (uint8_t i = 0; i < shape.names; i++) {
		const uint8_t *ni = rr->rdata + off_i;
		size_t off_j = shape.before;
		if (!name_ends_in(ni, dns_name_len(ni), rr->apex, rr->apex_len) &&
		    common_suffix_len(ni, rr->apex) > 1)
			return true;
		for (uint8_t j = 0; j < i; j++) {
			size_t c = common_suffix_len(ni, rr->rdata + off_j);
			if (c > 1 && c != rr->apex_len)
				return true;
			off_j += dns_name_len(rr->rdata + off_j);
		}
		off_i += dns_name_len(ni);
	}
	return false;
}

/* The encoded form of rr's record into rr->bytes; false when it cannot be. */
static bool apex_rr_encode(struct dns_apex_rr *rr)
{
	struct dns_rdata_names shape;
	bool names = dns_rdata_names(rr->type, &shape) && shape.compress &&
		     rdata_fits_shape(rr->rdata, rr->rdlen, shape);
	size_t off = 0;

	if (names && apex_rr_names_point_elsewhere(rr, shape))
		return false;
	if (!apex_rr_put_name(rr, rr->apex) || rr->len + RR_FIXED_LEN > DNS_APEX_RR_MAX)
		return false;
	uint8_t *fixed = rr->bytes + rr->len;
	dns_put16(fixed, rr->type);
	dns_put16(fixed + 2, DNS_C_IN);
	dns_put32(fixed + 4, rr->ttl);
	rr->len += RR_FIXED_LEN;
	size_t rdata_start = rr->len;
	if (names) {
		memcpy(rr->bytes + rr->len, rr->rdata, shape.before);
		rr->len = (uint16_t)(rr->len + shape.before);
		off = shape.before;
		for (uint8_t i = 0; i < shape.names; i++) {
			if (!apex_rr_put_name(rr, rr->rdata + off))
				return false;
			off += dns_name_len(rr->rdata + off);
		}
	}
	if (rr->len + (rr->rdlen - off) > DNS_APEX_RR_MAX)
		return false;
	memcpy(rr->bytes + rr->len, rr->rdata + off, rr->rdlen - off);
	rr->len = (uint16_t)(rr->len + (rr->rdlen - off));
	dns_put16(fixed + 8, (uint16_t)(rr->len - rdata_start));
	return true;
}

void dns_apex_rr_build(struct dns_apex_rr *rr, const uint8_t *apex, uint16_t type,
		       uint32_t ttl, const uint8_t *rdata, uint16_t rdlen)
{
	size_t apex_len = dns_name_len(apex);

	*rr = (struct dns_apex_rr){.apex_len = (uint16_t)apex_len, .type = type, .ttl = ttl,
				   .rdata = rdata, .rdlen = rdlen};
	memcpy(rr->apex, apex, apex_len);
	if (!apex_rr_encode(rr))
		rr->len = 0;
}

/*
 * Is the encoded form what add_rr would write now? Only the question's
 * labels may be compression targets so far, the question must end in the
 * apex, and the question's label before the apex must not be the label
 * before the apex in one of the record's names: the question would then
 * hold a longer suffix of that name, and add_rr would point there.
 */
static bool apex_rr_encoded_fits(const struct dns_writer *w, const struct dns_apex_rr *rr)
{
	const struct dns_query *q = w->q;
	size_t start, pos = 0, prev = SIZE_MAX;

	if (!rr->len || w->ncomp != (w->comp_question ? w->comp_base : 0) ||
	    rr->apex_len > q->qname_len)
		return false;
	start = q->qname_len - rr->apex_len;
	if (memcmp(q->qname + start, rr->apex, rr->apex_len) != 0)
		return false;
	for (; pos < start; pos += 1u + q->qname[pos])
		prev = pos;
	if (pos != start)
		return false;
	if (prev == SIZE_MAX)
		return true; /* the question is the apex */
	for (uint8_t i = 0; i < rr->n_patches; i++) {
		const uint8_t *label = rr->bytes + rr->before[i];
		if (rr->before[i] && label[0] == q->qname[prev] &&
		    labels_equal_nocase(label + 1, q->qname + prev + 1, label[0]))
			return false;
	}
	return true;
}

bool dns_response_add_apex_rr(struct dns_writer *w, enum dns_section section,
			      const struct dns_apex_rr *rr)
{
	if (!apex_rr_encoded_fits(w, rr))
		return dns_response_add_rr(w, section, rr->apex, rr->type, DNS_C_IN, rr->ttl,
					   rr->rdata, rr->rdlen);
	if (w->truncated || section < w->section || section > DNS_SEC_ADDITIONAL)
		return false;
	w->section = section;
	if (rr->len > w->limit - w->reserve - w->len) {
		if (section != DNS_SEC_ADDITIONAL)
			w->truncated = true;
		return false;
	}
	uint16_t apex_at = (uint16_t)(DNS_HEADER_LEN + w->q->qname_len - rr->apex_len);
	uint8_t *at = w->buf + w->len;

	memcpy(at, rr->bytes, rr->len);
	for (uint8_t i = 0; i < rr->n_patches; i++)
		dns_put16(at + rr->patch[i], (uint16_t)(0xC000 | apex_at));
	w->len += rr->len;
	w->count[section]++;
	return true;
}

size_t dns_response_room(const struct dns_writer *w)
{
	if (w->len == 0 || w->truncated)
		return 0;
	return w->limit - w->reserve - w->len;
}

bool dns_response_append_raw(struct dns_writer *w, const uint8_t *sections,
			     size_t len, const uint16_t counts[3])
{
	if (w->len == 0 || w->truncated || w->len != w->question_end ||
	    w->section != DNS_SEC_ANSWER || w->count[0] || w->count[1] ||
	    w->count[2])
		return false;
	if (len > w->limit - w->reserve - w->len) {
		w->truncated = true;
		return false;
	}
	if (len)
		memcpy(w->buf + w->len, sections, len);
	w->len += len;
	memcpy(w->count, counts, sizeof(w->count));
	w->section = DNS_SEC_ADDITIONAL;
	return true;
}

/* Space for this was held back in w->reserve since dns_response_begin. */
static void put_opt(struct dns_writer *w, uint16_t udp_payload)
{
	const struct dns_query *q = w->q;
	uint8_t *p = w->buf + w->len;
	uint32_t ttl = ((uint32_t)(w->rcode >> 4) << 24) |
		       (q->edns_do ? DNS_EDNS_DO : 0); /* version 0 in bits 16..23 */

	p[0] = 0;
	dns_put16(p + 1, DNS_T_OPT);
	dns_put16(p + 3, udp_payload);
	dns_put32(p + 5, ttl);
	dns_put16(p + 9, 0);
	w->len += OPT_RR_LEN;
	if (!w->has_server_cookie)
		return;
	dns_put16(p + 9, COOKIE_OPTION_LEN);
	dns_put16(p + 11, DNS_EDNS_OPT_COOKIE);
	dns_put16(p + 13, DNS_CLIENT_COOKIE_LEN + DNS_SERVER_COOKIE_LEN);
	memcpy(p + 15, q->cookie, DNS_CLIENT_COOKIE_LEN);
	memcpy(p + 15 + DNS_CLIENT_COOKIE_LEN, w->server_cookie, DNS_SERVER_COOKIE_LEN);
	w->len += COOKIE_OPTION_LEN;
}

size_t dns_response_finish(struct dns_writer *w, uint16_t udp_payload)
{
	if (w->len == 0)
		return 0;

	bool has_opt = w->q->has_edns;
	uint16_t flags = dns_get16(w->buf + 2) & ~FLAGS_RCODE_MASK;
	if (w->truncated) {
		w->len = w->question_end;
		memset(w->count, 0, sizeof(w->count));
		flags |= DNS_F_TC;
	}
	flags |= header_rcode(w->rcode, has_opt);

	uint16_t arcount = w->count[DNS_SEC_ADDITIONAL];
	if (has_opt) {
		put_opt(w, udp_payload);
		arcount++;
	}
	dns_put16(w->buf + 2, flags);
	dns_put16(w->buf + 6, w->count[DNS_SEC_ANSWER]);
	dns_put16(w->buf + 8, w->count[DNS_SEC_AUTHORITY]);
	dns_put16(w->buf + 10, arcount);
	return w->len;
}

/* out may be the very buffer pkt points into: the header is read in full
 * before anything is written. */
size_t dns_error_reply(const uint8_t *pkt, size_t len,
		       const struct dns_query *q, enum dns_rcode rcode,
		       uint8_t *out, size_t outlen)
{
	if (len < DNS_HEADER_LEN || outlen < DNS_HEADER_LEN)
		return 0;
	uint16_t id = dns_get16(pkt);
	uint16_t qflags = dns_get16(pkt + 2);
	if (qflags & DNS_F_QR)
		return 0; /* never answer a response: that is how reply loops start */

	uint16_t flags = DNS_F_QR | (qflags & (FLAGS_OPCODE_MASK | DNS_F_RD)) |
			 header_rcode((uint16_t)rcode, false);
	size_t n = DNS_HEADER_LEN;
	bool echo = q && q->question_ok && q->qname_len > 0 &&
		    q->qname_len <= DNS_MAX_NAME &&
		    DNS_HEADER_LEN + (size_t)q->qname_len + 4 <= outlen;

	dns_put16(out, id);
	dns_put16(out + 2, flags);
	dns_put16(out + 4, echo ? 1 : 0);
	memset(out + 6, 0, 6);
	if (echo) {
		write_question(out + n, q);
		n += q->qname_len + 4;
	}
	return n;
}
