/*
 * kube/json.c — reading the values the decoder kept (struct kube_json,
 * kube.h): members by key, elements in order, typed reads that answer
 * "nothing" (NULL, 0, false) for a value of another type, so a consumer
 * never trusts a field's type because the API says so.
 *
 * Must never: allocate, or change what it reads (the values are borrowed).
 */
#include "kube/kube.h"

#include <stdlib.h>
#include <string.h>

const struct kube_json *kube_json_get(const struct kube_json *obj, const char *key)
{
	const struct kube_json *found = NULL;

	if (!obj || obj->type != KUBE_JSON_OBJECT)
		return NULL;
	for (const struct kube_json *m = obj->first; m; m = m->next)
		if (m->key[0] == key[0] && strcmp(m->key, key) == 0)
			found = m;
	return found && found->type != KUBE_JSON_NULL ? found : NULL;
}

const char *kube_json_text(const struct kube_json *v)
{
	return v && v->type == KUBE_JSON_STRING ? v->text : NULL;
}

const char *kube_json_get_text(const struct kube_json *obj, const char *key)
{
	return kube_json_text(kube_json_get(obj, key));
}

size_t kube_json_len(const struct kube_json *arr)
{
	return arr && arr->type == KUBE_JSON_ARRAY ? arr->count : 0;
}

const struct kube_json *kube_json_first(const struct kube_json *arr)
{
	return arr && arr->type == KUBE_JSON_ARRAY ? arr->first : NULL;
}

int64_t kube_json_int(const struct kube_json *v)
{
	if (!v || v->type != KUBE_JSON_NUMBER)
		return 0;
	if (strpbrk(v->text, ".eE")) {
		double x = strtod(v->text, NULL);
		return x >= 9.2e18 ? INT64_MAX : x <= -9.2e18 ? INT64_MIN : (int64_t)x;
	}
	return strtoll(v->text, NULL, 10); /* clamped when out of range */
}

bool kube_json_true(const struct kube_json *v)
{
	return v && v->type == KUBE_JSON_BOOL && v->boolean;
}
