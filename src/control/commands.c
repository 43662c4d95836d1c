/*
 * control — the commands: stats, flush, dump-cache, reload, top, and the
 * dispatch (lookup is in lookup.c, node in node.c). Names and output
 * formats, text and --json, are an interface for operators' scripts:
 * docs/ctl.md lists them; add, never rename.
 */
#include "control/internal.h"

#include <inttypes.h>
#include <ldns/ldns.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "cache/cache.h"
#include "cluster/cluster.h"
#include "counters/counters.h"
#include "log/log.h"
#include "talkers/talkers.h"
#include "util/clock.h"

/* ---- stats -------------------------------------------------------------- */

/* Where the counters go: "name value" lines, or the members of one JSON
 * object in the same order (json: NULL for text). */
struct stats_out {
	struct conn *c;
	struct jdoc *json;
};

static void stat_line(const char *name, uint64_t value, void *arg)
{
	struct stats_out *out = arg;

	if (out->json)
		control_jdoc_put(out->json, out->json->root, name, json_object_new_uint64(value));
	else
		control_conn_printf(out->c, "%s %" PRIu64 "\n", name, value);
}

/* Every ctl stats line of the registry (src/counters/), in its order. */
static void write_stats(struct control *ctl, struct stats_out *out)
{
	struct counter_values v;

	counters_read(ctl->d, &v);
	for (int i = 0; i < CONTROL_THREADS; i++)
		v.control_lookups += atomic_load_explicit(&ctl->threads[i].lookups,
							  memory_order_relaxed);
	counters_each_stat(&v, stat_line, out);
}

static void cmd_stats(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	struct jdoc doc = {0};
	struct stats_out out = {.c = c};

	(void)argc;
	(void)argv;
	if (!c->json) {
		control_reply_ok(c);
		write_stats(t->ctl, &out);
		return;
	}
	/* About 70 members: built whole, so that out of memory is an error, not half a document. */
	out.json = &doc;
	doc.root = control_jdoc_object(&doc);
	write_stats(t->ctl, &out);
	control_reply_json(c, &doc);
}

/* ---- lookup, flush ------------------------------------------------------ */

static void cmd_lookup(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	control_lookup(t, c, argv[1], argc > 2 ? argv[2] : "A");
}

static void cmd_flush(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	struct control *ctl = t->ctl;
	uint8_t wire[DNS_MAX_NAME];

	if (argc == 1) {
		cache_flush(ctl->d->cache, NULL);
		log_info("cache flushed by localdns ctl");
		control_reply_ok(c);
		control_conn_printf(c, "flushed every entry\n");
		return;
	}
	if (dns_name_from_text(argv[1], wire) < 0) {
		control_reply_error(c, "\"%s\" is not a domain name", argv[1]);
		return;
	}
	cache_flush(ctl->d->cache, wire);
	log_info("cache entries flushed by localdns ctl", "name", argv[1]);
	control_reply_ok(c);
	control_conn_printf(c, "flushed %s (every type)\n", argv[1]);
}

/* ---- top ------------------------------------------------------------------ */

static const char *const top_kind_names[TALKERS_KINDS] = {
	[TALKERS_CLIENTS] = "clients", [TALKERS_NAMES] = "names",
	[TALKERS_NXDOMAIN] = "nxdomain", [TALKERS_SERVFAIL] = "servfail"};

static bool top_kind_of(const char *name, enum talkers_kind *out)
{
	for (int k = 0; k < TALKERS_KINDS; k++)
		if (strcmp(name, top_kind_names[k]) == 0) {
			*out = (enum talkers_kind)k;
			return true;
		}
	return false;
}

/* An item's key as text: the client address (and its pod into pod, "" if
 * none), or the name's whole labels (it->cut: more followed). */
static void top_key_text(struct control *ctl, enum talkers_kind kind, const struct talkers_item *it,
			 char *text, size_t textlen, char *pod, size_t podlen)
{
	pod[0] = '\0';
	if (kind == TALKERS_CLIENTS) {
		struct sockaddr_storage ss = {.ss_family = it->key[0]};
		bool v4 = it->key[0] == AF_INET;
		memcpy(v4 ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
			  : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
		       it->key + 1, v4 ? 4 : 16);
		inet_ntop(it->key[0], it->key + 1, text, (socklen_t)textlen);
		if (!cluster_client_pod(ctl->d->cluster, &ss, pod, podlen))
			pod[0] = '\0';
		return;
	}
	uint8_t name[DNS_MAX_NAME];
	size_t len = 0;
	/* a name cut short: its whole labels */
	while (len < it->key_len && it->key[len] && len + 1u + it->key[len] <= it->key_len)
		len += 1u + it->key[len];
	memcpy(name, it->key, len);
	name[len] = 0;
	if (dns_name_to_text(name, text, textlen) < 0)
		snprintf(text, textlen, "?");
}

