/*
 * Unit tests for src/dns: query parsing, names, the response writer and
 * error replies. Packets are assembled with packet.h, and responses are
 * read back with msg_view.h, so the codec is never checked against itself.
 *
 * The parser's cases are a table (parse_cases): a row per message, what it
 * is, and what the parser makes of it as one line of text (describe_parse),
 * as Unbound's and curl's data-driven tests do. A new case is a new row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "dns/dns.h"

#include "msg_view.h"
#include "packet.h"

/* A standard query with RD set: ID 0x1234, one question of class IN. */
#define QUERY(name, type) .id = 0x1234, .flags = DNS_F_RD, .qname = (name), .qtype = (type)

static size_t wire(const char *text, uint8_t out[DNS_MAX_NAME])
{
	int n = dns_name_from_text(text, out);
	assert_true(n > 0);
	return (size_t)n;
}

/* ---- parse: the cases ------------------------------------------------------- */

/* Labels of 63 and 61 bytes, for the name length limits. */
#define A61 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define A63 A61 "aa"

/* An A record of example.com, TTL 60, 10.0.0.1 (rdata length rdlen). */
#define EXAMPLE_A(rdlen) "\7example\3com\0" "\0\1\0\1" "\0\0\0\x3c" "\0" rdlen "\x0a\0\0\1"

static const struct parse_case {
	const char *what;
	struct pkt_query msg;
	/* What dns_parse_query made of it, as describe_parse writes it: the
	 * result, the question as the client wrote it (when it parsed), then
	 * for OK and BADVERS the EDNS fields. */
	const char *want;
} parse_cases[] = {
	/* header and question */
	{"a plain query", {QUERY("www.example.com", DNS_T_AAAA)}, "OK www.example.com. AAAA IN"},
	{"the client's letter case is kept beside the lower-cased name",
	 {QUERY("WwW.ExAmPle.COM", DNS_T_A)}, "OK WwW.ExAmPle.COM. A IN"},
	{"the root", {QUERY("", DNS_T_NS)}, "OK . NS IN"},
	{"no question", {.id = 1}, "FORMERR"},
	{"two questions",
	 {.id = 1, .counts = {2}, .qname = "a.example", .qtype = DNS_T_A,
	  .tail = PKT_BYTES("\1b\7example\0" "\0\1\0\1")}, "FORMERR"},
	{"a response (QR set)", {.id = 0x1234, .flags = DNS_F_QR | DNS_F_RD, .qname = "example.com",
				 .qtype = DNS_T_A}, "DROP"},
	{"opcode STATUS", {.id = 77, .flags = 2 << 11 | DNS_F_RD, .qname = "Status.Example",
			   .qtype = DNS_T_A}, "NOTIMP Status.Example. A IN"},
	{"opcode 5, and a question that does not parse (no echo then)",
	 {.id = 78, .flags = 5 << 11, .name_bytes = PKT_BYTES("\50"), .send = 13}, "NOTIMP"},
	{"a label of 63 bytes", {.id = 1, .qname = A63 ".aaa", .qtype = DNS_T_A},
	 "OK " A63 ".aaa. A IN"},
	{"a label of 64 bytes", {.id = 1, .qname = A63 "a.aaa", .qtype = DNS_T_A}, "FORMERR"},
	{"a name of 255 bytes", {.id = 1, .qname = A63 "." A63 "." A63 "." A61, .qtype = DNS_T_A},
	 "OK " A63 "." A63 "." A63 "." A61 ". A IN"},
	{"a name of 256 bytes",
	 {.id = 1, .qname = A63 "." A63 "." A63 "." A61 "a", .qtype = DNS_T_A}, "FORMERR"},
	{"label type 0x40", {.id = 1, .name_bytes = PKT_BYTES("\1a\101b\0"), .qtype = DNS_T_A},
	 "FORMERR"},
	{"label type 0x80", {.id = 1, .name_bytes = PKT_BYTES("\1a\201b\0"), .qtype = DNS_T_A},
	 "FORMERR"},
	{"a name that points at itself",
	 {.id = 1, .name_bytes = PKT_BYTES("\xC0\x0C"), .qtype = DNS_T_A}, "FORMERR"},
	/* Legal, if never sent: the pointer leads to QDCOUNT's high byte, 0,
	 * which reads as the root label. */
	{"a question ending in a pointer back into the header",
	 {.id = 1, .name_bytes = PKT_BYTES("\1A\xC0\x04"), .qtype = DNS_T_A}, "OK A. A IN"},
	{"a pointer forward (to the name after the question, at 18)",
	 {.id = 1, .name_bytes = PKT_BYTES("\xC0\x12"), .qtype = DNS_T_A,
	  .tail = PKT_BYTES("\7example\3com\0")}, "FORMERR"},
	{"a pointer past the end",
	 {.id = 1, .name_bytes = PKT_BYTES("\1a\xFF\xFF"), .qtype = DNS_T_A}, "FORMERR"},
	{"a pointer cut in half by the end",
	 {.id = 1, .name_bytes = PKT_BYTES("\xC0"), .send = 13}, "FORMERR"},
	{"trailing bytes after the message", {QUERY("example.com", DNS_T_A),
					      .tail = PKT_BYTES("\xDE\xAD\xBE\xEF")},
	 "OK example.com. A IN"},
	{"AXFR parses: refusing it is the caller's policy", {QUERY("example.com", DNS_T_AXFR)},
	 "OK example.com. AXFR IN"},
	{"class CH parses: answering it is the caller's policy",
	 {QUERY("version.bind", DNS_T_TXT), .qclass = DNS_C_CH}, "OK version.bind. TXT CH"},

	/* records after the question: skipped after a bounds check */
	{"two records in the additional section, their owners pointing back",
	 {QUERY("www.example.com", DNS_T_A), .counts = {1, 0, 0, 2},
	  .tail = PKT_BYTES("\xC0\x0C" "\0\1\0\1" "\0\0\0\1" "\0\4" "\x0a\0\0\1"
			    "\3ftp\xC0\x10" "\0\1\0\1" "\0\0\0\1" "\0\4" "\x0a\0\0\2")},
	 "OK www.example.com. A IN"},
	{"an answer record the header counts and the message lacks",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 1, 0, 0}}, "FORMERR example.com. A IN"},
	{"an authority record whose rdata runs one byte past the end",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 0, 1, 0},
	  .tail = PKT_BYTES(EXAMPLE_A("\5"))}, "FORMERR example.com. A IN"},
	{"an additional record cut short",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 0, 0, 1},
	  .tail = PKT_BYTES(EXAMPLE_A("\4")), .send = -6}, "FORMERR example.com. A IN"},

	/* EDNS */
	{"EDNS: UDP size and DO", {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232,
				   .ttl = DNS_EDNS_DO},
	 "OK example.com. A IN edns=0 udp=1232 do"},
	{"EDNS: a UDP size below 512 is kept as sent",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 100},
	 "OK example.com. A IN edns=0 udp=100"},
	{"EDNS version 1", {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 4096,
			    .ttl = 1u << 16 | DNS_EDNS_DO},
	 "BADVERS example.com. A IN edns=1 udp=4096 do"},
	{"two OPT records", {QUERY("example.com", DNS_T_A), .opts = 2, .udp = 1232},
	 "FORMERR example.com. A IN"},
	{"an OPT owned by another name than the root",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 0, 0, 1},
	  .tail = PKT_BYTES("\7example\3com\0" "\0\x29" "\4\xD0" "\0\0\0\0" "\0\0")},
	 "FORMERR example.com. A IN"},
	{"an OPT in the answer section",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 1, 0, 0}, .opts = 1, .udp = 1232},
	 "FORMERR example.com. A IN"},
	{"an OPT in the authority section",
	 {QUERY("example.com", DNS_T_A), .counts = {1, 0, 1, 0}, .opts = 1, .udp = 1232},
	 "FORMERR example.com. A IN"},
	{"an option of 8 bytes with 4 of them in the rdata",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232, .cookie = true,
	  .cookie_len = 8, .options_sent = 8}, "FORMERR example.com. A IN"},
	{"half an option header",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232, .cookie = true,
	  .cookie_len = 8, .options_sent = 2}, "FORMERR example.com. A IN"},
	{"a client cookie (8 bytes)",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232, .cookie = true,
	  .cookie_len = 8}, "OK example.com. A IN edns=0 udp=1232 cookie=8"},
	{"a client and server cookie (40 bytes)",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232, .cookie = true,
	  .cookie_len = 40}, "OK example.com. A IN edns=0 udp=1232 cookie=40"},
#define BAD_COOKIE(n)                                                                       \
	{"a cookie of " #n " bytes", {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232, \
				      .cookie = true, .cookie_len = n},                    \
	 "FORMERR example.com. A IN"}
	BAD_COOKIE(0), BAD_COOKIE(5), BAD_COOKIE(7), BAD_COOKIE(9), BAD_COOKIE(15),
	BAD_COOKIE(41),
#undef BAD_COOKIE
	{"an unknown option (ECS-shaped, code 8) before the cookie is skipped",
	 {QUERY("example.com", DNS_T_A), .opts = 1, .udp = 1232,
	  .options = PKT_BYTES("\0\x08" "\0\4" "\0\1\x18\0"), .cookie = true, .cookie_len = 8},
	 "OK example.com. A IN edns=0 udp=1232 cookie=8"},
};

static const char *parse_result_name(enum dns_parse_result r)
{
	static const char *const names[] = {
		[DNS_PARSE_OK] = "OK",           [DNS_PARSE_DROP] = "DROP",
		[DNS_PARSE_FORMERR] = "FORMERR", [DNS_PARSE_NOTIMP] = "NOTIMP",
		[DNS_PARSE_BADVERS] = "BADVERS",
	};
	return names[r];
}

static void type_text(char *out, size_t cap, uint16_t type)
{
	static const struct {
		uint16_t type;
		const char *name;
	} names[] = {{DNS_T_A, "A"},     {DNS_T_NS, "NS"},   {DNS_T_SOA, "SOA"},
		     {DNS_T_TXT, "TXT"}, {DNS_T_AAAA, "AAAA"}, {DNS_T_AXFR, "AXFR"}};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].type == type) {
			snprintf(out, cap, "%s", names[i].name);
			return;
		}
	snprintf(out, cap, "TYPE%u", type);
}

