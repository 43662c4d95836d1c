/*
 * Unit tests for upstream/context.c: the unbound.conf text our config
 * makes, read back through libunbound itself (ub_ctx_config, then
 * ub_ctx_get_option), so a choice is checked as libunbound will apply it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unbound.h>
#include <unistd.h>

#include "config_text.h"
#include "upstream/context.h"

/* libunbound's value of option for the config yaml: "yes", "no", a number... */
static char *option_for(const char *yaml, const char *option)
{
	char err[512] = "", path[] = "/tmp/localdns-test-unbound-XXXXXX";
	struct config *cfg = config_of(yaml);
	char *text = upstream_conf_text(cfg, err, sizeof err);
	char *value = NULL;

	if (!text)
		fail_msg("no unbound.conf text: %s", err);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);

	struct ub_ctx *ctx = ub_ctx_create();
	assert_non_null(ctx);
	int rc = ub_ctx_config(ctx, path);
	if (rc != 0)
		fail_msg("libunbound refuses our text (%s):\n%s", ub_strerror(rc), text);
	assert_int_equal(ub_ctx_get_option(ctx, option, &value), 0);
	ub_ctx_delete(ctx);
	unlink(path);
	free(text);
	config_free(cfg);
	return value;
}

/*
 * harden-below-nxdomain makes every miss look up each of its parent names
 * in the message cache for an NXDOMAIN, and uses one only when the
 * validator proved it (RFC 8020): without DNSSEC that is work that can
 * never answer, about 1,500 instructions of a miss (docs/performance.md).
 */
static void test_harden_below_nxdomain_only_with_dnssec(void **state)
{
	(void)state;
	char *v = option_for("upstream:\n  servers: [127.0.0.1]\n", "harden-below-nxdomain");
	assert_string_equal(v, "no");
	free(v);

	char anchor[] = "/tmp/localdns-test-anchor-XXXXXX";
	int fd = mkstemp(anchor);
	assert_true(fd >= 0);
	close(fd);
	char yaml[256];
	snprintf(yaml, sizeof yaml,
		 "upstream:\n  servers: [127.0.0.1]\n  dnssec: true\n  trust_anchor: %s\n", anchor);
	v = option_for(yaml, "harden-below-nxdomain");
	assert_string_equal(v, "yes");
	free(v);
	unlink(anchor);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_harden_below_nxdomain_only_with_dnssec),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
