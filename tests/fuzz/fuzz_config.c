/*
 * libFuzzer target for the YAML config loader (src/config/): the input is
 * a config.yaml. It is loaded as the daemon loads its file, from a
 * directory that also holds two static.files (records.yaml and
 * extra-records.yaml, as in deploy/examples and the integration tests), so
 * relative static.files entries load and their errors are reported too.
 *
 * A bad config must fail with "FILE:LINE:COL: message" (line and column
 * from 1) and leave the output untouched; a good one must turn into a zone
 * table or fail the same way, differ from itself in no key, and free
 * without a leak (LeakSanitizer checks every input).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "fuzz.h"
#include "static/static.h"
#include "zone/zone.h"

static char dir[] = "/tmp/localdns-fuzz-config-XXXXXX";
static char config_path[64];

static const char records_yaml[] =
	"- name: legacy.corp.internal\n"
	"  cname: db.prod.svc.cluster.local\n"
	"- name: 5.0.0.10.in-addr.arpa\n"
	"  ptr: [db.prod.svc.cluster.local]\n";

static const char extra_records_yaml[] =
	"- {name: fromfile.prod.svc.cluster.local, a: [10.0.0.9]}\n"
	"- name: _http._tcp.fromfile.prod.svc.cluster.local\n"
	"  srv: [{priority: 10, weight: 60, port: 8080, target: fromfile.prod.svc.cluster.local}]\n"
	"  txt: [\"v=1\"]\n";

static void in_dir(char path[128], const char *name)
{
	snprintf(path, 128, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *text)
{
	char path[128];

	in_dir(path, name);
	FILE *f = fopen(path, "w");
	CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static void remove_dir(void)
{
	char path[128];

	in_dir(path, "records.yaml");
	unlink(path);
	in_dir(path, "extra-records.yaml");
	unlink(path);
	rmdir(dir);
}

/* "FILE:LINE:COL: message" with LINE and COL from 1 and a message. */
static bool positioned(const char *err)
{
	for (const char *p = strchr(err, ':'); p; p = strchr(p + 1, ':')) {
		unsigned line = 0, col = 0;
		int end = 0;
		if (p > err && sscanf(p, ":%u:%u: %n", &line, &col, &end) == 2 && end > 0)
			return line >= 1 && col >= 1 && p[end] != '\0';
	}
	return false;
}

static void never_differs(const char *key, unsigned reload, void *arg)
{
	(void)key;
	(void)reload;
	(void)arg;
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	CHECK(mkdtemp(dir));
	atexit(remove_dir);
	write_file("records.yaml", records_yaml);
	write_file("extra-records.yaml", extra_records_yaml);
	snprintf(config_path, sizeof config_path, "%s/config.yaml", dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *cfg = NULL;
	char err[CONFIG_ERR_MAX] = "";

	if (config_load_string(config_path, (const char *)data, size, &cfg, err, sizeof err) < 0) {
		CHECK(cfg == NULL);
		CHECK(positioned(err));
		return 0;
	}
	CHECK(cfg);
	config_diff(cfg, cfg, never_differs, NULL);
	for (size_t i = 0; i < config_served_count(cfg); i++)
		CHECK(config_served_address(cfg, i)->family != 0);
	struct zone_table *t = static_zone_build(cfg, 1, err, sizeof err);
	if (t)
		zone_table_free(t);
	else
		CHECK(positioned(err));
	config_free(cfg);
	return 0;
}
