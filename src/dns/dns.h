/*
 * dns — the DNS wire codec used on the query hot path.
 *
 * Owns: parsing one query message into a struct dns_query, converting names
 * between text and wire form, and writing a response into a caller-supplied
 * buffer (header, echoed question, resource records with name compression,
 * EDNS0 OPT, clean truncation).
 *
 * Must never: allocate, lock, log, make a syscall, or read or write outside
 * the buffers it is given. Every function here is safe on hostile input; the
 * fuzz target in tests/fuzz/ holds it to that.
 *
 * Names inside this module are in uncompressed wire form ("\3www\7example\3com\0")
 * and, unless said otherwise, lower-cased: that is the form the lookup tables
 * in zone/ (and later cluster/ and cache/) key on.
 */
#ifndef LOCALDNS_DNS_H
#define LOCALDNS_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_HEADER_LEN 12
#define DNS_MAX_NAME 255      /* wire length, root label included */
#define DNS_MAX_LABEL 63
#define DNS_MAX_UDP_PLAIN 512 /* RFC 1035 limit for a client without EDNS */
#define DNS_MAX_MESSAGE 65535 /* TCP frame limit */
#define DNS_EDNS_MIN_PAYLOAD 512
#define DNS_COOKIE_MAX 40     /* 8-byte client cookie + 8..32-byte server cookie */
#define DNS_CLIENT_COOKIE_LEN 8
#define DNS_SERVER_COOKIE_LEN 16 /* the RFC 9018 format we mint */
#define DNS_COMPRESS_SLOTS 64 /* name positions remembered for compression */

enum dns_type {
	DNS_T_A = 1,
	DNS_T_NS = 2,
	DNS_T_CNAME = 5,
	DNS_T_SOA = 6,
	DNS_T_PTR = 12,
	DNS_T_HINFO = 13,
	DNS_T_MX = 15,
	DNS_T_TXT = 16,
	DNS_T_AAAA = 28,
	DNS_T_SRV = 33,
	DNS_T_OPT = 41,
	DNS_T_SVCB = 64,  /* RFC 9460 */
	DNS_T_HTTPS = 65,
	DNS_T_IXFR = 251,
	DNS_T_AXFR = 252,
	DNS_T_ANY = 255,
};

enum dns_class {
	DNS_C_IN = 1,
	DNS_C_CH = 3,
	DNS_C_ANY = 255,
};

enum dns_rcode {
	DNS_R_NOERROR = 0,
	DNS_R_FORMERR = 1,
	DNS_R_SERVFAIL = 2,
	DNS_R_NXDOMAIN = 3,
	DNS_R_NOTIMP = 4,
	DNS_R_REFUSED = 5,
	DNS_R_BADVERS = 16, /* extended: only expressible with an OPT record */
};

enum dns_opcode {
	DNS_OP_QUERY = 0,
};

/* Header flag bits as they sit in the 16-bit flags word. */
#define DNS_F_QR 0x8000
#define DNS_F_AA 0x0400
#define DNS_F_TC 0x0200
#define DNS_F_RD 0x0100
#define DNS_F_RA 0x0080
#define DNS_F_AD 0x0020
#define DNS_F_CD 0x0010
#define DNS_OPCODE(flags) (((flags) >> 11) & 0xf)

/*
 * Replies are counted by rcode in DNS_RCODE_SLOTS slots: NOERROR .. REFUSED,
 * then DNS_RCODE_SLOT_OTHER for everything else. The workers and the
 * resolver thread both count what they send this way, so their counts add.
 */
#define DNS_RCODE_SLOTS 7
#define DNS_RCODE_SLOT_OTHER 6

/* The slot of a reply (at least its header); BADVERS hides in OPT (the
 * header says 0), so the caller says when it sent one. */
static inline unsigned dns_reply_rcode_slot(const uint8_t *reply, bool bad_version)
{
	unsigned rcode = reply[3] & 0xf;

	return bad_version || rcode > DNS_R_REFUSED ? DNS_RCODE_SLOT_OTHER : rcode;
}

/* Whether a reply (at least its header) went out with TC=1. */
static inline bool dns_reply_truncated(const uint8_t *reply)
{
	return (reply[2] & (DNS_F_TC >> 8)) != 0;
}

