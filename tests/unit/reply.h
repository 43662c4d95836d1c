/*
 * reply.h — reading back the replies a table wrote, record by record, and
 * making queries by name, for the answer tests of zone/ and cluster/.
 * Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_REPLY_H
#define LOCALDNS_TEST_REPLY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dns/dns.h"

struct rr {
	uint8_t owner[DNS_MAX_NAME];
	uint16_t type, rclass;
	uint32_t ttl;
	const uint8_t *rdata;
	uint16_t rdlen;
};

struct reply {
	uint8_t buf[4096];
	size_t len;
	uint16_t flags;
	uint16_t count[4];
	struct rr rr[64];
	size_t n_rr;
};

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Parse a reply we built: header, skip the question, read every record. */
static inline void read_reply(struct reply *r)
{
	uint8_t qname[DNS_MAX_NAME];
	size_t pos = DNS_HEADER_LEN;

	r->flags = get16(r->buf + 2);
	for (int i = 0; i < 4; i++)
		r->count[i] = get16(r->buf + 4 + 2 * i);
	assert_int_equal(r->count[0], 1);
	assert_true(dns_name_read(r->buf, r->len, &pos, qname, true) > 0);
	pos += 4;
	r->n_rr = (size_t)r->count[1] + r->count[2] + r->count[3];
	assert_true(r->n_rr <= 64);
	for (size_t i = 0; i < r->n_rr; i++) {
		struct rr *rr = &r->rr[i];
		assert_true(dns_name_read(r->buf, r->len, &pos, rr->owner, true) > 0);
		assert_true(pos + 10 <= r->len);
		rr->type = get16(r->buf + pos);
		rr->rclass = get16(r->buf + pos + 2);
		rr->ttl = (uint32_t)get16(r->buf + pos + 4) << 16 | get16(r->buf + pos + 6);
		rr->rdlen = get16(r->buf + pos + 8);
		rr->rdata = r->buf + pos + 10;
		pos += 10u + rr->rdlen;
		assert_true(pos <= r->len);
	}
	assert_int_equal(pos, r->len);
}

static inline const uint8_t *wire(const char *text)
{
	static uint8_t names[8][DNS_MAX_NAME];
	static int next;
	uint8_t *out = names[next++ % 8];

	assert_true(dns_name_from_text(text, out) > 0);
	return out;
}

static inline void make_query(struct dns_query *q, const char *name, uint16_t qtype)
{
	memset(q, 0, sizeof *q);
	q->id = 0x1234;
	q->qtype = qtype;
	q->qclass = DNS_C_IN;
	int len = dns_name_from_text(name, q->qname);
	assert_true(len > 0);
	q->qname_len = (uint16_t)len;
	memcpy(q->qname_orig, q->qname, (size_t)len);
	q->question_ok = true;
}

#endif