/* One line: the estimate, the client address and its pod, or the name ("..." if cut). */
static void top_line(struct control *ctl, struct conn *c, enum talkers_kind kind,
		     const struct talkers_item *it)
{
	char text[1024], pod[320];

	top_key_text(ctl, kind, it, text, sizeof text, pod, sizeof pod);
	if (kind == TALKERS_CLIENTS)
		control_conn_printf(c, "%" PRIu64 " %s%s%s\n", it->count, text,
				    pod[0] ? " pod=" : "", pod);
	else
		control_conn_printf(c, "%" PRIu64 " %s%s\n", it->count, text, it->cut ? "..." : "");
}

/* {"count", "client", "pod"} (pod null when unknown) or {"count", "name", "cut"}. */
static json_object *top_item_json(struct control *ctl, struct jdoc *d, enum talkers_kind kind,
				  const struct talkers_item *it)
{
	char text[1024], pod[320];
	json_object *o = control_jdoc_object(d);

	top_key_text(ctl, kind, it, text, sizeof text, pod, sizeof pod);
	control_jdoc_put(d, o, "count", json_object_new_uint64(it->count));
	if (kind == TALKERS_CLIENTS) {
		control_jdoc_put(d, o, "client", json_object_new_string(text));
		if (pod[0])
			control_jdoc_put(d, o, "pod", json_object_new_string(pod));
		else if (o && json_object_object_add(o, "pod", NULL) < 0) /* null: no pod known */
			d->failed = true;
	} else {
		control_jdoc_put(d, o, "name", json_object_new_string(text));
		control_jdoc_put(d, o, "cut", json_object_new_boolean(it->cut));
	}
	return o;
}

/* One document: {"kind", "since_seconds", "items": [...]}, most first. */
static void top_json(struct control *ctl, struct conn *c, enum talkers_kind kind,
		     uint64_t since_seconds, const struct talkers_item *items, size_t n)
{
	struct jdoc doc = {0};

	doc.root = control_jdoc_object(&doc);
	control_jdoc_put(&doc, doc.root, "kind", json_object_new_string(top_kind_names[kind]));
	control_jdoc_put(&doc, doc.root, "since_seconds", json_object_new_uint64(since_seconds));
	json_object *list = control_jdoc_array(&doc);
	for (size_t i = 0; i < n; i++)
		control_jdoc_push(&doc, list, top_item_json(ctl, &doc, kind, &items[i]));
	control_jdoc_put(&doc, doc.root, "items", list);
	control_reply_json(c, &doc);
}

/* top clients|names|nxdomain|servfail [--since DURATION] [-n COUNT] */
static void cmd_top(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	struct control *ctl = t->ctl;
	struct talkers_item *items = t->top_items; /* each control thread its own */
	enum talkers_kind kind;
	uint64_t since_ms = TALKERS_SLOT_SECONDS * 1000, shown = 10;
	const char *why;

	if (!top_kind_of(argv[1], &kind)) {
		control_reply_usage(c, "top clients|names|nxdomain|servfail [--since DURATION] "
				    "[-n COUNT]");
		return;
	}
	for (int i = 2; i < argc; i += 2) {
		if (i + 1 >= argc ||
		    (strcmp(argv[i], "--since") == 0
			     ? config_value_duration_ms(argv[i + 1], &since_ms, &why) < 0
		     : strcmp(argv[i], "-n") == 0
			     ? config_value_uint(argv[i + 1], &shown, &why) < 0
			     : true)) {
			control_reply_usage(c, "top clients|names|nxdomain|servfail "
					    "[--since DURATION] [-n COUNT]");
			return;
		}
	}
	if (since_ms > (uint64_t)TALKERS_SLOTS * TALKERS_SLOT_SECONDS * 1000 || shown == 0 ||
	    shown > TOP_SHOWN_MAX) {
		control_reply_error(c, "--since goes back at most %d minutes and -n to %d",
				    TALKERS_SLOTS, TOP_SHOWN_MAX);
		return;
	}
	uint64_t since_seconds = (since_ms + 999) / 1000;
	size_t n = talkers_read(kind, since_seconds, items, shown);
	if (c->json) {
		top_json(ctl, c, kind, since_seconds, items, n);
		return;
	}
	control_reply_ok(c);
	for (size_t i = 0; i < n; i++)
		top_line(ctl, c, kind, &items[i]);
}