/*
 * What response rate limiting (src/rrl/) counts a reply under, as BIND's
 * and Knot's RRL do: the kind of answer and the name and type it is about.
 * An answer and a no-data reply: the question's name and type. NXDOMAIN:
 * the zone, the owner of the SOA record in the authority section (the
 * question's name when there is none), and no type, so random names in one
 * zone count together. Any other rcode (an error): no name and no type.
 */
enum dns_reply_kind { DNS_REPLY_ANSWER, DNS_REPLY_NODATA, DNS_REPLY_NXDOMAIN, DNS_REPLY_ERROR };
struct dns_reply_key {
	uint8_t kind;            /* enum dns_reply_kind */
	uint16_t type;
	size_t name_len;         /* 0: none */
	uint8_t name[DNS_MAX_NAME]; /* lower-cased wire form */
};

/* The key of reply[0..len) (one we wrote: a header and one question); a
 * reply without a readable question is an error without a name. */
void dns_reply_key(const uint8_t *reply, size_t len, struct dns_reply_key *out);

/* EDNS0 option codes we understand; every other option is ignored. */
#define DNS_EDNS_OPT_COOKIE 10
#define DNS_EDNS_DO 0x8000 /* in the OPT record's TTL field, low 16 bits */

enum dns_parse_result {
	DNS_PARSE_OK,      /* q is complete: answer it */
	DNS_PARSE_DROP,    /* not worth a reply: shorter than a header, or QR=1 */
	DNS_PARSE_FORMERR, /* reply with dns_error_reply(..., DNS_R_FORMERR) */
	DNS_PARSE_NOTIMP,  /* opcode other than QUERY: reply NOTIMP */
	DNS_PARSE_BADVERS, /* EDNS version > 0: reply BADVERS (needs q's OPT data) */
};

/*
 * One parsed query. It holds copies, not pointers, so it stays valid after
 * the packet buffer is reused. Fields past qclass are meaningful only when
 * dns_parse_query returned DNS_PARSE_OK (or BADVERS, for the EDNS fields).
 */
struct dns_query {
	uint16_t id;
	uint16_t flags;          /* the query's flags word as received */
	bool question_ok;        /* the question parsed (may echo it in errors) */
	uint16_t qtype;
	uint16_t qclass;
	uint16_t qname_len;      /* wire length of qname, root label included */
	uint8_t qname_labels;    /* label count, root excluded */
	uint8_t qname[DNS_MAX_NAME];      /* lower-cased, uncompressed */
	uint8_t qname_orig[DNS_MAX_NAME]; /* the client's letter case */

	bool has_edns;
	uint8_t edns_version;
	bool edns_do;
	uint16_t edns_udp_size;  /* as sent, not clamped */
	uint8_t cookie_len;      /* 0, or 8..40 when a well-formed cookie came */
	uint8_t cookie[DNS_COOKIE_MAX];
};

/*
 * Parse the query in pkt[0..len). Exactly one question; compression pointers
 * must point backwards and stay inside the packet (loops are impossible);
 * labels <= 63 bytes, names <= 255; at most one OPT record, owned by the
 * root, in the additional section. Answer and authority records, and
 * additional records other than OPT, are skipped after a bounds check.
 */
enum dns_parse_result dns_parse_query(const uint8_t *pkt, size_t len,
				      struct dns_query *q);

/*
 * Read a possibly compressed name starting at pkt[*pos] into out (lower-
 * cased when lower is true). On success *pos is advanced past the name as
 * it sits in the packet and the wire length is returned; -1 on any error.
 */
int dns_name_read(const uint8_t *pkt, size_t len, size_t *pos,
		  uint8_t out[DNS_MAX_NAME], bool lower);

/* One resource record of a message, as dns_rr_read gives it. */
struct dns_rr {
	uint8_t owner[DNS_MAX_NAME];   /* expanded, in the message's letter case */
	uint16_t type, rclass;
	uint32_t ttl;
	uint16_t rdlen;
	uint8_t rdata[DNS_MAX_MESSAGE]; /* its names expanded (dns_rdata_names' types) */
};

/*
 * Read the record at msg[*pos] into rr, its owner and the names in its
 * rdata expanded (a compressed message's records can then be written
 * again, elsewhere, by dns_response_add_rr), and move *pos past it. false
 * when the record is malformed or runs past len.
 */
bool dns_rr_read(const uint8_t *msg, size_t len, size_t *pos, struct dns_rr *rr);

/*
 * Text to lower-cased wire name ("db.prod.svc.cluster.local" or with a
 * trailing dot; "." is the root). No escapes; rejects empty labels, labels
 * over 63 bytes and names over 255. Returns the wire length or -1.
 */