/*
 * q's name, as text (the client's case), after checking what the row does
 * not spell out: the lower-cased copy is the same name, and its length and
 * label count are its own.
 */
static void question_text(const struct dns_query *q, char out[MSG_TEXT_MAX])
{
	char lower[MSG_TEXT_MAX];
	size_t pos = 0, labels = 0;

	read_name(q->qname_orig, DNS_MAX_NAME, &pos, out, NULL);
	assert_int_equal(pos, q->qname_len);
	pos = 0;
	read_name(q->qname, DNS_MAX_NAME, &pos, lower, NULL);
	assert_int_equal(pos, q->qname_len);
	assert_int_equal(strcasecmp(out, lower), 0);
	for (size_t i = 0; lower[i]; i++) {
		assert_false(lower[i] >= 'A' && lower[i] <= 'Z');
		labels += lower[i] == '.' && lower[i + 1];
	}
	assert_int_equal(q->qname_labels, strcmp(lower, ".") ? labels + 1 : 0);
}

/* What dns_parse_query made of a message, as a row's want says it. */
static void describe_parse(enum dns_parse_result r, const struct dns_query *q, char *out,
			   size_t cap)
{
	char name[MSG_TEXT_MAX], type[16], class[16];
	size_t n = (size_t)snprintf(out, cap, "%s", parse_result_name(r));

	if (r == DNS_PARSE_DROP || !q->question_ok)
		return;
	question_text(q, name);
	type_text(type, sizeof type, q->qtype);
	if (q->qclass == DNS_C_IN || q->qclass == DNS_C_CH)
		snprintf(class, sizeof class, "%s", q->qclass == DNS_C_IN ? "IN" : "CH");
	else
		snprintf(class, sizeof class, "CLASS%u", q->qclass);
	n += (size_t)snprintf(out + n, cap - n, " %s %s %s", name, type, class);
	if ((r == DNS_PARSE_OK || r == DNS_PARSE_BADVERS) && q->has_edns)
		n += (size_t)snprintf(out + n, cap - n, " edns=%u udp=%u%s", q->edns_version,
				      q->edns_udp_size, q->edns_do ? " do" : "");
	if (r == DNS_PARSE_OK && q->cookie_len)
		snprintf(out + n, cap - n, " cookie=%u", q->cookie_len);
}

/* Whether dns_parse_query makes of c's message what c says; says why not. */
static bool parse_case_holds(const struct parse_case *c)
{
	struct pkt p;
	struct dns_query q;
	char got[2 * MSG_TEXT_MAX];

	pkt_build_query(&p, &c->msg);
	enum dns_parse_result r = dns_parse_query(p.b, p.len, &q);
	describe_parse(r, &q, got, sizeof got);
	if (strcmp(got, c->want) != 0) {
		print_error("%s: got \"%s\", want \"%s\"\n", c->what, got, c->want);
		return false;
	}
	/* Past the header, ID and flags are copied as they came. */
	if (r != DNS_PARSE_DROP && (q.id != c->msg.id || q.flags != c->msg.flags)) {
		print_error("%s: id %#x flags %#x, sent %#x %#x\n", c->what, q.id, q.flags,
			    c->msg.id, c->msg.flags);
		return false;
	}
	/* A cookie is the client's bytes (cookie_option's). */
	for (unsigned b = 0; r == DNS_PARSE_OK && b < q.cookie_len; b++)
		if (q.cookie[b] != 0xA0 + b) {
			print_error("%s: cookie byte %u is %#x\n", c->what, b, q.cookie[b]);
			return false;
		}
	return true;
}

static void test_parse_cases(void **state)
{
	size_t n = sizeof parse_cases / sizeof parse_cases[0], failed = 0;

	(void)state;
	for (size_t i = 0; i < n; i++)
		failed += !parse_case_holds(&parse_cases[i]);
	if (failed)
		fail_msg("%zu of %zu parse cases failed", failed, n);
}

/* Every length a query can be cut to: shorter than a header is dropped, a
 * header with part of its question is FORMERR, the whole is OK. */
static void test_parse_every_cut_of_a_query(void **state)
{
	(void)state;
	struct pkt p;
	struct dns_query q;

	pkt_build_query(&p, &(struct pkt_query){QUERY("example.com", DNS_T_A)});
	for (size_t cut = 0; cut <= p.len; cut++) {
		enum dns_parse_result want = cut < DNS_HEADER_LEN ? DNS_PARSE_DROP :
					     cut < p.len ? DNS_PARSE_FORMERR : DNS_PARSE_OK;
		if (dns_parse_query(p.b, cut, &q) != want)
			fail_msg("%zu of %zu bytes: not %s", cut, p.len, parse_result_name(want));
	}
}

/* ---- dns_name_read ------------------------------------------------------ */

static void test_name_read_follows_pointer_and_lowers(void **state)
{
	(void)state;
	struct pkt p;
	uint8_t out[DNS_MAX_NAME];

	pkt_build_query(&p, &(struct pkt_query){QUERY("WWW.Example.COM", DNS_T_A)});
	size_t name2 = p.len;
	put_u8(&p, 3);
	put_raw(&p, "Ftp", 3);
	put_u16(&p, 0xC000 | 16);
	put_u8(&p, 0xEE); /* whatever follows the name */

	size_t pos = name2;
	int n = dns_name_read(p.b, p.len, &pos, out, true);
	assert_int_equal(n, 17);
	assert_memory_equal(out, "\3ftp\7example\3com", 17);
	assert_int_equal(pos, name2 + 6); /* just past the pointer */

	pos = name2;
	n = dns_name_read(p.b, p.len, &pos, out, false);
	assert_memory_equal(out, "\3Ftp\7Example\3COM", 17);

	pos = p.len; /* nothing left to read */
	assert_int_equal(dns_name_read(p.b, p.len, &pos, out, true), -1);
	assert_int_equal(pos, p.len);
}

static void test_name_read_pointer_chain_limit(void **state)
{
	(void)state;
	static uint8_t buf[3 + 2 * 300] = {1, 'a', 0};
	uint8_t name[DNS_MAX_NAME];

	for (size_t i = 0; i < 300; i++) {
		size_t at = 3 + 2 * i, target = i ? at - 2 : 0;
		buf[at] = (uint8_t)(0xC0 | target >> 8);
		buf[at + 1] = (uint8_t)target;
	}
	/* a long but legal chain, then one no real name needs */
	size_t pos = 3 + 2 * 99;
	assert_int_equal(dns_name_read(buf, sizeof(buf), &pos, name, true), 3);
	assert_int_equal(pos, 3 + 2 * 100);
	pos = 3 + 2 * 299;
	assert_int_equal(dns_name_read(buf, sizeof(buf), &pos, name, true), -1);
}

/* ---- names -------------------------------------------------------------- */

static void test_name_text_round_trip(void **state)
{
	(void)state;
	uint8_t w[DNS_MAX_NAME];
	char text[1024];

	assert_int_equal(dns_name_from_text("Db.Prod.svc.Cluster.local", w), 27);
	assert_memory_equal(w, "\2db\4prod\3svc\7cluster\5local", 27);
	assert_int_equal(dns_name_to_text(w, text, sizeof(text)), 26);
	assert_string_equal(text, "db.prod.svc.cluster.local.");

	assert_int_equal(dns_name_from_text("db.prod.svc.cluster.local.", w), 27);
	assert_int_equal(dns_name_len(w), 27);

	assert_int_equal(dns_name_from_text(".", w), 1);
	assert_int_equal(w[0], 0);
	assert_int_equal(dns_name_to_text(w, text, sizeof(text)), 1);
	assert_string_equal(text, ".");

	assert_int_equal(dns_name_from_text("_http._tcp.*.x-y", w), 18);
	assert_int_equal(dns_name_to_text(w, text, sizeof(text)), 17);
	assert_string_equal(text, "_http._tcp.*.x-y.");
}

static void test_name_from_text_errors(void **state)
{
	(void)state;
	uint8_t w[DNS_MAX_NAME];
	char text[300];

	assert_int_equal(dns_name_from_text("", w), -1);
	assert_int_equal(dns_name_from_text("a..b", w), -1);
	assert_int_equal(dns_name_from_text(".a", w), -1);
	assert_int_equal(dns_name_from_text("a.b..", w), -1);

	memset(text, 'x', 64);
	text[64] = '\0';
	assert_int_equal(dns_name_from_text(text, w), -1);
	text[63] = '\0';
	assert_int_equal(dns_name_from_text(text, w), 65);

	/* 63.63.63.61 is 255 bytes of wire; one more letter is too many */
	memset(text, 'x', 253);
	text[63] = text[127] = text[191] = '.';
	text[253] = '\0';
	assert_int_equal(dns_name_from_text(text, w), 255);
	text[253] = 'x';
	text[254] = '\0';
	assert_int_equal(dns_name_from_text(text, w), -1);
}

static void test_name_to_text_escapes_and_limits(void **state)
{
	(void)state;
	char text[64];
	static const uint8_t odd[] = {4, 'a', '.', ' ', 0xFF, 1, 'Z', 0};

	assert_int_equal(dns_name_to_text(odd, text, sizeof(text)), 16);
	assert_string_equal(text, "a\\046\\032\\255.Z.");
	assert_int_equal(dns_name_to_text(odd, text, 16), -1); /* no room for NUL */
	assert_int_equal(dns_name_to_text(odd, text, 17), 16);
	assert_int_equal(dns_name_to_text((const uint8_t *)"", text, 1), -1);
	assert_int_equal(dns_name_to_text((const uint8_t *)"\101a", text, sizeof(text)), -1);
	/* a plain label is copied whole, within the same room: itself, a dot, the NUL */
	static const uint8_t plain[] = {3, 'w', 'w', 'w', 2, 'n', 'L', 0};
	assert_int_equal(dns_name_to_text(plain, text, 7), -1);
	assert_int_equal(dns_name_to_text(plain, text, 8), 7);
	assert_string_equal(text, "www.nL.");
	assert_int_equal(dns_name_to_text(plain, text, 4), -1);
	/* plain and escaped labels in one name */
	static const uint8_t mixed[] = {2, 'a', '@', 3, 'b', '-', 'c', 0};
	assert_int_equal(dns_name_to_text(mixed, text, sizeof(text)), 10);
	assert_string_equal(text, "a\\064.b-c.");
}

