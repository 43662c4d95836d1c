/*
 * libFuzzer target for the kubeconfig parser (src/kube/conn.c): the input
 * is a kubeconfig, parsed as `kubernetes.kubeconfig` is at start-up and by
 * --check-config (kube_conn_from_kubeconfig, from /k/config: relative paths
 * resolve against /k).
 *
 * Checks: a kubeconfig is refused with "kubeconfig /k/config: " and a
 * reason, or gives a connection with a server URL of http:// or https://;
 * a bearer token never goes with plain http:// or with
 * insecure-skip-tls-verify; a client certificate comes with its key (file
 * or data, never both of one); file paths are absolute or under /k; every
 * allocation is freed (LeakSanitizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kube/internal.h"

static bool under_k(const char *path)
{
	return !path || path[0] == '/';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char prefix[] = "kubeconfig /k/config: ";
	struct kube_conn c;
	char err[512] = "";
	char *text = malloc(size + 1);

	CHECK(text);
	memcpy(text, data, size);
	text[size] = '\0';
	if (kube_conn_from_kubeconfig("/k/config", text, size, &c, err, sizeof err) < 0) {
		CHECK(strncmp(err, prefix, sizeof prefix - 1) == 0 && err[sizeof prefix - 1]);
		free(text);
		return 0;
	}
	free(text);
	CHECK(c.server && (strncmp(c.server, "https://", 8) == 0 ||
			   strncmp(c.server, "http://", 7) == 0));
	bool token = c.token || c.token_file;
	CHECK(!token || (strncmp(c.server, "https://", 8) == 0 && !c.insecure));
	bool cert = c.cert_file || c.cert_data.data, key = c.key_file || c.key_data.data;
	CHECK(cert == key);
	CHECK(!(c.cert_file && c.cert_data.data) && !(c.key_file && c.key_data.data));
	CHECK(under_k(c.ca_file) && under_k(c.cert_file) && under_k(c.key_file) &&
	      under_k(c.token_file));
	kube_conn_free(&c);
	return 0;
}
