/*
 * control — `--json` replies: each document is built with json-c and
 * written as one line (`stats`, `lookup` and `top` write one; `dump-cache`
 * one per entry, so memory stays that of one entry however large the cache).
 *
 * json-c answers NULL when it runs out of memory, and asserts on a NULL
 * container. The builders here take the document's `failed` flag instead:
 * a NULL object or value is never added to, marks the document, and a
 * marked document is not written (the caller answers an error, or cuts the
 * reply short).
 */
#include "control/internal.h"

#include <stdlib.h>

json_object *control_jdoc_object(struct jdoc *d)
{
	json_object *o = json_object_new_object();

	if (!o)
		d->failed = true;
	return o;
}

json_object *control_jdoc_array(struct jdoc *d)
{
	json_object *a = json_object_new_array();

	if (!a)
		d->failed = true;
	return a;
}

void control_jdoc_put(struct jdoc *d, json_object *o, const char *key, json_object *value)
{
	if (!o || !value || json_object_object_add(o, key, value) < 0) {
		json_object_put(value);
		d->failed = true;
	}
}

void control_jdoc_push(struct jdoc *d, json_object *array, json_object *value)
{
	if (!array || !value || json_object_array_add(array, value) < 0) {
		json_object_put(value);
		d->failed = true;
	}
}

json_object *control_jdoc_ldns_string(char *text)
{
	json_object *s = text ? json_object_new_string(text) : NULL;

	free(text);
	return s;
}

/* The record's data fields in zone-file form, separated by spaces. */
static json_object *rr_data(const ldns_rr *rr)
{
	ldns_buffer *buf = ldns_buffer_new(128);

	if (!buf)
		return NULL;
	for (size_t i = 0; i < ldns_rr_rd_count(rr); i++) {
		if (i > 0)
			ldns_buffer_printf(buf, " ");
		ldns_rdf2buffer_str(buf, ldns_rr_rdf(rr, i));
	}
	char *text = ldns_buffer_status_ok(buf) ? ldns_buffer_export2str(buf) : NULL;
	ldns_buffer_free(buf);
	return control_jdoc_ldns_string(text);
}

static json_object *rr_object(struct jdoc *d, const ldns_rr *rr, bool question)
{
	json_object *o = control_jdoc_object(d);

	control_jdoc_put(d, o, "name", control_jdoc_ldns_string(ldns_rdf2str(ldns_rr_owner(rr))));
	if (!question)
		control_jdoc_put(d, o, "ttl", json_object_new_int64(ldns_rr_ttl(rr)));
	control_jdoc_put(d, o, "class",
			 control_jdoc_ldns_string(ldns_rr_class2str(ldns_rr_get_class(rr))));
	control_jdoc_put(d, o, "type",
			 control_jdoc_ldns_string(ldns_rr_type2str(ldns_rr_get_type(rr))));
	if (!question)
		control_jdoc_put(d, o, "data", rr_data(rr));
	return o;
}

json_object *control_jdoc_records(struct jdoc *d, const ldns_rr_list *list, bool question)
{
	json_object *a = control_jdoc_array(d);

	for (size_t i = 0; i < ldns_rr_list_rr_count(list); i++)
		control_jdoc_push(d, a, rr_object(d, ldns_rr_list_rr(list, i), question));
	return a;
}

void control_jdoc_sections(struct jdoc *d, json_object *o, const ldns_pkt *pkt)
{
	control_jdoc_put(d, o, "answer", control_jdoc_records(d, ldns_pkt_answer(pkt), false));
	control_jdoc_put(d, o, "authority",
			 control_jdoc_records(d, ldns_pkt_authority(pkt), false));
	control_jdoc_put(d, o, "additional",
			 control_jdoc_records(d, ldns_pkt_additional(pkt), false));
}

static void jdoc_free(struct jdoc *d)
{
	json_object_put(d->root);
	*d = (struct jdoc){0};
}

bool control_jdoc_write(struct conn *c, struct jdoc *d)
{
	size_t len = 0;
	const char *text = NULL;

	if (!d->failed && d->root)
		text = json_object_to_json_string_length(
			d->root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (text) {
		control_conn_write(c, text, len);
		control_conn_write(c, "\n", 1);
	}
	jdoc_free(d);
	return text != NULL;
}

void control_reply_json(struct conn *c, struct jdoc *d)
{
	if (d->failed || !d->root) {
		jdoc_free(d);
		control_reply_error(c, "out of memory");
		return;
	}
	control_reply_ok(c);
	control_jdoc_write(c, d);
}