static void test_name_subdomain(void **state)
{
	(void)state;
	uint8_t name[DNS_MAX_NAME], suffix[DNS_MAX_NAME], root[DNS_MAX_NAME];

	wire(".", root);
	wire("cluster.local", suffix);

	wire("db.prod.svc.cluster.local", name);
	assert_true(dns_name_is_subdomain(name, suffix));
	wire("cluster.local", name);
	assert_true(dns_name_is_subdomain(name, suffix));
	wire("xcluster.local", name);
	assert_false(dns_name_is_subdomain(name, suffix));
	wire("cluster.localx", name);
	assert_false(dns_name_is_subdomain(name, suffix));
	wire("local", name);
	assert_false(dns_name_is_subdomain(name, suffix));
	assert_true(dns_name_is_subdomain(name, root));
	assert_false(dns_name_is_subdomain(root, suffix));
	/* a label whose bytes look like a length byte must not fool the walk */
	wire("a\7cluster.local", name);
	assert_false(dns_name_is_subdomain(name, suffix));
}

static void test_name_len_and_lower(void **state)
{
	(void)state;
	/* Every byte that is not an ASCII capital passes through: length bytes,
	 * '@' and '[' (just outside A..Z), and bytes >= 0x80. */
	uint8_t name[] = "\3WwW\4A1@[\5Z\xc1\x80-M";
	uint8_t lower[sizeof name];

	assert_int_equal(dns_name_len(name), 16);
	assert_int_equal(dns_name_len((const uint8_t *)""), 1);
	dns_name_copy_lower(lower, name, 16);
	assert_memory_equal(lower, "\3www\4a1@[\5z\xc1\x80-m", 16);
}

/* The eight-bytes-at-a-time lowering against the byte rule, for every byte
 * value at every place in names of every length up to 40. */
static void test_name_copy_lower_every_byte_and_length(void **state)
{
	(void)state;
	uint8_t src[48], dst[48], want[48];

	for (size_t len = 0; len <= 40; len++) {
		for (unsigned v = 0; v < 256; v++) {
			for (size_t i = 0; i < len; i++)
				src[i] = (uint8_t)(v + 37 * i);
			for (size_t i = 0; i < len; i++)
				want[i] = (src[i] >= 'A' && src[i] <= 'Z') ? (uint8_t)(src[i] + 32) : src[i];
			memset(dst, 0xEE, sizeof dst);
			dns_name_copy_lower(dst, src, len);
			assert_memory_equal(dst, want, len);
			assert_int_equal(dst[len], 0xEE); /* nothing written past len */
		}
	}
}

static void test_query_set_name_keeps_the_rest(void **state)
{
	(void)state;
	struct dns_query q;
	uint8_t name[DNS_MAX_NAME];

	pkt_parse_query(&(struct pkt_query){QUERY("WwW.ExAmPle.COM", DNS_T_AAAA)}, &q);
	size_t n = wire("www.svc.cluster.local", name);
	dns_query_set_name(&q, name);
	assert_int_equal(q.qname_len, n);
	assert_int_equal(q.qname_labels, 4);
	assert_memory_equal(q.qname, name, n);
	assert_memory_equal(q.qname_orig, name, n);
	assert_int_equal(q.qtype, DNS_T_AAAA);
	assert_int_equal(q.id, 0x1234);
	dns_query_set_name(&q, (const uint8_t *)"");
	assert_int_equal(q.qname_len, 1);
	assert_int_equal(q.qname_labels, 0);
}

/* ---- writer ------------------------------------------------------------- */

static uint8_t out[DNS_MAX_MESSAGE];

static void parse_query(const char *name, uint16_t type, struct dns_query *q)
{
	pkt_parse_query(&(struct pkt_query){QUERY(name, type)}, q);
}

/* With an OPT: 1232 bytes, DO, and a client cookie of that many bytes (0: none). */
static void parse_edns_query(const char *name, uint16_t type, uint16_t cookie,
			     struct dns_query *q)
{
	pkt_parse_query(&(struct pkt_query){QUERY(name, type), .opts = 1, .udp = 1232,
					    .ttl = DNS_EDNS_DO, .cookie = cookie > 0,
					    .cookie_len = cookie},
			q);
}

static bool add_a(struct dns_writer *w, enum dns_section s, const char *owner,
		  uint8_t last)
{
	uint8_t name[DNS_MAX_NAME];
	const uint8_t addr[4] = {10, 0, 0, last};

	if (owner)
		wire(owner, name);
	return dns_response_add_rr(w, s, owner ? name : NULL, DNS_T_A, DNS_C_IN,
				   300, addr, 4);
}

static bool add_name_rr(struct dns_writer *w, enum dns_section s,
			const char *owner, uint16_t type, const char *target)
{
	uint8_t name[DNS_MAX_NAME], rdata[DNS_MAX_NAME];
	size_t n = wire(target, rdata);

	if (owner)
		wire(owner, name);
	return dns_response_add_rr(w, s, owner ? name : NULL, type, DNS_C_IN, 300,
				   rdata, (uint16_t)n);
}

static void test_response_round_trip(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	pkt_parse_query(&(struct pkt_query){.id = 0xBEEF, .flags = DNS_F_RD | DNS_F_CD | DNS_F_AD,
					    .qname = "WWW.Example.com", .qtype = DNS_T_A},
			&q);

	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	dns_response_set_aa(&w, true);
	assert_true(add_name_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME, "web.example.com"));
	assert_true(add_a(&w, DNS_SEC_ANSWER, "web.example.com", 7));
	assert_true(add_name_rr(&w, DNS_SEC_AUTHORITY, "example.com", DNS_T_NS, "ns1.example.com"));
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, "ns1.example.com", 53));
	size_t len = dns_response_finish(&w, 1232);

	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->id, 0xBEEF);
	assert_int_equal(v->flags, DNS_F_QR | DNS_F_AA | DNS_F_RD | DNS_F_RA | DNS_F_CD);
	assert_int_equal(v->qd, 1);
	assert_int_equal(v->an, 2);
	assert_int_equal(v->ns, 1);
	assert_int_equal(v->ar, 1); /* no OPT: the query had none */
	assert_string_equal(v->qname, "WWW.Example.com.");
	assert_int_equal(v->qtype, DNS_T_A);
	assert_int_equal(v->qclass, DNS_C_IN);

	/* answer 1: owner is the 0xC00C pointer, target "web" + pointer to
	 * the question's "Example.com" at offset 16 */
	const struct rr_view *cname = &v->rr[0];
	assert_int_equal(rd16(out + cname->owner_off), 0xC00C);
	assert_string_equal(cname->owner, "WWW.Example.com.");
	assert_int_equal(cname->type, DNS_T_CNAME);
	assert_int_equal(cname->ttl, 300);
	assert_int_equal(cname->rdlen, 6);
	assert_memory_equal(out + cname->rdoff, "\3web\xC0\x10", 6);
	assert_string_equal(cname->target, "web.Example.com.");

	/* answer 2: its owner is exactly the CNAME target, so one pointer */
	const struct rr_view *a = &v->rr[1];
	assert_int_equal(rd16(out + a->owner_off), 0xC000 | cname->rdoff);
	assert_string_equal(a->owner, "web.Example.com.");
	assert_int_equal(a->rdlen, 4);
	assert_int_equal(out[a->rdoff + 3], 7);

	const struct rr_view *ns = &v->rr[2];
	assert_int_equal(rd16(out + ns->owner_off), 0xC010);
	assert_int_equal(ns->type, DNS_T_NS);
	assert_memory_equal(out + ns->rdoff, "\3ns1\xC0\x10", 6);
	assert_string_equal(ns->target, "ns1.Example.com.");

	const struct rr_view *glue = &v->rr[3];
	assert_int_equal(rd16(out + glue->owner_off), 0xC000 | ns->rdoff);
	assert_int_equal(out[glue->rdoff + 3], 53);
}

static void test_response_owner_of_another_name_is_written_out(void **state)
{
	(void)state;
	struct dns_query q, other;
	struct dns_writer w;
	uint8_t name[DNS_MAX_NAME];

	parse_query("Db.Example.com", DNS_T_A, &q);
	other = q;
	wire("db.example.net", name);
	dns_query_set_name(&other, name);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_null(dns_response_owner(&w, &q));
	assert_ptr_equal(dns_response_owner(&w, &other), other.qname);
}

static void test_response_srv_target_not_compressed(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t rdata[6 + DNS_MAX_NAME] = {0, 10, 0, 5, 0x1F, 0x90};

	parse_query("_http._tcp.web.svc.cluster.local", DNS_T_SRV, &q);
	size_t tlen = wire("web.svc.cluster.local", rdata + 6);
	uint16_t rdlen = (uint16_t)(6 + tlen);

	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_SRV,
					DNS_C_IN, 30, rdata, rdlen));
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, "web.svc.cluster.local", 9));
	size_t len = dns_response_finish(&w, 1232);

	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->an, 1);
	assert_int_equal(v->ar, 1);
	assert_int_equal(v->rr[0].rdlen, rdlen);
	assert_memory_equal(out + v->rr[0].rdoff, rdata, rdlen);
	/* the additional owner points into the question (offset 12 + 6 + 5),
	 * never into the SRV rdata */
	assert_int_equal(rd16(out + v->rr[1].owner_off), 0xC000 | 23);
	assert_string_equal(v->rr[1].owner, "web.svc.cluster.local.");
}

static void test_response_mx_and_soa_compressed(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t mx[2 + DNS_MAX_NAME] = {0, 10};
	uint8_t soa[2 * DNS_MAX_NAME + 20];
	uint8_t apex[DNS_MAX_NAME];
	char text[MSG_TEXT_MAX];

	parse_query("example.org", DNS_T_MX, &q);
	size_t mxlen = 2 + wire("mail.example.org", mx + 2);
	size_t soalen = wire("ns.dns.example.org", soa);
	soalen += wire("hostmaster.example.org", soa + soalen);
	for (int i = 0; i < 20; i++)
		soa[soalen++] = (uint8_t)(i + 1);
	wire("example.org", apex);

	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_MX,
					DNS_C_IN, 60, mx, (uint16_t)mxlen));
	assert_true(dns_response_add_rr(&w, DNS_SEC_AUTHORITY, apex, DNS_T_SOA,
					DNS_C_IN, 60, soa, (uint16_t)soalen));
	size_t len = dns_response_finish(&w, 1232);

	struct msg_view *v = read_msg(out, len);
	const struct rr_view *m = &v->rr[0], *s = &v->rr[1];
	assert_int_equal(m->rdlen, 2 + 7);
	assert_int_equal(rd16(out + m->rdoff), 10);
	assert_memory_equal(out + m->rdoff + 2, "\4mail\xC0\x0C", 7);

	assert_int_equal(rd16(out + s->owner_off), 0xC00C);
	assert_int_equal(s->rdlen, (3 + 4 + 2) + (11 + 2) + 20);
	size_t pos = s->rdoff;
	read_name(out, len, &pos, text, NULL);
	assert_string_equal(text, "ns.dns.example.org.");
	read_name(out, len, &pos, text, NULL);
	assert_string_equal(text, "hostmaster.example.org.");
	assert_memory_equal(out + pos, soa + soalen - 20, 20);
}