/* ---- dump-cache --------------------------------------------------------- */

struct dump {
	struct conn *c;
	bool records;
};

static const char *key_flags(const struct cache_entry_info *e)
{
	if (e->dnssec_ok)
		return e->checking_disabled ? "do,cd" : "do";
	return e->checking_disabled ? "cd" : "-";
}

/* The text's STATE prefix ("ttl" for live) or the JSON "state". */
static const char *state_name(enum cache_entry_state state, bool json)
{
	switch (state) {
	case CACHE_ENTRY_LIVE:
		return json ? "live" : "ttl";
	case CACHE_ENTRY_STALE:
		return "stale";
	case CACHE_ENTRY_EXPIRED:
		break;
	}
	return "expired";
}

/* Each record of the entry, indented, in zone-file form. */
static void dump_records(struct conn *c, const struct cache_entry_info *e)
{
	ldns_pkt *pkt;

	if (ldns_wire2pkt(&pkt, e->msg, e->msg_len) != LDNS_STATUS_OK) {
		control_conn_printf(c, "  ; records unreadable\n");
		return;
	}
	ldns_rr_list *sections[3] = {ldns_pkt_answer(pkt), ldns_pkt_authority(pkt),
				     ldns_pkt_additional(pkt)};
	for (int s = 0; s < 3; s++) {
		for (size_t i = 0; i < ldns_rr_list_rr_count(sections[s]); i++) {
			char *text = ldns_rr2str(ldns_rr_list_rr(sections[s], i));
			if (!text)
				continue;
			control_conn_write(c, "  ", 2);
			control_conn_write(c, text, strlen(text));
			free(text);
		}
	}
	ldns_pkt_free(pkt);
}

static void dump_line(struct dump *dump, const struct cache_entry_info *e)
{
	char name[1024];
	char *type = ldns_rr_type2str((ldns_rr_type)e->qtype);
	char *class = ldns_rr_class2str((ldns_rr_class)e->qclass);
	char *rcode = ldns_pkt_rcode2str((ldns_pkt_rcode)e->rcode);

	if (dns_name_to_text(e->name, name, sizeof name) < 0)
		snprintf(name, sizeof name, "?");
	control_conn_printf(dump->c, "%s %s %s %s %s %s=%u %u\n", name, type ? type : "?",
			    class ? class : "?", key_flags(e), rcode ? rcode : "?",
			    state_name(e->state, false), e->seconds, e->bytes);
	free(type);
	free(class);
	free(rcode);
	if (dump->records)
		dump_records(dump->c, e);
}

/* One line holding the entry as a JSON object; false when it could not be built. */
static bool dump_json(struct dump *dump, const struct cache_entry_info *e)
{
	struct jdoc doc = {0};
	char name[1024];
	ldns_pkt *pkt;

	if (dns_name_to_text(e->name, name, sizeof name) < 0)
		snprintf(name, sizeof name, "?");
	doc.root = control_jdoc_object(&doc);
	control_jdoc_put(&doc, doc.root, "name", json_object_new_string(name));
	control_jdoc_put(&doc, doc.root, "type",
			 control_jdoc_ldns_string(ldns_rr_type2str((ldns_rr_type)e->qtype)));
	control_jdoc_put(&doc, doc.root, "class",
			 control_jdoc_ldns_string(ldns_rr_class2str((ldns_rr_class)e->qclass)));
	control_jdoc_put(&doc, doc.root, "dnssec_ok", json_object_new_boolean(e->dnssec_ok));
	control_jdoc_put(&doc, doc.root, "checking_disabled",
			 json_object_new_boolean(e->checking_disabled));
	control_jdoc_put(&doc, doc.root, "rcode",
			 control_jdoc_ldns_string(ldns_pkt_rcode2str((ldns_pkt_rcode)e->rcode)));
	control_jdoc_put(&doc, doc.root, "state",
			 json_object_new_string(state_name(e->state, true)));
	control_jdoc_put(&doc, doc.root, "seconds", json_object_new_uint64(e->seconds));
	control_jdoc_put(&doc, doc.root, "bytes", json_object_new_uint64(e->bytes));
	/* No sections when the message does not parse (the text's "; records unreadable"). */
	if (dump->records && ldns_wire2pkt(&pkt, e->msg, e->msg_len) == LDNS_STATUS_OK) {
		control_jdoc_sections(&doc, doc.root, pkt);
		ldns_pkt_free(pkt);
	}
	return control_jdoc_write(dump->c, &doc);
}

