/*
 * msg_view.h — the unit tests' one reader of DNS messages. Whatever the
 * codec, the cache or an answer table wrote is read back with it, header,
 * question and every record, and checked as it goes: names within 255
 * bytes, labels within 63, compression pointers only to a prior occurrence
 * (so a name cannot loop), records inside the message and nothing after the
 * last, at most one OPT record, owned by the root, in the additional section.
 *
 * It is written from RFC 1035 and uses nothing of src/dns but its
 * constants, so the codec is never checked against itself. Names come out
 * in the presentation form the daemon prints: "www.example.com.", "." for
 * the root, bytes other than letters, digits, '-', '_' and '*' as \DDD.
 * Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_MSG_VIEW_H
#define LOCALDNS_TEST_MSG_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "dns/dns.h"

#define MSG_TEXT_MAX 1024      /* any name of 255 bytes as text, \DDD and all */
#define MSG_VIEW_MAX_RRS 4096  /* a 64 KiB message of A records under pointers */

struct rr_view {
	char owner[MSG_TEXT_MAX];
	bool owner_pointer;        /* the owner as written uses compression */
	size_t owner_off;          /* where the owner as written starts */
	uint16_t type, rclass;
	uint32_t ttl;
	size_t ttl_off;
	uint16_t rdlen;
	size_t rdoff;
	/* NS, CNAME and PTR: the name the rdata holds; "" when the rdata is
	 * not exactly one name (a codec copies what it cannot read verbatim) */
	char target[MSG_TEXT_MAX];
};

struct msg_view {
	uint16_t id, flags, qd, an, ns, ar;
	char qname[MSG_TEXT_MAX];  /* "" without a question */
	uint16_t qtype, qclass;
	size_t question_end;       /* where the answer section starts */
	int nrr;                   /* an + ns + ar, in message order */
	struct rr_view rr[MSG_VIEW_MAX_RRS];
	const char *error;         /* why parse_msg said false, */
	size_t error_at;           /* and the byte it was reading */
};

static inline uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)rd16(p) << 16 | rd16(p + 2);
}

/* One label's bytes appended as text, then its dot; false if out is full. */
static inline bool label_text(const uint8_t *label, uint8_t n, char *out, size_t *used)
{
	for (uint8_t i = 0; i < n; i++) {
		uint8_t c = label[i];
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '*';
		if (*used + (plain ? 1 : 4) + 2 > MSG_TEXT_MAX)
			return false;
		if (plain) {
			out[(*used)++] = (char)c;
		} else {
			out[(*used)++] = '\\';
			out[(*used)++] = (char)('0' + c / 100);
			out[(*used)++] = (char)('0' + c / 10 % 10);
			out[(*used)++] = (char)('0' + c % 10);
		}
	}
	out[(*used)++] = '.';
	return true;
}

/*
 * Reads the name at m[*pos] as text into out and moves *pos past it as
 * written; *pointer (if given) tells whether that used compression.
 * Returns NULL, or what is wrong with the name.
 */
static inline const char *scan_name(const uint8_t *m, size_t len, size_t *pos,
				    char out[MSG_TEXT_MAX], bool *pointer)
{
	size_t cur = *pos, segment = *pos, used = 0, wire = 1;
	bool jumped = false;

	for (;;) {
		if (cur >= len)
			return "name runs past the end";
		uint8_t b = m[cur];
		if ((b & 0xC0) == 0xC0) {
			if (cur + 1 >= len)
				return "pointer cut short";
			size_t target = (size_t)(b & 0x3F) << 8 | m[cur + 1];
			if (target >= segment)
				return "pointer not to a prior occurrence";
			if (!jumped)
				*pos = cur + 2;
			jumped = true;
			cur = segment = target;
			continue;
		}
		if (b > 63)
			return "label type other than a length";
		if (b == 0)
			break;
		if (cur + 1 + b > len)
			return "label runs past the end";
		wire += 1u + b;
		if (wire > DNS_MAX_NAME)
			return "name longer than 255 bytes";
		if (!label_text(m + cur + 1, b, out, &used))
			return "name too long for the view's text";
		cur += 1u + b;
	}
	if (used == 0)
		out[used++] = '.';
	out[used] = '\0';
	if (!jumped)
		*pos = cur + 1;
	if (pointer)
		*pointer = jumped;
	return NULL;
}

/* scan_name, asserting the name is sound. */
static inline void read_name(const uint8_t *m, size_t len, size_t *pos,
			     char out[MSG_TEXT_MAX], bool *pointer)
{
	size_t at = *pos;
	const char *why = scan_name(m, len, pos, out, pointer);

	if (why)
		fail_msg("name at byte %zu: %s", at, why);
}

static inline bool msg_fail(struct msg_view *v, size_t at, const char *why)
{
	v->error = why;
	v->error_at = at;
	return false;
}

