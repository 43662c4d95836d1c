/*
 * libFuzzer target for the answer cache (src/cache/): the input is an
 * upstream reply, as libunbound would hand it over. A fresh cache of one
 * shard (so a few large entries already evict) stores it as the answer to
 * its own question, as it came and as dns_message_compact rewrites it (the
 * daemon's path), and under sixteen other types, so bucket arrays grow and
 * the CLOCK hand sweeps. Then every way of reading entries back runs:
 * hits at several ages and size limits, replays, stale answers after
 * cache_make_all_stale, the NXDOMAIN probe, a walk, a shrinking resize,
 * flushes. The reply's ID is free (the cache ignores it), so its bits pick
 * the DO and CD bits of the key and the ages.
 *
 * ASan/UBSan catch memory errors; the checks catch the cache serving what
 * a client cannot read, losing an entry it just accepted, or counting
 * more bytes than its cap.
 */
#include <string.h>

#include <urcu/urcu-memb.h>

#include "cache/cache.h"
#include "dns/dns.h"
#include "fuzz.h"

#define NOW 1000
#define VARIANTS 16
/* Under 128 KiB: one shard, whose budget still holds the largest message. */
#define CACHE_BYTES (120 * 1024)

static uint8_t query_buf[DNS_HEADER_LEN + DNS_MAX_NAME + 4 + 11];
static uint8_t compacted[DNS_MAX_MESSAGE];
static uint8_t variant[DNS_MAX_MESSAGE];
static uint8_t reply[DNS_MAX_MESSAGE];

static const struct cache_config config = {
	.max_bytes = CACHE_BYTES,
	.min_ttl = 0,
	.max_ttl = 86400,
	.negative_max_ttl = 3600,
	.servfail_ttl = 5,
	.serve_stale = true,
	.stale_max_age = 86400,
	.prefetch = true,
};

/* The client question msg answers (the key the resolver would store it
 * under), with DO and CD as the ID's low bits say; false when msg has no
 * question to speak of. */
static bool question_of(const uint8_t *msg, size_t len, struct dns_query *q)
{
	size_t pos = DNS_HEADER_LEN;
	uint8_t name[DNS_MAX_NAME];
	uint16_t id = len >= 2 ? fuzz_get16(msg) : 0;

	if (len < DNS_HEADER_LEN)
		return false;
	int n = dns_name_read(msg, len, &pos, name, false);
	if (n < 0 || len - pos < 4)
		return false;
	static const uint8_t header[DNS_HEADER_LEN] = {0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0};
	uint8_t *p = query_buf;
	memcpy(p, header, sizeof header);
	if (id & 2)
		p[3] |= DNS_F_CD;
	p += DNS_HEADER_LEN;
	memcpy(p, name, (size_t)n);
	p += n;
	memcpy(p, msg + pos, 4);
	p += 4;
	if (id & 1) {
		static const uint8_t opt_do[11] = {0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0};
		query_buf[11] = 1;
		memcpy(p, opt_do, sizeof opt_do);
		p += sizeof opt_do;
	}
	return dns_parse_query(query_buf, (size_t)(p - query_buf), q) == DNS_PARSE_OK;
}

/* Answer q from the cache at now into a reply of at most limit bytes. */
static enum cache_result lookup(struct cache *c, const struct dns_query *q, uint64_t now,
				size_t limit, bool allow_stale, bool replay)
{
	struct dns_writer w;

	dns_response_begin(&w, reply, limit, q, DNS_R_NOERROR);
	urcu_memb_read_lock();
	enum cache_result r = replay ? cache_replay(c, &w, now, allow_stale)
				     : cache_write_answer(c, &w, now, allow_stale);
	urcu_memb_read_unlock();
	size_t len = dns_response_finish(&w, 1232);
	if (r != CACHE_MISS) {
		CHECK(len >= DNS_HEADER_LEN && len <= limit);
		CHECK(fuzz_message_ok(reply, len));
	}
	return r;
}