static void test_response_malformed_cname_rdata_copied_verbatim(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	static const uint8_t junk[] = {3, 'a', 'b'}; /* label runs past rdata */

	parse_query("example.org", DNS_T_CNAME, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_CNAME,
					DNS_C_IN, 60, junk, sizeof(junk)));
	size_t len = dns_response_finish(&w, 512);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->rr[0].rdlen, sizeof(junk));
	assert_memory_equal(out + v->rr[0].rdoff, junk, sizeof(junk));
	assert_string_equal(v->rr[0].target, ""); /* not read as a name */
}

static void test_response_compresses_other_names(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t root[DNS_MAX_NAME];
	uint8_t ns[DNS_MAX_NAME];
	size_t nslen = wire("a.root-servers.net", ns);

	wire(".", root);
	parse_query("a.example.com", DNS_T_A, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	/* repeated labels: "x" must not match the half-written "x.x..." */
	assert_true(add_a(&w, DNS_SEC_ANSWER, "x.x.other.net", 1));
	assert_true(add_a(&w, DNS_SEC_ANSWER, "www.other.net", 2));
	assert_true(dns_response_add_rr(&w, DNS_SEC_AUTHORITY, root, DNS_T_NS,
					DNS_C_IN, 60, ns, (uint16_t)nslen));
	size_t len = dns_response_finish(&w, 512);

	struct msg_view *v = read_msg(out, len);
	const struct rr_view *first = &v->rr[0], *second = &v->rr[1], *top = &v->rr[2];
	assert_string_equal(first->owner, "x.x.other.net.");
	assert_false(first->owner_pointer);
	assert_memory_equal(out + first->owner_off, "\1x\1x\5other\3net", 15);
	assert_string_equal(second->owner, "www.other.net.");
	assert_memory_equal(out + second->owner_off, "\3www", 4);
	assert_int_equal(rd16(out + second->owner_off + 4), 0xC000 | (first->owner_off + 4));
	assert_string_equal(top->owner, ".");
	assert_int_equal(out[top->owner_off], 0);
	assert_int_equal(top->rdoff, top->owner_off + 1 + 10);
	/* "net" is already there: a, root-servers, then a pointer */
	assert_int_equal(top->rdlen, 2 + 13 + 2);
}

static void test_response_rdata_not_matching_type_copied(void **state)
{
	(void)state;
	static const struct {
		uint16_t type;
		uint8_t rdata[16];
		uint16_t rdlen;
	} cases[] = {
		{DNS_T_MX, {0}, 1},                          /* no room for preference */
		{DNS_T_NS, {0x41, 'a', 0}, 3},               /* 0x40 label type */
		{DNS_T_PTR, {1, 'a', 0, 0}, 4},              /* bytes after the name */
		{DNS_T_SOA, {1, 'a', 0, 1, 'b', 0}, 6},      /* no serial..minimum */
		{DNS_T_CNAME, {0xC0, 0x0C}, 2},              /* a pointer, not a name */
	};
	struct dns_query q;
	struct dns_writer w;

	parse_query("example.org", DNS_T_ANY, &q);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
		assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, cases[i].type,
						DNS_C_IN, 60, cases[i].rdata,
						cases[i].rdlen));
		size_t len = dns_response_finish(&w, 512);
		assert_int_equal(len, w.question_end + 2 + 10 + cases[i].rdlen);
		assert_memory_equal(out + len - cases[i].rdlen, cases[i].rdata,
				    cases[i].rdlen);
	}
}

static void test_response_rollback_inside_rdata(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t mx[2 + DNS_MAX_NAME] = {0, 5};
	uint16_t mxlen = (uint16_t)(2 + wire("mail.elsewhere.test", mx + 2));

	parse_query("example.org", DNS_T_MX, &q);
	/* room for owner and fixed part, and for all but the last byte of the
	 * rdata: the record fails before, inside and after the first label */
	for (size_t spare = 0; spare < mxlen; spare++) {
		size_t limit = 12 + 13 + 4 + 2 + 10 + spare;
		for (int section = DNS_SEC_ANSWER; section <= DNS_SEC_ADDITIONAL; section++) {
			dns_response_begin(&w, out, limit, &q, DNS_R_NOERROR);
			assert_false(dns_response_add_rr(&w, (enum dns_section)section, NULL,
							 DNS_T_MX, DNS_C_IN, 60, mx, mxlen));
			assert_int_equal(w.len, w.question_end);
			/* no name of the partial record is a target; the question's
			 * two labels, added when the first name was written, stay */
			assert_int_equal(w.ncomp, w.comp_question ? 2 : 0);
			assert_int_equal(w.truncated, section != DNS_SEC_ADDITIONAL);
			size_t len = dns_response_finish(&w, 512);
			struct msg_view *v = read_msg(out, len);
			assert_int_equal(v->an + v->ns + v->ar, 0);
			assert_int_equal((v->flags & DNS_F_TC) != 0,
					 section != DNS_SEC_ADDITIONAL);
		}
	}
}

static void test_response_no_pointers_past_16k(void **state)
{
	(void)state;
	static uint8_t txt[20000];
	struct dns_query q;
	struct dns_writer w;

	for (size_t i = 0; i < sizeof(txt); i += 200)
		txt[i] = 199;
	parse_query("big.example.com", DNS_T_TXT, &q);
	dns_response_begin(&w, out, DNS_MAX_MESSAGE, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_TXT,
					DNS_C_IN, 60, txt, sizeof(txt)));
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, "a.other.net", 1));
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, "a.other.net", 2));
	size_t len = dns_response_finish(&w, 1232);

	/* both beyond offset 0x3FFF, so neither can be a pointer target */
	struct msg_view *v = read_msg(out, len);
	for (int i = 1; i <= 2; i++) {
		assert_true(v->rr[i].owner_off > 0x3FFF);
		assert_false(v->rr[i].owner_pointer);
		assert_string_equal(v->rr[i].owner, "a.other.net.");
	}
}

static void test_response_many_owners_round_trip(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	char owner[64];

	parse_query("svc.example.com", DNS_T_A, &q);
	dns_response_begin(&w, out, DNS_MAX_MESSAGE, &q, DNS_R_NOERROR);
	for (int i = 0; i < 500; i++) {
		snprintf(owner, sizeof(owner), "h%d.%s.example.com", i, i % 2 ? "odd" : "even");
		assert_true(add_a(&w, DNS_SEC_ANSWER, owner, (uint8_t)i));
	}
	size_t len = dns_response_finish(&w, 1232);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->an, 500);
	assert_int_equal(w.ncomp, DNS_COMPRESS_SLOTS);
	for (int i = 0; i < 500; i++) {
		snprintf(owner, sizeof(owner), "h%d.%s.example.com.", i, i % 2 ? "odd" : "even");
		assert_string_equal(v->rr[i].owner, owner);
		assert_true(v->rr[i].owner_pointer);
	}
}

static void test_response_truncates_at_512(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	int added = 0;

	parse_edns_query("Big.Example.com", DNS_T_A, 0, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	size_t question_end = w.len;
	while (add_a(&w, DNS_SEC_ANSWER, NULL, (uint8_t)added))
		added++;
	assert_true(added > 10 && added < 40);
	assert_true(w.truncated);
	assert_false(add_a(&w, DNS_SEC_ADDITIONAL, "ns.example.com", 1));

	size_t len = dns_response_finish(&w, 1232);
	assert_int_equal(len, question_end + 11);
	struct msg_view *v = read_msg(out, len);
	assert_true(v->flags & DNS_F_TC);
	assert_int_equal(v->qd, 1);
	assert_int_equal(v->an, 0);
	assert_int_equal(v->ns, 0);
	assert_int_equal(v->ar, 1);
	assert_string_equal(v->qname, "Big.Example.com.");
	const struct rr_view *opt = find_opt(v);
	assert_non_null(opt);
	assert_int_equal(opt->rclass, 1232);
	assert_true(opt->ttl & DNS_EDNS_DO);
}

static void test_response_truncates_without_edns(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t txt[256];

	memset(txt, 'x', sizeof(txt));
	txt[0] = 255;
	parse_query("txt.example.com", DNS_T_TXT, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_TXT,
					DNS_C_IN, 1, txt, sizeof(txt)));
	assert_false(dns_response_add_rr(&w, DNS_SEC_AUTHORITY, NULL, DNS_T_TXT,
					 DNS_C_IN, 1, txt, sizeof(txt)));
	size_t len = dns_response_finish(&w, 0);
	struct msg_view *v = read_msg(out, len);
	assert_true(v->flags & DNS_F_TC);
	assert_int_equal(v->an + v->ns + v->ar, 0);
	assert_int_equal(len, w.question_end);
}

static void test_response_additional_overflow_omitted(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t txt[200];

	memset(txt, 'y', sizeof(txt));
	txt[0] = 199;
	parse_edns_query("svc.example.com", DNS_T_A, 0, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(dns_response_add_rr(&w, DNS_SEC_ANSWER, NULL, DNS_T_TXT,
					DNS_C_IN, 1, txt, sizeof(txt)));
	assert_true(dns_response_add_rr(&w, DNS_SEC_ADDITIONAL, NULL, DNS_T_TXT,
					DNS_C_IN, 1, txt, sizeof(txt)));
	size_t before = w.len;
	assert_false(dns_response_add_rr(&w, DNS_SEC_ADDITIONAL, NULL, DNS_T_TXT,
					 DNS_C_IN, 1, txt, sizeof(txt)));
	assert_int_equal(w.len, before);
	assert_false(w.truncated);
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, "small.example.com", 2));

	size_t len = dns_response_finish(&w, 1232);
	assert_true(len <= DNS_MAX_UDP_PLAIN);
	struct msg_view *v = read_msg(out, len);
	assert_false(v->flags & DNS_F_TC);
	assert_int_equal(v->an, 1);
	assert_int_equal(v->ar, 3); /* TXT, A, OPT */
	assert_non_null(find_opt(v));
	assert_string_equal(v->rr[2].owner, "small.example.com.");
}

