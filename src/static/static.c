/* static — see static.h. */
#include "static/static.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

struct record_ctx {
	struct zone_builder *b;
	const struct config_record *rec;
	uint8_t owner[DNS_MAX_NAME];
	char *err;
	size_t errlen;
};

static int fail(struct record_ctx *c, const char *why)
{
	const struct config_pos *p = &c->rec->pos;

	snprintf(c->err, c->errlen, "%s:%u:%u: record %s: %s", p->file ? p->file : "?",
		 p->line, p->col, c->rec->name, why);
	return -1;
}

static int add(struct record_ctx *c, uint16_t type, const uint8_t *rdata, size_t len)
{
	const char *why = NULL;

	if (len > UINT16_MAX)
		return fail(c, "record data too long");
	if (zone_builder_add_rr(c->b, c->owner, type, c->rec->ttl, rdata, (uint16_t)len,
				&why) < 0)
		return fail(c, why);
	return 0;
}

static int add_name(struct record_ctx *c, uint16_t type, const char *text)
{
	uint8_t name[DNS_MAX_NAME];
	int len = dns_name_from_text(text, name);

	if (len < 0)
		return fail(c, "invalid target name");
	return add(c, type, name, (size_t)len);
}

static int add_srv(struct record_ctx *c, const struct config_srv *srv)
{
	uint8_t rdata[6 + DNS_MAX_NAME];
	int len = dns_name_from_text(srv->target, rdata + 6);

	if (len < 0)
		return fail(c, "invalid SRV target");
	rdata[0] = (uint8_t)(srv->priority >> 8);
	rdata[1] = (uint8_t)srv->priority;
	rdata[2] = (uint8_t)(srv->weight >> 8);
	rdata[3] = (uint8_t)srv->weight;
	rdata[4] = (uint8_t)(srv->port >> 8);
	rdata[5] = (uint8_t)srv->port;
	return add(c, DNS_T_SRV, rdata, 6 + (size_t)len);
}

static int add_txt(struct record_ctx *c, const char *text)
{
	uint8_t rdata[256];
	size_t len = strlen(text);

	if (len > 255)
		return fail(c, "TXT string longer than 255 bytes");
	rdata[0] = (uint8_t)len;
	memcpy(rdata + 1, text, len);
	return add(c, DNS_T_TXT, rdata, len + 1);
}

static int add_record(struct record_ctx *c)
{
	const struct config_record *r = c->rec;

	if (dns_name_from_text(r->name, c->owner) < 0)
		return fail(c, "invalid name");
	for (size_t i = 0; i < r->n_a; i++)
		if (add(c, DNS_T_A, (const uint8_t *)&r->a[i].v4, 4) < 0)
			return -1;
	for (size_t i = 0; i < r->n_aaaa; i++)
		if (add(c, DNS_T_AAAA, r->aaaa[i].v6.s6_addr, 16) < 0)
			return -1;
	if (r->cname && add_name(c, DNS_T_CNAME, r->cname) < 0)
		return -1;
	for (size_t i = 0; i < r->n_srv; i++)
		if (add_srv(c, &r->srv[i]) < 0)
			return -1;
	for (size_t i = 0; i < r->n_txt; i++)
		if (add_txt(c, r->txt[i]) < 0)
			return -1;
	for (size_t i = 0; i < r->n_ptr; i++)
		if (add_name(c, DNS_T_PTR, r->ptr[i]) < 0)
			return -1;
	return 0;
}

static int add_cluster_authority(struct zone_builder *b, const struct config *cfg,
				 uint32_t serial, char *err, size_t errlen)
{
	uint8_t apex[DNS_MAX_NAME];
	const char *why = NULL;

	if (dns_name_from_text(cfg->cluster.domain, apex) < 0) {
		snprintf(err, errlen, "%s: cluster.domain: invalid name", cfg->files[0]);
		return -1;
	}
	if (zone_builder_add_authority(b, apex, cfg->cluster.ttl, serial, &why) < 0) {
		snprintf(err, errlen, "%s: cluster.domain: %s", cfg->files[0], why);
		return -1;
	}
	return 0;
}

bool static_owns_cluster_domain(const struct config *cfg)
{
	return !cfg->kubernetes.enabled && cfg->cluster.n_fallback_servers == 0;
}

struct zone_table *static_zone_build(const struct config *cfg, uint32_t serial,
				     char *err, size_t errlen)
{
	struct record_ctx c = {.err = err, .errlen = errlen};

	c.b = zone_builder_new();
	if (!c.b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (static_owns_cluster_domain(cfg) && add_cluster_authority(c.b, cfg, serial, err, errlen) < 0)
		goto fail;
	for (size_t i = 0; i < cfg->statics.n_records; i++) {
		c.rec = &cfg->statics.records[i];
		if (add_record(&c) < 0)
			goto fail;
	}
	struct zone_table *t = zone_builder_finish(c.b);
	if (!t)
		snprintf(err, errlen, "out of memory");
	return t;
fail:
	zone_builder_free(c.b);
	return NULL;
}