static int dump_entry(const struct cache_entry_info *e, void *arg)
{
	struct dump *dump = arg;

	if (!dump->c->json) {
		dump_line(dump, e);
	} else if (!dump_json(dump, e)) {
		log_error("dump-cache: out of memory");
		dump->c->failed = true; /* cut short: a line left out would go unnoticed */
	}
	return dump->c->failed ? 1 : 0;
}

static void cmd_dump_cache(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	struct control *ctl = t->ctl;
	struct dump dump = {.c = c, .records = argc > 1};

	if (argc > 1 && strcmp(argv[1], "--records") != 0) {
		control_reply_usage(c, "dump-cache [--records]");
		return;
	}
	control_reply_ok(c);
	/* A failure after "ok" has gone out can only cut the reply short. */
	if (cache_walk(ctl->d->cache, cache_clock_seconds(), dump_entry, &dump) < 0) {
		log_error("dump-cache: out of memory");
		c->failed = true;
	}
}

/* ---- reload ------------------------------------------------------------- */

static void cmd_reload(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	struct control *ctl = t->ctl;
	char err[CONFIG_ERR_MAX];

	(void)argc;
	(void)argv;
	/* On the main thread: this one may not bind addresses or change the node. */
	if (daemon_ask_reload(ctl->d, err, sizeof err) < 0) {
		control_reply_error(c, "%s", err);
		return;
	}
	control_reply_ok(c);
	control_conn_printf(c, "reloaded %s\n", ctl->d->config_path);
}

/* ---- node --------------------------------------------------------------- */

static void cmd_node(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	control_node(t, c);
}

/* ---- dispatch ----------------------------------------------------------- */

struct command {
	const char *name;
	int min_args, max_args;
	const char *usage;
	bool json;                  /* takes --json */
	void (*run)(struct control_thread *t, struct conn *c, int argc, char **argv);
};

static const struct command commands[] = {
	{"stats", 0, 0, "stats", true, cmd_stats},
	{"lookup", 1, 2, "lookup NAME [TYPE]", true, cmd_lookup},
	{"flush", 0, 1, "flush [NAME]", false, cmd_flush},
	{"dump-cache", 0, 1, "dump-cache [--records]", true, cmd_dump_cache},
	{"reload", 0, 0, "reload", false, cmd_reload},
	{"top", 1, 5, "top clients|names|nxdomain|servfail [--since DURATION] [-n COUNT]", true,
	 cmd_top},
	{"node", 0, 0, "node", false, cmd_node},
};

/* "COMMAND --json ARGS...": the reply in JSON; the word is taken out of argv. */
static bool take_json_flag(int *argc, char **argv)
{
	if (*argc < 2 || strcmp(argv[1], "--json") != 0)
		return false;
	memmove(argv + 1, argv + 2, (size_t)(*argc - 2) * sizeof *argv);
	(*argc)--;
	return true;
}

void control_run(struct control_thread *t, struct conn *c, int argc, char **argv)
{
	c->json = take_json_flag(&argc, argv);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		const struct command *cmd = &commands[i];
		if (strcmp(argv[0], cmd->name) != 0)
			continue;
		if (c->json && !cmd->json)
			control_reply_usage(c, "%s has no --json output (stats, lookup, dump-cache "
					    "and top have)", cmd->name);
		else if (argc - 1 < cmd->min_args || argc - 1 > cmd->max_args)
			control_reply_usage(c, "%s", cmd->usage);
		else
			cmd->run(t, c, argc, argv);
		return;
	}
	control_reply_usage(c, "unknown command \"%s\" (stats, lookup, flush, dump-cache, reload, "
			    "top, node)", argv[0]);
}