static void test_response_opt_always_fits(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	for (uint16_t cookie = 0; cookie <= 40; cookie = cookie ? cookie + 8 : 8) {
		parse_edns_query("fill.example.com", DNS_T_A, cookie, &q);
		for (size_t limit = 100; limit <= 600; limit += 7) {
			dns_response_begin(&w, out, limit, &q, DNS_R_NOERROR);
			for (uint8_t i = 0; add_a(&w, DNS_SEC_ADDITIONAL, "n.example.com", i); i++)
				;
			size_t len = dns_response_finish(&w, 1232);
			assert_true(len > 0 && len <= limit);
			assert_non_null(find_opt(read_msg(out, len)));
		}
	}
}

static void test_response_tcp_limit_carries_big_answer(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	parse_edns_query("many.example.com", DNS_T_A, 0, &q);
	dns_response_begin(&w, out, DNS_MAX_MESSAGE, &q, DNS_R_NOERROR);
	for (int i = 0; i < 3000; i++)
		assert_true(add_a(&w, DNS_SEC_ANSWER, NULL, (uint8_t)i));
	size_t len = dns_response_finish(&w, 1232);
	assert_true(len > 3000 * 16);
	struct msg_view *v = read_msg(out, len);
	assert_false(v->flags & DNS_F_TC);
	assert_int_equal(v->an, 3000);
	assert_int_equal(v->ar, 1);
	assert_int_equal(v->rr[2999].rdlen, 4);
}

static void test_response_badvers(void **state)
{
	(void)state;
	struct pkt p;
	struct dns_query q;
	struct dns_writer w;

	pkt_build_query(&p, &(struct pkt_query){QUERY("example.com", DNS_T_A), .opts = 1,
						.udp = 4096, .ttl = 1u << 16});
	assert_int_equal(dns_parse_query(p.b, p.len, &q), DNS_PARSE_BADVERS);

	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_BADVERS);
	size_t len = dns_response_finish(&w, 1232);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->flags & 0xF, 0);
	assert_int_equal(v->qd, 1);
	const struct rr_view *opt = find_opt(v);
	assert_non_null(opt);
	assert_int_equal(opt->ttl >> 24, 1);       /* 16 >> 4 */
	assert_int_equal((opt->ttl >> 16) & 0xFF, 0); /* we speak version 0 */
	assert_int_equal(opt->rclass, 1232);
	assert_string_equal(opt->owner, ".");
}

static void test_response_cookie_only_with_server_cookie(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	for (uint16_t sent = 8; sent <= 24; sent += 16) {
		parse_edns_query("example.com", DNS_T_A, sent, &q);
		dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
		size_t len = dns_response_finish(&w, 1232);
		const struct rr_view *opt = find_opt(read_msg(out, len));
		assert_non_null(opt);
		assert_int_equal(q.cookie_len, sent); /* parsed ... */
		assert_int_equal(opt->rdlen, 0);      /* ... ignored without a server cookie */

		static const uint8_t server[DNS_SERVER_COOKIE_LEN] = {1, 0, 0, 0, 9, 9, 9, 9,
								      1, 2, 3, 4, 5, 6, 7, 8};
		dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
		dns_response_set_server_cookie(&w, server);
		len = dns_response_finish(&w, 1232);
		opt = find_opt(read_msg(out, len));
		assert_non_null(opt);
		assert_int_equal(opt->rdlen, 4 + 8 + 16);
		assert_int_equal(rd16(out + opt->rdoff), DNS_EDNS_OPT_COOKIE);
		assert_int_equal(rd16(out + opt->rdoff + 2), 24);
		assert_memory_equal(out + opt->rdoff + 4, q.cookie, 8); /* client part */
		assert_memory_equal(out + opt->rdoff + 12, server, 16);
	}
}

/*
 * SipHash-1-3 against the 64 vectors of Rust's libcore (test_siphash_1_3 in
 * library/coretests/tests/hash/sip.rs, the reference SipHasher13): key
 * 00..0f, message i the bytes 0..i-1, the hash as 8 little-endian bytes.
 * Every tail length and up to seven full blocks.
 */
static void test_siphash13_reference_vectors(void **state)
{
	static const char *const vectors[64] = {
		"dcc40f055801acab", "93ca577df39bf4c9", "4dd4c74d029bcb82", "fbf7dde7b80af88b",
		"2883d388605775cf", "673b53492fd5f9de", "a7229fc5502b0dc5", "4011b19b987d92d3",
		"8e9a298d11959036", "e43d066cb38ea425", "7f09ff92ee85de79", "52c34df9c118c170",
		"a2d9b457b184a378", "a7ff29120c766f30", "345df9c011a15a60", "5699512a6dd820d3",
		"668b907d1add4fcc", "0cd8db639068f29c", "3ee673b49c38fc8f", "1c7d298de59d1ff2",
		"40e0cca6462fdcc0", "44f8452bfeab92b9", "2e8720a39b7bfe7f", "23c1e6da7f0e5a52",
		"8c9c3467b2ae64f4", "79095b702859cd45", "a51399cae3353e3a", "353bde4a4ec71da9",
		"0dd06cef02ed0bfb", "f4e1b14ab43cd988", "63e6c543d6110f54", "bcd1218c1fdd7023",
		"0db6a7166c7b1581", "bff98f7ae5b9544d", "3e752a1f78129f75", "916b18bfbea3a1ce",
		"0662a2add308f52c", "5730c3a32d1c10b6", "a1363aae9674f4b3", "9283107b54576b62",
		"3115e4993236d2c1", "44d91a3f92c17c66", "258813c8fe4f7065", "a64989c2d180f224",
		"6b87f8faed1ccac2", "9621049ffc4b16c2", "23d6b168939c6ea1", "fd14518b9c16fb49",
		"464c07dff843319f", "b386cc1224affdc6", "8f09520ad149af7e", "9a2f299d5513f31c",
		"121ff4a2dd304ac4", "d01ea74389e9fa36", "e6bcf0734cb38f31", "80e9a77036bf7aa2",
		"756d3c24dbc0bcb4", "1315b7fd52d8f823", "088a7da64d5f038f", "48f1e8b7e5d09cd8",
		"ee44a6f7bce6f4f6", "f237180fd89ac5ae", "e094664b15f6b2c3", "a8b3bbb76290199d",
	};
	uint8_t key[16], msg[64];
	(void)state;

	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (size_t n = 0; n < 64; n++) {
		uint64_t h = dns_siphash13(key, msg, n);
		char hex[17];
		for (int b = 0; b < 8; b++)
			snprintf(hex + 2 * b, 3, "%02x", (unsigned)(h >> (8 * b)) & 0xff);
		if (strcmp(hex, vectors[n]) != 0)
			fail_msg("SipHash-1-3 of %zu bytes: %s, expected %s", n, hex, vectors[n]);
	}
}

static void test_siphash24_reference_vector(void **state)
{
	(void)state;
	/* The SipHash paper's vector: key 00..0f, message 00..0e. */
	uint8_t key[16], msg[15];

	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	assert_true(dns_siphash24(key, msg, 15) == 0xa129ca6149be45e5ull);
	assert_true(dns_siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
}

static void test_server_cookie_format(void **state)
{
	(void)state;
	static const uint8_t client[8] = {0x24, 0x64, 0xc4, 0xab, 0xcf, 0x10, 0xc9, 0x57};
	static const uint8_t secret[16] = {0xe5, 0xe9, 0x73, 0xe5, 0xa6, 0xb2, 0xa4, 0x3f,
					   0x48, 0xe7, 0xdc, 0x84, 0x9e, 0x37, 0xbf, 0xcf};
	static const uint8_t ip4[4] = {198, 51, 100, 100};
	static const uint8_t other_ip[4] = {198, 51, 100, 101};
	uint8_t a[16], b[16], c[16];

	/* RFC 9018 appendix A.1: version 1, three reserved zero bytes, the
	 * big-endian timestamp, then the SipHash-2-4 of it all. */
	dns_server_cookie(a, client, secret, 1559731985, ip4, 4);
	assert_memory_equal(a, "\x01\x00\x00\x00\x5c\xf7\x9f\x11"
			       "\x1f\x81\x30\xc3\xee\xe2\x94\x80", 16);
	dns_server_cookie(b, client, secret, 1559731985, ip4, 4);
	assert_memory_equal(a, b, 16); /* deterministic */
	dns_server_cookie(c, client, secret, 1559731985, other_ip, 4);
	assert_memory_not_equal(a + 8, c + 8, 8); /* the address is in the hash */
	dns_server_cookie(c, client, secret, 1559731986, ip4, 4);
	assert_memory_not_equal(a + 8, c + 8, 8); /* and so is the time */
}

static void test_response_rcodes(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	parse_query("gone.example.com", DNS_T_A, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	dns_response_set_rcode(&w, DNS_R_NXDOMAIN);
	dns_response_set_aa(&w, true);
	dns_response_set_aa(&w, false);
	size_t len = dns_response_finish(&w, 1232);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->flags & 0xF, DNS_R_NXDOMAIN);
	assert_false(v->flags & DNS_F_AA);

	/* an extended rcode with no OPT to carry it must not read as NOERROR */
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_BADVERS);
	len = dns_response_finish(&w, 1232);
	v = read_msg(out, len);
	assert_int_equal(v->flags & 0xF, DNS_R_SERVFAIL);
	assert_int_equal(v->ar, 0);
}

static void test_response_section_order_enforced(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	parse_query("example.com", DNS_T_A, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_true(add_a(&w, DNS_SEC_AUTHORITY, "example.com", 1));
	assert_false(add_a(&w, DNS_SEC_ANSWER, NULL, 2));
	assert_false(w.truncated);
	assert_true(add_a(&w, DNS_SEC_ADDITIONAL, NULL, 3));
	size_t len = dns_response_finish(&w, 512);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->an, 0);
	assert_int_equal(v->ns, 1);
	assert_int_equal(v->ar, 1);
}

