/*
 * reply.h — asking the answer tables of zone/, cluster/ and the query path
 * and reading back what they wrote: a reply buffer read with msg_view.h,
 * and queries and names made from text with the codec (these tests check
 * the tables, not the codec). Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_REPLY_H
#define LOCALDNS_TEST_REPLY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dns/dns.h"
#include "msg_view.h"

struct reply {
	uint8_t buf[4096];
	size_t len;
	/* buf as read_reply read it: msg_view.h's one view (too big for the
	 * stack), so good until the next read_reply or read_msg */
	struct msg_view *v;
};

/* Reads the reply in buf: one question, then every record. */
static inline void read_reply(struct reply *r)
{
	r->v = read_msg(r->buf, r->len);
	assert_int_equal(r->v->qd, 1);
}

static inline const uint8_t *reply_rdata(const struct reply *r, int i)
{
	return r->buf + r->v->rr[i].rdoff;
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