/* Every way a reader can see q's entry, at a few ages and reply limits. */
static void read_back(struct cache *c, const struct dns_query *q, uint16_t id)
{
	static const size_t limits[] = {DNS_MAX_UDP_PLAIN, 1232, DNS_MAX_MESSAGE};
	uint64_t later = NOW + (id >> 4 & 0xfff);

	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		lookup(c, q, NOW, limits[i], false, false);
		lookup(c, q, later, limits[i], true, false);
		lookup(c, q, later, limits[i], false, true);
	}
	urcu_memb_read_lock();
	cache_has_nxdomain(c, q, later);
	urcu_memb_read_unlock();
}

/* Store msg for q; an accepted entry answers at once. */
static bool insert(struct cache *c, const struct dns_query *q, const uint8_t *msg, size_t len)
{
	if (cache_insert(c, q, msg, len, NOW) != 0)
		return false;
	CHECK(lookup(c, q, NOW, DNS_MAX_MESSAGE, false, true) == CACHE_HIT);
	return true;
}

/* msg again under other types, so one name fills the shard. */
static void insert_variants(struct cache *c, const struct dns_query *q, const uint8_t *msg,
			    size_t len)
{
	size_t type_at = DNS_HEADER_LEN + q->qname_len;
	struct dns_query v = *q;

	if (len < type_at + 2)
		return;
	memcpy(variant, msg, len);
	for (uint16_t i = 1; i <= VARIANTS; i++) {
		v.qtype = (uint16_t)(q->qtype + i);
		variant[type_at] = (uint8_t)(v.qtype >> 8);
		variant[type_at + 1] = (uint8_t)v.qtype;
		insert(c, &v, variant, len);
	}
}

struct walk_count {
	uint64_t entries;
};

static int walk_entry(const struct cache_entry_info *e, void *arg)
{
	struct walk_count *n = arg;

	CHECK(fuzz_message_ok(e->msg, e->msg_len));
	CHECK(e->name == e->msg + DNS_HEADER_LEN && e->name_len <= DNS_MAX_NAME);
	n->entries++;
	return 0;
}

/* A walk sees every entry once, each a readable message; the cap holds. */
static void walk_and_count(struct cache *c)
{
	struct walk_count n = {0};
	struct cache_stats st;

	CHECK(cache_walk(c, NOW, walk_entry, &n) == 0);
	cache_stats(c, &st);
	CHECK(n.entries == st.entries);
	CHECK(st.bytes <= st.max_bytes);
}

/* The message as the resolver answers a waiting client when the cache
 * would not keep it. */
static void write_uncached(const struct dns_query *q, const uint8_t *msg, size_t len)
{
	struct dns_writer w;

	dns_response_begin(&w, reply, DNS_MAX_MESSAGE, q, DNS_R_NOERROR);
	if (!cache_write_message(&w, msg, len))
		return;
	size_t n = dns_response_finish(&w, 1232);
	CHECK(fuzz_message_ok(reply, n));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	urcu_memb_register_thread();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_query q;
	uint16_t id = size >= 2 ? fuzz_get16(data) : 0;

	if (!question_of(data, size, &q))
		return 0;
	struct cache *c = cache_new(&config);
	CHECK(c);

	insert(c, &q, data, size);
	read_back(c, &q, id);
	write_uncached(&q, data, size);
	size_t n = dns_message_compact(data, size, &q, !q.edns_do, compacted, sizeof compacted);
	if (n > 0) {
		insert(c, &q, compacted, n);
		read_back(c, &q, id);
	}
	insert_variants(c, &q, data, size);
	walk_and_count(c);
	read_back(c, &q, id);

	cache_make_all_stale(c, NOW);
	read_back(c, &q, id);
	if (id & 4) {
		struct cache_config smaller = config;
		smaller.max_bytes = CACHE_BYTES / 4;
		cache_configure(c, &smaller, NOW);
		walk_and_count(c);
		read_back(c, &q, id);
	}
	cache_flush(c, q.qname);
	walk_and_count(c);
	cache_flush(c, NULL);
	struct cache_stats st;
	cache_stats(c, &st);
	CHECK(st.entries == 0);
	cache_free(c);
	return 0;
}