static void test_response_limit_too_small(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;

	parse_edns_query("example.com", DNS_T_A, 8, &q);
	/* header 12 + question 17 + OPT 11 + room for a COOKIE answer 28 = 68 */
	memset(out, 0xEE, 64);
	dns_response_begin(&w, out, 67, &q, DNS_R_NOERROR);
	dns_response_set_aa(&w, true);
	assert_false(add_a(&w, DNS_SEC_ADDITIONAL, NULL, 1));
	assert_int_equal(dns_response_finish(&w, 1232), 0);
	for (size_t i = 0; i < 64; i++)
		assert_int_equal(out[i], 0xEE); /* nothing written at all */

	dns_response_begin(&w, out, 68, &q, DNS_R_NOERROR);
	assert_int_equal(dns_response_finish(&w, 1232), 40); /* no server cookie set */

	q.question_ok = false;
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	assert_int_equal(dns_response_finish(&w, 1232), 0);
}

/* ---- error replies ------------------------------------------------------ */

static void test_error_reply_formerr(void **state)
{
	(void)state;
	struct pkt p;
	struct dns_query q;

	pkt_build_query(&p, &(struct pkt_query){.id = 0x4242, .flags = DNS_F_RD | DNS_F_CD,
						.counts = {2}, .qname = "a.example",
						.qtype = DNS_T_A,
						.tail = PKT_BYTES("\1b\7example\0" "\0\1\0\1")});
	assert_int_equal(dns_parse_query(p.b, p.len, &q), DNS_PARSE_FORMERR);

	size_t len = dns_error_reply(p.b, p.len, &q, DNS_R_FORMERR, out, sizeof(out));
	assert_int_equal(len, DNS_HEADER_LEN);
	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->id, 0x4242);
	assert_int_equal(v->flags, DNS_F_QR | DNS_F_RD | DNS_R_FORMERR);
	assert_int_equal(v->qd + v->an + v->ns + v->ar, 0);

	/* question parsed, a later record did not: the question is echoed */
	pkt_build_query(&p, &(struct pkt_query){QUERY("Echo.Example", DNS_T_MX),
						.counts = {1, 1, 0, 0}});
	assert_int_equal(dns_parse_query(p.b, p.len, &q), DNS_PARSE_FORMERR);
	len = dns_error_reply(p.b, p.len, &q, DNS_R_FORMERR, out, sizeof(out));
	v = read_msg(out, len);
	assert_int_equal(v->qd, 1);
	assert_string_equal(v->qname, "Echo.Example.");
	assert_int_equal(v->qtype, DNS_T_MX);
	assert_int_equal(v->an, 0);

	/* no parsed query at all */
	len = dns_error_reply(p.b, p.len, NULL, DNS_R_FORMERR, out, sizeof(out));
	assert_int_equal(len, DNS_HEADER_LEN);
}

static void test_error_reply_notimp_in_place(void **state)
{
	(void)state;
	struct pkt p;
	struct dns_query q;

	pkt_build_query(&p, &(struct pkt_query){.id = 9, .flags = 4 << 11 | DNS_F_RD,
						.qname = "Notify.Example", .qtype = DNS_T_SOA});
	assert_int_equal(dns_parse_query(p.b, p.len, &q), DNS_PARSE_NOTIMP);

	/* reply over the query's own buffer, as a server would */
	size_t len = dns_error_reply(p.b, p.len, &q, DNS_R_NOTIMP, p.b, sizeof(p.b));
	struct msg_view *v = read_msg(p.b, len);
	assert_int_equal(v->id, 9);
	assert_int_equal(v->flags, DNS_F_QR | (4 << 11) | DNS_F_RD | DNS_R_NOTIMP);
	assert_int_equal(v->qd, 1);
	assert_string_equal(v->qname, "Notify.Example.");
	assert_int_equal(v->qtype, DNS_T_SOA);
}

static void test_error_reply_refuses(void **state)
{
	(void)state;
	struct pkt p;
	struct dns_query q;

	pkt_build_query(&p, &(struct pkt_query){QUERY("example.com", DNS_T_A)});
	assert_int_equal(dns_parse_query(p.b, p.len, &q), DNS_PARSE_OK);
	assert_int_equal(dns_error_reply(p.b, 11, NULL, DNS_R_FORMERR, out, sizeof(out)), 0);
	assert_int_equal(dns_error_reply(p.b, p.len, &q, DNS_R_FORMERR, out, 11), 0);
	/* not enough room for the question: header alone still goes out */
	assert_int_equal(dns_error_reply(p.b, p.len, &q, DNS_R_FORMERR, out, 20), 12);
	p.b[2] |= 0x80;
	assert_int_equal(dns_error_reply(p.b, p.len, NULL, DNS_R_FORMERR, out, sizeof(out)), 0);
}

/* ---- response: pre-encoded sections (the cache's path) ------------------- */

/* One answer (owner = pointer to the question) and one additional record
 * whose owner is written out: 16 + 26 bytes. */
static size_t raw_sections(uint8_t *b)
{
	static const uint8_t answer[] = {0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1};
	size_t n = sizeof(answer);

	uint8_t name[DNS_MAX_NAME];
	size_t name_len = wire("ns.example.net", name);

	memcpy(b, answer, n);
	memcpy(b + n, name, name_len);
	n += name_len;
	static const uint8_t rest[] = {0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 53};
	memcpy(b + n, rest, sizeof(rest));
	return n + sizeof(rest);
}

static void test_response_append_raw(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t raw[128];
	size_t n = raw_sections(raw);
	const uint16_t counts[3] = {1, 0, 1};

	parse_edns_query("Raw.Example.com", DNS_T_A, 0, &q);
	dns_response_begin(&w, out, 1232, &q, DNS_R_NOERROR);
	size_t question_end = w.len;
	assert_true(dns_response_append_raw(&w, raw, n, counts));
	/* only the additional section is left to add to */
	assert_false(add_a(&w, DNS_SEC_ANSWER, NULL, 9));
	assert_false(w.truncated);
	size_t len = dns_response_finish(&w, 1232);

	struct msg_view *v = read_msg(out, len);
	assert_int_equal(v->an, 1);
	assert_int_equal(v->ns, 0);
	assert_int_equal(v->ar, 2);
	assert_string_equal(v->rr[0].owner, "Raw.Example.com.");
	assert_string_equal(v->rr[1].owner, "ns.example.net.");
	assert_non_null(find_opt(v));
	assert_memory_equal(out + question_end, raw, n);
	assert_int_equal(len, question_end + n + 11);
}

static void test_response_append_raw_truncates(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t raw[600];
	const uint16_t counts[3] = {37, 0, 0};

	for (int i = 0; i < 37; i++) /* 592 bytes of A records */
		memcpy(raw + 16 * i,
		       (const uint8_t[]){0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, (uint8_t)i},
		       16);
	parse_edns_query("big.example.com", DNS_T_A, 0, &q);
	dns_response_begin(&w, out, DNS_MAX_UDP_PLAIN, &q, DNS_R_NOERROR);
	size_t question_end = w.len;
	assert_false(dns_response_append_raw(&w, raw, 16 * 37, counts));
	assert_true(w.truncated);
	size_t len = dns_response_finish(&w, 1232);
	assert_int_equal(len, question_end + 11);
	struct msg_view *v = read_msg(out, len);
	assert_true(v->flags & DNS_F_TC);
	assert_int_equal(v->an, 0);
	assert_int_equal(v->ar, 1);

	/* the OPT reserve counts: exactly limit - OPT fits */
	dns_response_begin(&w, out, question_end + 16 * 3 + 11, &q, DNS_R_NOERROR);
	const uint16_t three[3] = {3, 0, 0};
	assert_true(dns_response_append_raw(&w, raw, 16 * 3, three));
	len = dns_response_finish(&w, 1232);
	assert_int_equal(len, question_end + 16 * 3 + 11);
	assert_int_equal(read_msg(out, len)->an, 3);
}

static void test_response_append_raw_needs_fresh_writer(void **state)
{
	(void)state;
	struct dns_query q;
	struct dns_writer w;
	uint8_t raw[128];
	size_t n = raw_sections(raw);
	const uint16_t counts[3] = {1, 0, 1};

	parse_query("fresh.example.com", DNS_T_A, &q);
	dns_response_begin(&w, out, 512, &q, DNS_R_NOERROR);
	assert_true(add_a(&w, DNS_SEC_ANSWER, NULL, 1));
	size_t before = w.len;
	assert_false(dns_response_append_raw(&w, raw, n, counts));
	assert_false(w.truncated);
	assert_int_equal(w.len, before);

	/* a writer that never started refuses too */
	dns_response_begin(&w, out, 16, &q, DNS_R_NOERROR);
	assert_false(dns_response_append_raw(&w, raw, n, counts));
	assert_int_equal(dns_response_finish(&w, 1232), 0);
}

/* ---- dns_message_compact ---------------------------------------------------- */

/*
 * www.example.com A: answer A + RRSIG; authority NSEC (owner zz.example.com,
 * written out) then SOA whose owner points into the NSEC's owner name, with
 * mname/rname compressed; additional OPT.
 */
static size_t signed_reply(uint8_t *m, uint16_t qtype)
{
	static const uint8_t head[] = {
		0, 0, 0x81, 0x80, 0, 1, 0, 2, 0, 2, 0, 1,
		3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0,
	};
	static const uint8_t rest[] = {
		/* answer: A 192.0.2.1 */
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1,
		/* answer: RRSIG, 6 bytes of (fake) rdata */
		0xc0, 12, 0, 46, 0, 1, 0, 0, 0, 60, 0, 6, 0, 1, 8, 3, 0, 0,
		/* authority: NSEC owner zz.example.com (offset 67; its pointer to
		 * "example.com" at 70), rdata 2 bytes */
		2, 'z', 'z', 0xc0, 16, 0, 47, 0, 1, 0, 0, 0, 60, 0, 2, 0, 0,
		/* authority: SOA owner -> "example.com" via the NSEC owner's pointer
		 * (offset 70), mname ns.<ptr 70>, rname <ptr 67>, 20 fixed bytes */
		0xc0, 70, 0, 6, 0, 1, 0, 0, 0, 60, 0, 27,
		2, 'n', 's', 0xc0, 70, 0xc0, 67,
		0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5,
		/* additional: OPT */
		0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0,
	};
	memcpy(m, head, sizeof head);
	m[sizeof head] = (uint8_t)(qtype >> 8);
	m[sizeof head + 1] = (uint8_t)qtype;
	m[sizeof head + 2] = 0;
	m[sizeof head + 3] = 1;
	memcpy(m + sizeof head + 4, rest, sizeof rest);
	return sizeof head + 4 + sizeof rest;
}