int dns_name_from_text(const char *text, uint8_t out[DNS_MAX_NAME]);

/*
 * Wire name to dotted text with a trailing dot ("." for the root). Bytes
 * other than letters, digits, '-', '_' and '*' are written as \DDD.
 * Returns the text length, or -1 if out is too small (1024 always fits).
 */
int dns_name_to_text(const uint8_t *name, char *out, size_t outlen);

/* FNV-1a over a lower-cased wire name: the hash every name table keys on. */
uint64_t dns_name_hash(const uint8_t *name, size_t len);

/* Wire length of an uncompressed name (root label included). */
size_t dns_name_len(const uint8_t *name);

/* True when name equals suffix or lies below it (both lower-cased). */
bool dns_name_is_subdomain(const uint8_t *name, const uint8_t *suffix);

/* Copy a wire name of len bytes, lower-cased (ASCII only). */
void dns_name_copy_lower(uint8_t *dst, const uint8_t *src, size_t len);

/*
 * Make q ask about name (a lower-cased wire name) instead, keeping its type,
 * class, flags and EDNS: the question for one candidate of a search (see
 * query/autopath.c). Sets qname, qname_orig, qname_len and qname_labels.
 */
void dns_query_set_name(struct dns_query *q, const uint8_t *name);

/* Where a record type's rdata holds domain names: `before` fixed bytes,
 * then `names` names, then `after` fixed bytes. */
struct dns_rdata_names {
	uint8_t before;
	uint8_t names;
	uint8_t after;
	bool compress; /* we compress them when writing (NS, CNAME, PTR, MX, SOA) */
};

/*
 * The layout of type's rdata if it holds names that may arrive compressed:
 * the RFC 1035 types (RFC 3597 section 4), plus DNAME, SRV, RP, AFSDB and
 * RT, which some servers compress anyway. false for every other type (its
 * rdata is opaque bytes to us). One table for the writer, the compactor and
 * the cache's checks.
 */
bool dns_rdata_names(uint16_t type, struct dns_rdata_names *out);

enum dns_section {
	DNS_SEC_ANSWER,
	DNS_SEC_AUTHORITY,
	DNS_SEC_ADDITIONAL,
};

/*
 * A response under construction. Sections are appended in order (answer,
 * authority, additional). The writer never writes past `limit`; room for the
 * OPT record is held back from the start when the query had EDNS.
 */
struct dns_writer {
	uint8_t *buf;
	size_t limit;            /* largest message allowed for this reply */
	size_t len;              /* bytes written so far */
	size_t question_end;     /* offset just past the echoed question */
	size_t reserve;          /* bytes kept back for the OPT record */
	const struct dns_query *q;
	uint16_t count[3];       /* records per section */
	enum dns_section section;
	bool truncated;          /* an answer/authority record did not fit */
	uint16_t rcode;          /* full rcode: low 4 bits to the header, rest to OPT */
	bool has_server_cookie;  /* answer the client's cookie (see set_server_cookie) */
	uint8_t server_cookie[DNS_SERVER_COOKIE_LEN];
	/* Names we can point to: where each starts and its uncompressed length
	 * (a suffix is compared byte by byte only with names as long as it;
	 * comp_lens has a bit for each length present, so most suffixes are
	 * passed over without a look at the slots). The question's labels are
	 * added when the first name is written, not at begin: most replies
	 * write none (owners point to the question). */
	bool comp_question;      /* the question's labels are in comp */
	uint8_t comp_base;       /* how many of comp they are */
	uint8_t ncomp;
	uint16_t comp[DNS_COMPRESS_SLOTS];
	uint8_t comp_len[DNS_COMPRESS_SLOTS];
	uint64_t comp_lens[4];   /* bit n: a slot holds (or, after a rollback,
				    held) a name of n bytes */
};

/*
 * Start a response to q in buf (buf must hold at least `limit` bytes; limit
 * at least DNS_HEADER_LEN + q's question + the 11-byte OPT record). Writes
 * the header (ID, opcode and RD copied, CD copied, QR and RA set, rcode) and echoes the question in the client's letter case. If
 * limit is too small, or q->question_ok is false, nothing is written and
 * dns_response_finish returns 0.
 */
void dns_response_begin(struct dns_writer *w, uint8_t *buf, size_t limit,
			const struct dns_query *q, enum dns_rcode rcode);

