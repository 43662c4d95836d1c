/*
 * libFuzzer target for DNS64 (src/dns64/): the input is two replies, to
 * an AAAA and to an A question, as the resolver hands them over (local
 * data writes well-formed ones; an upstream may not). Its first byte picks
 * the prefix length, the next two where the first reply ends.
 * dns64_wanted reads each; dns64_chain_end follows the first's CNAMEs;
 * dns64_synthesize and dns64_synthesize_chain write the answer for the
 * AAAA question of the first reply's name (or a fixed one) into a
 * writer with a small and a large limit; and dns64_ptr_target reads the
 * first reply's question name as an ip6.arpa name.
 *
 * ASan/UBSan catch memory errors; the checks catch a synthesized answer
 * a client cannot read, or a PTR target that is no in-addr.arpa name.
 */
#include <string.h>

#include "dns/dns.h"
#include "dns64/dns64.h"
#include "fuzz.h"

static const uint8_t lengths[] = {32, 40, 48, 56, 64, 96};
static uint8_t out[DNS_MAX_MESSAGE];

/* The AAAA question to answer: the first reply's name when it reads, else a fixed one. */
static void question(const uint8_t *msg, size_t len, struct dns_query *q)
{
	size_t pos = DNS_HEADER_LEN;
	int n;

	memset(q, 0, sizeof *q);
	n = len > DNS_HEADER_LEN ? dns_name_read(msg, len, &pos, q->qname, true) : -1;
	if (n <= 0)
		n = (int)dns_name_from_text("www.example.com", q->qname);
	q->qname_len = (uint16_t)n;
	memcpy(q->qname_orig, q->qname, (size_t)n);
	q->qtype = DNS_T_AAAA;
	q->qclass = DNS_C_IN;
	q->question_ok = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns64_prefix p = {.addr = {0x20, 0x01, 0x0d, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}};
	struct dns_query q;
	struct dns_writer w;
	uint8_t target[DNS_MAX_NAME];

	if (size < 3)
		return 0;
	p.len = lengths[data[0] % sizeof lengths];
	if (p.len <= 64)
		p.addr[8] = 0;
	size_t split = (size_t)(data[1] << 8 | data[2]);
	data += 3;
	size -= 3;
	if (split > size)
		split = size;
	const uint8_t *aaaa = data, *a = data + split;
	size_t aaaa_len = split, a_len = size - split;

	(void)dns64_wanted(aaaa, aaaa_len);
	(void)dns64_wanted(a, a_len);
	question(aaaa, aaaa_len, &q);
	for (size_t limit = 512; limit <= DNS_MAX_MESSAGE; limit += DNS_MAX_MESSAGE - 512) {
		dns_response_begin(&w, out, limit, &q, DNS_R_NOERROR);
		if (dns64_synthesize(&p, aaaa, aaaa_len, a, a_len, &w)) {
			size_t n = dns_response_finish(&w, 1232);
			CHECK(n > 0 && n <= limit);
			CHECK(fuzz_message_ok(out, n));
		}
		dns_response_begin(&w, out, limit, &q, DNS_R_NOERROR);
		if (dns64_synthesize_chain(&p, aaaa, aaaa_len, a, a_len, &w)) {
			size_t n = dns_response_finish(&w, 1232);
			CHECK(n > 0 && n <= limit);
			CHECK(fuzz_message_ok(out, n));
		}
	}
	/* the resolver's A question goes to where the AAAA answer's CNAMEs end */
	size_t end = dns64_chain_end(aaaa, aaaa_len, q.qname, target);
	CHECK(end == 0 || end == dns_name_len(target));
	size_t n = dns64_ptr_target(&p, q.qname, target);
	if (n) {
		char text[1024];
		CHECK(n == dns_name_len(target));
		CHECK(dns_name_to_text(target, text, sizeof text) > 0);
		CHECK(strstr(text, ".in-addr.arpa.") != NULL);
	}
	return 0;
}