/* The question of the reply m as a parsed query (QR cleared, no records). */
static void question_of(const uint8_t *m, size_t question_end, struct dns_query *q)
{
	uint8_t pkt[300];

	memcpy(pkt, m, question_end);
	memset(pkt + 2, 0, 10);
	pkt[5] = 1;
	assert_int_equal(dns_parse_query(pkt, question_end, q), DNS_PARSE_OK);
}

static void test_compact_drops_dnssec_records_and_compresses_names(void **state)
{
	uint8_t in[512], out[512];
	size_t len = signed_reply(in, DNS_T_A);
	struct dns_query q;
	(void)state;

	question_of(in, 33, &q);
	size_t n = dns_message_compact(in, len, &q, true, out, sizeof out);
	assert_true(n > 0);
	assert_int_equal(out[7], 1);  /* answer: A only */
	assert_int_equal(out[9], 1);  /* authority: SOA only */
	assert_int_equal(out[11], 0); /* the OPT belongs to the upstream exchange */
	assert_memory_equal(out + 2, in + 2, 2); /* the upstream's flags */
	/* the A record's owner is now a pointer to the question */
	static const uint8_t a_rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1};
	assert_memory_equal(out + 33, a_rr, sizeof a_rr);
	/* the SOA that pointed into the dropped NSEC is whole again:
	 * owner -> "example.com" in the question, mname ns.<that>, rname zz.<that> */
	static const uint8_t soa[] = {0xc0, 16, 0, 6, 0, 1, 0, 0, 0, 60, 0, 30,
				      2, 'n', 's', 0xc0, 16, 2, 'z', 'z', 0xc0, 16,
				      0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5};
	assert_int_equal(n, 33 + sizeof a_rr + sizeof soa);
	assert_memory_equal(out + 33 + sizeof a_rr, soa, sizeof soa);
	/* compacting again changes nothing */
	uint8_t again[512];
	assert_int_equal(dns_message_compact(out, n, &q, true, again, sizeof again), n);
	assert_memory_equal(out, again, n);
}

static void test_compact_keeps_dnssec_records_when_asked(void **state)
{
	uint8_t in[512], out[512];
	size_t len = signed_reply(in, DNS_T_A);
	struct dns_query q;
	(void)state;

	question_of(in, 33, &q);
	assert_true(dns_message_compact(in, len, &q, false, out, sizeof out) > 0);
	assert_int_equal(out[7], 2); /* A and RRSIG: the client set DO */
	assert_int_equal(out[9], 2);
	len = signed_reply(in, 46 /* RRSIG */);
	question_of(in, 33, &q);
	assert_true(dns_message_compact(in, len, &q, true, out, sizeof out) > 0);
	assert_int_equal(out[7], 2); /* the type asked for stays */
	assert_int_equal(out[9], 1);
	len = signed_reply(in, DNS_T_ANY);
	question_of(in, 33, &q);
	assert_true(dns_message_compact(in, len, &q, true, out, sizeof out) > 0);
	assert_int_equal(out[7], 2);
	assert_int_equal(out[9], 2);
}

/* in (its question ending at question_end) compacts to want, and want to itself. */
static void assert_compacts_to(const uint8_t *in, size_t len, size_t question_end,
			       const uint8_t *want, size_t want_len)
{
	uint8_t out[512], again[512];
	struct dns_query q;

	question_of(in, question_end, &q);
	size_t n = dns_message_compact(in, len, &q, true, out, sizeof out);
	assert_int_equal(n, want_len);
	assert_memory_equal(out, want, want_len);
	assert_int_equal(dns_message_compact(out, n, &q, true, again, sizeof again), n);
	assert_memory_equal(again, want, want_len);
}

/*
 * The short way (add_simple_rr) and the long one (rewrite_rr) give the
 * same bytes: the question's own A and AAAA records, owner written out in
 * any case or as a pointer, become pointers to the question; another
 * name's record in between is compressed against the question as before.
 */
static void test_compact_writes_the_question_s_own_addresses_with_a_pointer(void **state)
{
	static const uint8_t in[] = {
		0, 0, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 1,
		3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1,
		/* A, the owner written out in upper case */
		3, 'W', 'W', 'W', 7, 'E', 'X', 'A', 'M', 'P', 'L', 'E', 3, 'C', 'O', 'M', 0,
		0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1,
		/* A of another name: mail.<example.com at 16> */
		4, 'm', 'a', 'i', 'l', 0xc0, 16, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 2,
		/* AAAA, the owner a pointer to the question */
		0xc0, 12, 0, 28, 0, 1, 0, 0, 0, 30, 0, 16,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		/* OPT */
		0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0,
	};
	static const uint8_t want[] = {
		0, 0, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0,
		3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1,
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1,
		4, 'm', 'a', 'i', 'l', 0xc0, 16, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 2,
		0xc0, 12, 0, 28, 0, 1, 0, 0, 0, 30, 0, 16,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
	};
	uint8_t out[512];
	struct dns_query q;
	(void)state;

	assert_compacts_to(in, sizeof in, 33, want, sizeof want);
	question_of(in, 33, &q);
	/* a message cut inside the short way's record, or no room for it, is refused */
	for (size_t cut = 33; cut < 33 + 31; cut++)
		assert_int_equal(dns_message_compact(in, cut, &q, true, out, sizeof out), 0);
	assert_int_equal(dns_message_compact(in, sizeof in, &q, true, out, 40), 0);
}

/* A question for the root: its records' owner, the root too, stays one byte
 * (never a pointer, which would be longer), and compacting again changes
 * nothing (fuzz_query found the short way writing a pointer). */
static void test_compact_writes_the_root_as_one_byte(void **state)
{
	static const uint8_t in[] = {
		0, 0, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0,
		0, 0, 1, 0, 1,
		/* A, the owner the root written out, then a pointer to the question's */
		0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1,
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 2,
	};
	static const uint8_t want[] = {
		0, 0, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0,
		0, 0, 1, 0, 1,
		0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1,
		0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 2,
	};
	(void)state;

	assert_compacts_to(in, sizeof in, 17, want, sizeof want);
}

static void test_compact_refuses_bad_input(void **state)
{
	uint8_t in[512], out[512];
	size_t len = signed_reply(in, DNS_T_A);
	struct dns_query q, other;
	(void)state;

	question_of(in, 33, &q);
	for (size_t cut = 0; cut < len - 11; cut++) /* the OPT is dropped anyway */
		assert_int_equal(dns_message_compact(in, cut, &q, true, out, sizeof out), 0);
	assert_int_equal(dns_message_compact(in, len, &q, true, out, 40), 0); /* no room */
	other = q;
	other.qtype = DNS_T_AAAA;
	assert_int_equal(dns_message_compact(in, len, &other, true, out, sizeof out), 0);
	in[len - 11 - 39 + 1] = 200; /* the SOA owner points forward */
	assert_int_equal(dns_message_compact(in, len, &q, true, out, sizeof out), 0);
}

/* The one decoding both reply counters use: six rcodes, then "other". */
static void test_reply_rcode_slot_and_truncation(void **state)
{
	uint8_t header[DNS_HEADER_LEN] = {0x12, 0x34, 0x81, 0x80};

	(void)state;
	for (unsigned rcode = 0; rcode < 16; rcode++) {
		header[3] = (uint8_t)(0x80 | rcode);
		assert_int_equal(dns_reply_rcode_slot(header, false),
				 rcode <= DNS_R_REFUSED ? rcode : DNS_RCODE_SLOT_OTHER);
		assert_int_equal(dns_reply_rcode_slot(header, true), DNS_RCODE_SLOT_OTHER);
	}
	assert_false(dns_reply_truncated(header));
	header[2] |= DNS_F_TC >> 8;
	assert_true(dns_reply_truncated(header));
}

/* ---- records of a zone's apex (dns_apex_rr) ------------------------------ */

/* A question for text in the client's case (the codec's own lower-cased copy beside it). */
static void apex_question(struct dns_query *q, const char *text)
{
	char lower[DNS_MAX_NAME * 4];
	size_t i;

	for (i = 0; text[i] && i + 1 < sizeof lower; i++)
		lower[i] = (char)((text[i] >= 'A' && text[i] <= 'Z') ? text[i] + 32 : text[i]);
	lower[i] = '\0';
	memset(q, 0, sizeof *q);
	q->id = 7;
	q->qtype = DNS_T_A;
	q->qclass = DNS_C_IN;
	q->qname_len = (uint16_t)wire(lower, q->qname);
	size_t n = 0, label = 0;
	for (i = 0;; i++) { /* the same name with text's letters as they are */
		if (text[i] == '.' || text[i] == '\0') {
			q->qname_orig[label] = (uint8_t)(n - label);
			label = ++n;
			if (text[i] == '\0')
				break;
		} else {
			q->qname_orig[++n] = (uint8_t)text[i];
		}
	}
	q->qname_orig[label] = 0;
	assert_int_equal(n + 1, q->qname_len);
	assert_true(strncasecmp((char *)q->qname_orig, (char *)q->qname, q->qname_len) == 0);
	q->question_ok = true;
}

/* rdata of an SOA whose two names are mname and rname, then 20 bytes. */
static uint16_t soa_rdata(uint8_t *out, const char *mname, const char *rname)
{
	size_t n = wire(mname, out);

	n += wire(rname, out + n);
	memset(out + n, 0x11, 20);
	return (uint16_t)(n + 20);
}