/* target is text when the rdata at m[rdoff..+rdlen) is exactly one name. */
static inline void read_target(const uint8_t *m, struct rr_view *r)
{
	size_t pos = r->rdoff, end = r->rdoff + r->rdlen;

	if (scan_name(m, end, &pos, r->target, NULL) || pos != end)
		r->target[0] = '\0';
}

/* The record at m[*pos] into r; NULL, or what is wrong with it. */
static inline const char *scan_rr(const uint8_t *m, size_t len, size_t *pos,
				  struct rr_view *r)
{
	r->owner_off = *pos;
	const char *why = scan_name(m, len, pos, r->owner, &r->owner_pointer);
	if (why)
		return why;
	if (*pos + 10 > len)
		return "record header runs past the end";
	r->type = rd16(m + *pos);
	r->rclass = rd16(m + *pos + 2);
	r->ttl_off = *pos + 4;
	r->ttl = rd32(m + *pos + 4);
	r->rdlen = rd16(m + *pos + 8);
	r->rdoff = *pos + 10;
	if (r->rdoff + r->rdlen > len)
		return "rdata runs past the end";
	*pos = r->rdoff + r->rdlen;
	r->target[0] = '\0';
	if (r->type == DNS_T_NS || r->type == DNS_T_CNAME || r->type == DNS_T_PTR)
		read_target(m, r);
	return NULL;
}

/* Reads the whole message into v; false (v->error says why) if anything is
 * malformed or left over. */
static inline bool parse_msg(const uint8_t *m, size_t len, struct msg_view *v)
{
	size_t pos = DNS_HEADER_LEN;
	const char *why;
	bool opt_seen = false;

	v->nrr = 0;
	v->qname[0] = '\0';
	v->qtype = v->qclass = 0;
	if (len < DNS_HEADER_LEN)
		return msg_fail(v, 0, "shorter than a header");
	v->id = rd16(m);
	v->flags = rd16(m + 2);
	v->qd = rd16(m + 4);
	v->an = rd16(m + 6);
	v->ns = rd16(m + 8);
	v->ar = rd16(m + 10);
	if (v->qd > 1)
		return msg_fail(v, 4, "more than one question");
	if (v->qd) {
		if ((why = scan_name(m, len, &pos, v->qname, NULL)))
			return msg_fail(v, DNS_HEADER_LEN, why);
		if (pos + 4 > len)
			return msg_fail(v, pos, "question runs past the end");
		v->qtype = rd16(m + pos);
		v->qclass = rd16(m + pos + 2);
		pos += 4;
	}
	v->question_end = pos;
	int total = v->an + v->ns + v->ar;
	if (total > MSG_VIEW_MAX_RRS)
		return msg_fail(v, 6, "more records than the view holds");
	for (int i = 0; i < total; i++) {
		struct rr_view *r = &v->rr[i];
		if ((why = scan_rr(m, len, &pos, r)))
			return msg_fail(v, r->owner_off, why);
		if (r->type == DNS_T_OPT) {
			if (i < v->an + v->ns)
				return msg_fail(v, r->owner_off, "OPT outside the additional section");
			if (opt_seen)
				return msg_fail(v, r->owner_off, "a second OPT");
			if (strcmp(r->owner, ".") != 0)
				return msg_fail(v, r->owner_off, "OPT not owned by the root");
			opt_seen = true;
		}
		v->nrr++;
	}
	if (pos != len)
		return msg_fail(v, pos, "bytes after the last record");
	return true;
}

/* parse_msg, asserting: the view is one shared and big (kept off the
 * stack), good until the next read_msg. */
static inline struct msg_view *read_msg(const uint8_t *m, size_t len)
{
	static struct msg_view view;

	if (!parse_msg(m, len, &view))
		fail_msg("message of %zu bytes, at byte %zu: %s", len, view.error_at, view.error);
	return &view;
}

static inline const struct rr_view *find_opt(const struct msg_view *v)
{
	for (int i = v->an + v->ns; i < v->nrr; i++)
		if (v->rr[i].type == DNS_T_OPT)
			return &v->rr[i];
	return NULL;
}

/* True when every NS, CNAME and PTR record's rdata is exactly one name. */
static inline bool targets_sound(const struct msg_view *v)
{
	for (int i = 0; i < v->nrr; i++) {
		uint16_t t = v->rr[i].type;
		if ((t == DNS_T_NS || t == DNS_T_CNAME || t == DNS_T_PTR) && !v->rr[i].target[0])
			return false;
	}
	return true;
}

/* Names are equal without regard to ASCII case (RFC 4343). */
#define assert_name_equal(got, want)                                            \
	do {                                                                    \
		const char *got_ = (got), *want_ = (want);                      \
		if (strcasecmp(got_, want_) != 0)                               \
			fail_msg("name \"%s\" is not \"%s\"", got_, want_);     \
	} while (0)

#endif