/*
 * Take back every record and the rcode and AA: the writer is as fresh as
 * after dns_response_begin (the server cookie stays), for a source that
 * wrote a partial answer another source will replace.
 */
void dns_response_rewind(struct dns_writer *w);

/* Set or clear AA. */
void dns_response_set_aa(struct dns_writer *w, bool aa);

/*
 * The owner to give dns_response_add_rr for records of q's name: NULL (a
 * pointer to the question, in the client's letter case) when w answers q
 * itself, else q's name, for a source asked to answer another name into w
 * (autopath writes a CNAME to a candidate, then the candidate's records).
 */
const uint8_t *dns_response_owner(const struct dns_writer *w, const struct dns_query *q);

/*
 * Answer the query's COOKIE option with the client cookie and this server
 * cookie (see dns_server_cookie). Without this call a query's cookie is
 * ignored (no COOKIE in the reply), which RFC 7873 5.2.1 also allows.
 */
void dns_response_set_server_cookie(struct dns_writer *w,
				    const uint8_t cookie[DNS_SERVER_COOKIE_LEN]);

/*
 * Change the rcode (low 4 bits go in the header, the rest in OPT). An
 * extended rcode cannot be expressed without OPT: such replies say SERVFAIL.
 */
void dns_response_set_rcode(struct dns_writer *w, enum dns_rcode rcode);

/*
 * Append one record. owner is a lower-cased wire name, or NULL for "the
 * question name" (written as a pointer to it, so the client sees its own
 * case). rdata is in uncompressed wire form; names inside it are compressed
 * for NS, CNAME, PTR, SOA and MX and never for other types (SRV targets must
 * not be compressed, RFC 2782). Returns false when the record does not fit:
 * in the answer or authority section that marks the message truncated and
 * every later add is refused; in the additional section the record is just
 * left out (RFC 2181 section 9).
 */
bool dns_response_add_rr(struct dns_writer *w, enum dns_section section,
			 const uint8_t *owner, uint16_t type, uint16_t rclass,
			 uint32_t ttl, const uint8_t *rdata, uint16_t rdlen);

/* Bytes a record may still take (the OPT record's room kept back); 0 once truncated. */
size_t dns_response_room(const struct dns_writer *w);

/*
 * Append pre-encoded answer, authority and additional records (`counts` of
 * each) in one piece, e.g. a cached upstream reply's sections. Only valid
 * on a fresh writer (right after dns_response_begin, nothing added yet);
 * compression pointers inside `sections` must already be right for the
 * offset they land at (w->question_end). Names in them are not remembered
 * as compression targets. Returns false when the writer was not fresh
 * (nothing changes), or when the bytes do not fit (the message is then
 * marked truncated, as dns_response_add_rr does).
 * Later adds may only go to the additional section.
 */
bool dns_response_append_raw(struct dns_writer *w, const uint8_t *sections,
			     size_t len, const uint16_t counts[3]);

/*
 * One record of a zone's apex (its SOA, for negative answers) encoded once,
 * for replies whose question name is at or below that apex: the owner and
 * every name in the rdata that ends in the apex are written with a pointer
 * to where the apex sits in this reply's question, so writing it costs a
 * copy and a few two-byte stores instead of a compression search.
 */
#define DNS_APEX_RR_MAX (DNS_MAX_NAME * 2 + 64)
#define DNS_APEX_RR_PATCHES 4
struct dns_apex_rr {
	uint16_t len;         /* bytes of the encoded record; 0: not encodable */
	uint8_t n_patches;
	uint16_t patch[DNS_APEX_RR_PATCHES]; /* offsets of pointers to the apex */
	uint16_t before[DNS_APEX_RR_PATCHES]; /* offset of the label before each, or 0 */
	uint8_t bytes[DNS_APEX_RR_MAX];
	/* the record itself, for replies the encoding does not suit */
	uint8_t apex[DNS_MAX_NAME];
	uint16_t apex_len;
	uint16_t type;
	uint32_t ttl;
	const uint8_t *rdata; /* borrowed: must outlive rr */
	uint16_t rdlen;
};

/*
 * Prepare the record (apex, type, IN, ttl, rdata) for dns_response_add_apex_rr.
 * Names in rdata are shortened to a pointer only where dns_response_add_rr
 * would compress them (NS, CNAME, PTR, MX, SOA) and only at the apex. A
 * record too long for DNS_APEX_RR_MAX, or with more than DNS_APEX_RR_PATCHES
 * pointers, is kept unencoded (len 0): it is then written as
 * dns_response_add_rr writes it.
 */
