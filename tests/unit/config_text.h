/*
 * config_text.h — a config from YAML text, as the tests that need one
 * write it: the load must succeed, and when it does not the test fails
 * with the loader's own message (file:line:col and what is wrong). Free
 * it with config_free. Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_CONFIG_TEXT_H
#define LOCALDNS_TEST_CONFIG_TEXT_H

#include <string.h>

#include "config/config.h"

static inline struct config *config_of(const char *yaml)
{
	char err[CONFIG_ERR_MAX] = "";
	struct config *cfg = NULL;

	if (config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof err) != 0 || !cfg)
		fail_msg("the config does not load: %s", err);
	return cfg;
}

#endif
