/*
 * kube_dump — runs the Kubernetes API client alone and prints one line per
 * handler call, for the integration tests (tests/integration/test_kube_client.py):
 *
 *   upsert services default/web rv=1234
 *   remove endpointslices default/web-abcde
 *   upsert namespaces kube-system rv=17      (cluster-scoped: no namespace)
 *   commit
 *   synced
 *
 * SIGUSR1 prints the client's counters as one line:
 *   status synced=1 errors=0 services=events:3,relists:0,objects:2,too_large:0 ...
 * Pods are watched as the daemon watches them: with cluster.autopath or
 * cluster.pods: verified in the config.
 * SIGTERM or SIGINT stops the client (kube_stop) and exits 0. Every line is
 * flushed at once, so a test reading the pipe sees it immediately.
 *
 *   kube_dump --config FILE
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "config/config.h"
#include "kube/kube.h"
#include "log/log.h"

static void print_key(const char *ns, const char *name)
{
	if (ns[0])
		printf("%s/%s", ns, name);
	else
		printf("%s", name);
}

static void on_upsert(void *ctx, enum kube_resource r, const struct kube_json *obj)
{
	const struct kube_json *meta = kube_json_get(obj, "metadata");
	const char *ns = kube_json_get_text(meta, "namespace") ?: "";
	const char *name = kube_json_get_text(meta, "name") ?: "?";
	const char *rv = kube_json_get_text(meta, "resourceVersion") ?: "?";

	(void)ctx;
	flockfile(stdout); /* one whole line: the main thread prints status lines */
	printf("upsert %s ", kube_resource_name(r));
	print_key(ns, name);
	printf(" rv=%s\n", rv);
	fflush(stdout);
	funlockfile(stdout);
}

static void on_remove(void *ctx, enum kube_resource r, const char *ns, const char *name)
{
	(void)ctx;
	flockfile(stdout);
	printf("remove %s ", kube_resource_name(r));
	print_key(ns, name);
	printf("\n");
	fflush(stdout);
	funlockfile(stdout);
}

static void on_commit(void *ctx)
{
	(void)ctx;
	printf("commit\n");
	fflush(stdout);
}

static void on_synced(void *ctx)
{
	(void)ctx;
	printf("synced\n");
	fflush(stdout);
}

static void print_status(const struct kube_client *k)
{
	struct kube_status st;

	kube_status(k, &st);
	flockfile(stdout); /* the client's thread prints handler lines meanwhile */
	printf("status synced=%d errors=%llu contact=%d", st.synced, (unsigned long long)st.errors,
	       st.last_contact_ms > 0);
	for (int r = 0; r < KUBE_N_RESOURCES; r++)
		printf(" %s=events:%llu,relists:%llu,objects:%llu,too_large:%llu",
		       kube_resource_name(r), (unsigned long long)st.events[r],
		       (unsigned long long)st.relists[r], (unsigned long long)st.objects[r],
		       (unsigned long long)st.objects_too_large[r]);
	printf("\n");
	fflush(stdout);
	funlockfile(stdout);
}

int main(int argc, char **argv)
{
	char err[CONFIG_ERR_MAX];
	struct config *cfg;
	struct kube_client *k;
	sigset_t set;
	int sig;

	if (argc != 3 || strcmp(argv[1], "--config") != 0) {
		fprintf(stderr, "usage: %s --config FILE\n", argv[0]);
		return 2;
	}
	if (config_load(argv[2], &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	log_setup((enum log_level)cfg->log.level, (enum log_format)cfg->log.format);
	/* Blocked before any thread starts, so only sigwait sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	struct kube_handler h = {.upsert = on_upsert, .remove = on_remove, .commit = on_commit,
				 .synced = on_synced};
	if (kube_start(cfg, cluster_needs_pods(cfg), NULL, &h, &k, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		config_free(cfg);
		return 1;
	}
	while (sigwait(&set, &sig) == 0 && sig == SIGUSR1)
		print_status(k);
	kube_stop(k);
	config_free(cfg);
	return 0;
}