void dns_apex_rr_build(struct dns_apex_rr *rr, const uint8_t *apex, uint16_t type,
		       uint32_t ttl, const uint8_t *rdata, uint16_t rdlen);

/*
 * Append rr to section exactly as dns_response_add_rr(w, section, apex, ...)
 * would: the encoded record when that is what add_rr would write (w's
 * question name at or below the apex, no name but the question's written
 * yet, and the question not ending in one of the record's own names, which
 * add_rr would point to instead), else through dns_response_add_rr. Names
 * in an encoded record are not offered to later records as compression
 * targets (negative answers end with it).
 */
bool dns_response_add_apex_rr(struct dns_writer *w, enum dns_section section,
			      const struct dns_apex_rr *rr);

/*
 * Close the message: if it was truncated, roll back to header + question and
 * set TC; add the OPT record when the query had one (our payload size, DO
 * echoed, extended rcode, and the COOKIE option when a server cookie was set);
 * fix the section counts.
 * `udp_payload` is the payload size we advertise. Returns the length.
 */
size_t dns_response_finish(struct dns_writer *w, uint16_t udp_payload);

/*
 * Rewrite the upstream reply msg[0..len) to q (its one question must be
 * q's, any letter case) into out (cap bytes), the form the cache stores:
 * every record read with its names expanded and written again through
 * dns_response_add_rr, so names are compressed our way (an owner equal to
 * the question becomes a pointer to it); the question in lower case; no
 * OPT record; the upstream's header flags and rcode kept. With
 * drop_dnssec, RRSIG, NSEC and NSEC3 records are left out unless the
 * question asked for that type (or ANY): the answer for a client that did
 * not set DO (RFC 4035 section 3.2.1). Returns the new length, or 0 when
 * msg is malformed, its question is not q's, or the result does not fit.
 */
size_t dns_message_compact(const uint8_t *msg, size_t len, const struct dns_query *q,
			   bool drop_dnssec, uint8_t *out, size_t cap);

/*
 * The same for a reply about `target`, the end of a CNAME chain answered
 * locally (an ExternalName Service): chain holds the chain's targets as
 * concatenated wire names (q's name -> first -> ... -> target, each CNAME
 * with chain_ttl), and the result answers q with those CNAMEs first, then
 * the reply's records; the reply's rcode (RFC 6604: the last name's), its
 * flags without AA. 0 when msg's question is not (target, q's type and
 * class), or as dns_message_compact.
 */
size_t dns_message_chase(const uint8_t *msg, size_t len, const struct dns_query *q,
			 const uint8_t *chain, size_t chain_len, uint32_t chain_ttl,
			 bool drop_dnssec, uint8_t *out, size_t cap);

/* SipHash-2-4 (64-bit output) of msg under a 16-byte key: the cookies' (RFC 9018). */
uint64_t dns_siphash24(const uint8_t key[16], const uint8_t *msg, size_t len);

/*
 * SipHash-1-3, the same under fewer rounds: the keyed hash of the tables
 * that outside input fills (the answer cache, the resolver's questions,
 * the cluster table, the per-client slots), on the hot path. Fewer rounds
 * still keep the key from being learnt through collisions (the hash of
 * Rust's and Python's hash tables); cookies keep SipHash-2-4, which
 * RFC 9018 names.
 */
uint64_t dns_siphash13(const uint8_t key[16], const uint8_t *msg, size_t len);

/*
 * An RFC 9018 server cookie for this client cookie, client address (4 or 16
 * bytes) and time (seconds since the epoch), keyed by a 16-byte secret.
 */
void dns_server_cookie(uint8_t out[DNS_SERVER_COOKIE_LEN],
		       const uint8_t client_cookie[DNS_CLIENT_COOKIE_LEN],
		       const uint8_t secret[16], uint32_t now,
		       const uint8_t *client_ip, size_t ip_len);

/*
 * Reply to a query that failed to parse (FORMERR) or that we do not
 * implement (NOTIMP): ID, opcode and RD copied, QR set, no sections unless q
 * says the question parsed, in which case it is echoed. Needs at least a
 * full header in pkt. Returns the reply length, or 0 if nothing should go out.
 */
size_t dns_error_reply(const uint8_t *pkt, size_t len,
		       const struct dns_query *q, enum dns_rcode rcode,
		       uint8_t *out, size_t outlen);

#endif