/* The same reply written with dns_response_add_apex_rr and with dns_response_add_rr. */
static void assert_apex_rr_matches_add_rr(const char *qname, const struct dns_apex_rr *rr,
					  bool cname_first, size_t limit)
{
	uint8_t a[1024], b[1024], cname[DNS_MAX_NAME];
	size_t cname_len = wire("target.elsewhere.org", cname);
	struct dns_query q;
	struct dns_writer wa, wb;

	apex_question(&q, qname);
	dns_response_begin(&wa, a, limit, &q, DNS_R_NXDOMAIN);
	dns_response_begin(&wb, b, limit, &q, DNS_R_NXDOMAIN);
	if (cname_first) {
		/* too long for the smallest limits: then both are truncated */
		assert_int_equal(dns_response_add_rr(&wa, DNS_SEC_ANSWER, NULL, DNS_T_CNAME,
						     DNS_C_IN, 60, cname, (uint16_t)cname_len),
				 dns_response_add_rr(&wb, DNS_SEC_ANSWER, NULL, DNS_T_CNAME,
						     DNS_C_IN, 60, cname, (uint16_t)cname_len));
	}
	bool ra = dns_response_add_apex_rr(&wa, DNS_SEC_AUTHORITY, rr);
	bool rb = dns_response_add_rr(&wb, DNS_SEC_AUTHORITY, rr->apex, rr->type, DNS_C_IN,
				      rr->ttl, rr->rdata, rr->rdlen);
	assert_int_equal(ra, rb);
	size_t la = dns_response_finish(&wa, 1232), lb = dns_response_finish(&wb, 1232);
	if (la != lb || memcmp(a, b, la) != 0)
		fail_msg("%s: apex record differs from add_rr's (%zu vs %zu bytes)", qname, la, lb);
}

static const char *const apex_qnames[] = {
	"cluster.local", "a.cluster.local", "Deep.Name.Under.Cluster.Local",
	"dns.cluster.local", "x.dns.cluster.local", "ns.dns.cluster.local",
	"HostMaster.cluster.local", "y.cluster.local", "local", "other.org",
	"a.local", "cluster.local.cluster.local",
};

static void test_apex_rr_writes_what_add_rr_writes(void **state)
{
	uint8_t apex[DNS_MAX_NAME], rd[5][DNS_MAX_NAME * 2 + 20];
	struct {
		uint16_t type, len;
		bool encoded; /* add_rr only ever points at the apex: encodable */
	} cases[5];
	static struct dns_apex_rr rr;
	(void)state;

	wire("cluster.local", apex);
	cases[0] = (typeof(cases[0])){DNS_T_SOA, soa_rdata(rd[0], "ns.dns.cluster.local",
							   "hostmaster.cluster.local"), true};
	cases[1] = (typeof(cases[1])){DNS_T_NS, (uint16_t)wire("ns1.example.org", rd[1]), true};
	cases[2] = (typeof(cases[2])){DNS_T_CNAME, (uint16_t)wire("x.local", rd[2]), false};
	cases[3] = (typeof(cases[3])){DNS_T_SOA, soa_rdata(rd[3], "a.y.cluster.local",
							   "b.y.cluster.local"), false};
	cases[4] = (typeof(cases[4])){DNS_T_A, 4, true};
	memcpy(rd[4], "\x0a\x00\x00\x01", 4);
	for (size_t c = 0; c < 5; c++) {
		dns_apex_rr_build(&rr, apex, cases[c].type, 300, rd[c], cases[c].len);
		assert_int_equal(rr.len > 0, cases[c].encoded);
		for (size_t i = 0; i < sizeof apex_qnames / sizeof *apex_qnames; i++)
			for (int first = 0; first < 2; first++)
				for (size_t limit = 40; limit <= 1024; limit += 12)
					assert_apex_rr_matches_add_rr(apex_qnames[i], &rr, first,
								      limit);
	}
}

/* A reply for name/type with rcode: an answer record, or the zone's SOA in
 * authority (its owner a pointer into the question, as our writer puts it). */
static void reply_with(struct pkt *p, const char *name, uint16_t type, uint16_t rcode,
		       bool answer, size_t zone_offset)
{
	static const uint8_t a[4] = {10, 0, 0, 1};
	static const uint8_t soa[2 + 2 + 20] = {0xc0, 0x0c, 0xc0, 0x0c, 0, 0, 0, 1, 0, 0, 0, 1,
						0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};

	put_header(p, 7, 0x8180 | rcode, 1, 0, 0, 0);
	put_question(p, name, type, DNS_C_IN);
	if (answer)
		put_rr_at(p, DNS_SEC_ANSWER, DNS_HEADER_LEN, DNS_T_A, 60, a, sizeof a);
	if (zone_offset)
		put_rr_at(p, DNS_SEC_AUTHORITY, zone_offset, DNS_T_SOA, 60, soa, sizeof soa);
}

static void test_reply_key_for_rate_limiting(void **state)
{
	struct dns_reply_key k;
	struct pkt p;
	uint8_t zone[DNS_MAX_NAME], qname[DNS_MAX_NAME];

	(void)state;
	text_to_wire("site.example", zone);
	text_to_wire("www.site.example", qname);
	/* an answer: the question's name (lower-cased) and type */
	reply_with(&p, "WWW.Site.Example", DNS_T_A, DNS_R_NOERROR, true, 0);
	dns_reply_key(p.b, p.len, &k);
	assert_int_equal(k.kind, DNS_REPLY_ANSWER);
	assert_int_equal(k.type, DNS_T_A);
	assert_int_equal(k.name_len, dns_name_len(qname));
	assert_memory_equal(k.name, qname, k.name_len);
	/* no data: the same name and type, another kind */
	reply_with(&p, "www.site.example", DNS_T_AAAA, DNS_R_NOERROR, false, 16);
	dns_reply_key(p.b, p.len, &k);
	assert_int_equal(k.kind, DNS_REPLY_NODATA);
	assert_int_equal(k.type, DNS_T_AAAA);
	assert_memory_equal(k.name, qname, k.name_len);
	/* NXDOMAIN: the zone of the SOA (at offset 16: "site.example" in the
	 * question), whatever the name and type asked */
	reply_with(&p, "r00042.site.example", DNS_T_TXT, DNS_R_NXDOMAIN, false, 19);
	dns_reply_key(p.b, p.len, &k);
	assert_int_equal(k.kind, DNS_REPLY_NXDOMAIN);
	assert_int_equal(k.type, 0);
	assert_int_equal(k.name_len, dns_name_len(zone));
	assert_memory_equal(k.name, zone, k.name_len);
	/* NXDOMAIN without a SOA: the question's name */
	reply_with(&p, "www.site.example", DNS_T_A, DNS_R_NXDOMAIN, false, 0);
	dns_reply_key(p.b, p.len, &k);
	assert_int_equal(k.kind, DNS_REPLY_NXDOMAIN);
	assert_memory_equal(k.name, qname, k.name_len);
	/* an error: no name, no type */
	reply_with(&p, "www.site.example", DNS_T_A, DNS_R_SERVFAIL, false, 0);
	dns_reply_key(p.b, p.len, &k);
	assert_int_equal(k.kind, DNS_REPLY_ERROR);
	assert_int_equal(k.name_len, 0);
	assert_int_equal(k.type, 0);
	/* a record that runs past the end: the question still names it */
	reply_with(&p, "r1.site.example", DNS_T_A, DNS_R_NXDOMAIN, false, 15);
	dns_reply_key(p.b, p.len - 3, &k);
	text_to_wire("r1.site.example", qname);
	assert_int_equal(k.kind, DNS_REPLY_NXDOMAIN);
	assert_int_equal(k.name_len, dns_name_len(qname));
	assert_memory_equal(k.name, qname, k.name_len);
	/* no question at all */
	dns_reply_key(p.b, 11, &k);
	assert_int_equal(k.kind, DNS_REPLY_ERROR);
	assert_int_equal(k.name_len, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_cases),
		cmocka_unit_test(test_parse_every_cut_of_a_query),
		cmocka_unit_test(test_compact_drops_dnssec_records_and_compresses_names),
		cmocka_unit_test(test_compact_keeps_dnssec_records_when_asked),
		cmocka_unit_test(test_compact_writes_the_question_s_own_addresses_with_a_pointer),
		cmocka_unit_test(test_compact_writes_the_root_as_one_byte),
		cmocka_unit_test(test_compact_refuses_bad_input),
		cmocka_unit_test(test_name_read_follows_pointer_and_lowers),
		cmocka_unit_test(test_name_read_pointer_chain_limit),
		cmocka_unit_test(test_name_text_round_trip),
		cmocka_unit_test(test_name_from_text_errors),
		cmocka_unit_test(test_name_to_text_escapes_and_limits),
		cmocka_unit_test(test_name_subdomain),
		cmocka_unit_test(test_name_len_and_lower),
		cmocka_unit_test(test_name_copy_lower_every_byte_and_length),
		cmocka_unit_test(test_query_set_name_keeps_the_rest),
		cmocka_unit_test(test_response_round_trip),
		cmocka_unit_test(test_response_owner_of_another_name_is_written_out),
		cmocka_unit_test(test_response_srv_target_not_compressed),
		cmocka_unit_test(test_response_mx_and_soa_compressed),
		cmocka_unit_test(test_response_malformed_cname_rdata_copied_verbatim),
		cmocka_unit_test(test_response_compresses_other_names),
		cmocka_unit_test(test_response_rdata_not_matching_type_copied),
		cmocka_unit_test(test_response_rollback_inside_rdata),
		cmocka_unit_test(test_response_no_pointers_past_16k),
		cmocka_unit_test(test_response_many_owners_round_trip),
		cmocka_unit_test(test_response_truncates_at_512),
		cmocka_unit_test(test_response_truncates_without_edns),
		cmocka_unit_test(test_response_additional_overflow_omitted),
		cmocka_unit_test(test_response_opt_always_fits),
		cmocka_unit_test(test_response_tcp_limit_carries_big_answer),
		cmocka_unit_test(test_response_badvers),
		cmocka_unit_test(test_response_cookie_only_with_server_cookie),
		cmocka_unit_test(test_siphash24_reference_vector),
		cmocka_unit_test(test_siphash13_reference_vectors),
		cmocka_unit_test(test_server_cookie_format),
		cmocka_unit_test(test_response_rcodes),
		cmocka_unit_test(test_response_section_order_enforced),
		cmocka_unit_test(test_response_limit_too_small),
		cmocka_unit_test(test_error_reply_formerr),
		cmocka_unit_test(test_error_reply_notimp_in_place),
		cmocka_unit_test(test_error_reply_refuses),
		cmocka_unit_test(test_response_append_raw),
		cmocka_unit_test(test_response_append_raw_truncates),
		cmocka_unit_test(test_response_append_raw_needs_fresh_writer),
		cmocka_unit_test(test_reply_rcode_slot_and_truncation),
		cmocka_unit_test(test_apex_rr_writes_what_add_rr_writes),
		cmocka_unit_test(test_reply_key_for_rate_limiting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
