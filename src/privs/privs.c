/* privs — see privs.h. */
#include "privs/privs.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include "log/log.h"
#include "privs/internal.h"

static const struct {
	cap_value_t cap;
	const char *name;
} kept[] = {
	{CAP_NET_ADMIN, "net_admin"},               /* the link, addresses, nftables */
	{CAP_NET_BIND_SERVICE, "net_bind_service"}, /* port 53 on a new address */
};

#define N_KEPT (sizeof kept / sizeof kept[0])

static bool is_kept(cap_value_t cap)
{
	for (size_t i = 0; i < N_KEPT; i++)
		if (kept[i].cap == cap)
			return true;
	return false;
}

/* Threads of this process; 0 when /proc cannot tell. */
static int thread_count(void)
{
	DIR *dir = opendir("/proc/self/task");
	int n = 0;

	if (!dir)
		return 0;
	for (struct dirent *e; (e = readdir(dir)) != NULL;)
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

static bool is_permitted(cap_t caps, cap_value_t cap)
{
	cap_flag_value_t v = CAP_CLEAR;

	return cap_get_flag(caps, cap, CAP_PERMITTED, &v) == 0 && v == CAP_SET;
}

static void log_start_caps(cap_t caps)
{
	char *text;

	if (!log_enabled(LOG_DEBUG) || !(text = cap_to_text(caps, NULL)))
		return;
	log_debug("capabilities before the drop", "caps", text);
	cap_free(text);
}

static void append_name(char *list, size_t len, const char *name)
{
	size_t n = strlen(list);

	snprintf(list + n, len - n, "%s%s", n ? "," : "", name);
}

/*
 * Only the kept capabilities the process has, effective and permitted;
 * their names in have_names, the others' in missing_names.
 */
static cap_t kept_set(cap_t now, char *have_names, char *missing_names, size_t len)
{
	cap_t want = cap_init();

	have_names[0] = missing_names[0] = '\0';
	for (size_t i = 0; want && i < N_KEPT; i++) {
		if (!is_permitted(now, kept[i].cap)) {
			append_name(missing_names, len, kept[i].name);
			continue;
		}
		append_name(have_names, len, kept[i].name);
		if (cap_set_flag(want, CAP_EFFECTIVE, 1, &kept[i].cap, CAP_SET) < 0 ||
		    cap_set_flag(want, CAP_PERMITTED, 1, &kept[i].cap, CAP_SET) < 0) {
			cap_free(want);
			return NULL;
		}
	}
	return want;
}

/*
 * Drop all but the kept capabilities from the bounding set. *reduced is
 * false when the process may not (no CAP_SETPCAP): that is not an error.
 */
static int shrink_bounding_set(bool *reduced, char *err, size_t errlen)
{
	*reduced = true;
	for (cap_value_t cap = 0; cap < cap_max_bits(); cap++) {
		if (is_kept(cap) || cap_get_bound(cap) != 1 || cap_drop_bound(cap) == 0)
			continue;
		if (errno == EPERM) {
			*reduced = false;
			return 0;
		}
		snprintf(err, errlen, "cannot drop capability %d from the bounding set: %s", cap,
			 strerror(errno));
		return -1;
	}
	return 0;
}

static bool needs_net_admin(const struct config *cfg)
{
	return cfg->interface.manage || cfg->nftables.enabled;
}

/* Everything after the checks: bounding, ambient, the process's sets, no_new_privs. */
static int drop(cap_t want, bool *bounding_reduced, char *err, size_t errlen)
{
	if (shrink_bounding_set(bounding_reduced, err, errlen) < 0)
		return -1;
	/* EINVAL: a kernel older than 4.3 has no ambient set to clear. */
	if (cap_reset_ambient() < 0 && errno != EINVAL) {
		snprintf(err, errlen, "cannot clear the ambient capabilities: %s", strerror(errno));
		return -1;
	}
	if (cap_set_proc(want) < 0) {
		snprintf(err, errlen, "cannot drop capabilities: %s", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int privs_drop(const struct config *cfg, char *err, size_t errlen)
{
	char have[64], missing[64];
	bool bounding_reduced;
	int rc = -1;

	if (thread_count() > 1) {
		snprintf(err, errlen, "internal error: capabilities must be dropped before the "
			 "first thread starts (they are per thread)");
		return -1;
	}
	cap_t now = cap_get_proc();
	cap_t want = now ? kept_set(now, have, missing, sizeof have) : NULL;
	if (!want) {
		snprintf(err, errlen, "cannot read capabilities: %s", strerror(errno));
		goto out;
	}
	log_start_caps(now);
	if (needs_net_admin(cfg) && !is_permitted(now, CAP_NET_ADMIN)) {
		snprintf(err, errlen, "%s is true and needs CAP_NET_ADMIN, which this process "
			 "does not have (grant it, or set interface.manage and nftables.enabled "
			 "to false)",
			 cfg->interface.manage ? "interface.manage" : "nftables.enabled");
		goto out;
	}
	if (drop(want, &bounding_reduced, err, errlen) < 0)
		goto out;
	/* Before the first thread: every thread inherits it, beneath its own list. */
	if (cfg->security.seccomp && privs_deny_never_used(err, errlen) < 0)
		goto out;
	privs_use_seccomp(cfg->security.seccomp);
	privs_read_for(cfg);
	log_info("privileges dropped", "kept", have[0] ? have : "none", "missing",
		 missing[0] ? missing : "none", "bounding_set",
		 bounding_reduced ? "reduced" : "unchanged (no CAP_SETPCAP)", "no_new_privs",
		 "true", "seccomp",
		 cfg->security.seccomp ? "per thread, over a process-wide deny-list"
				       : "off (security.seccomp)",
		 "files", !cfg->security.seccomp ? "off (security.seccomp)"
			  : privs_files_limited() ? "per thread (landlock)"
						  : "not limited (no landlock in this kernel)");
	rc = 0;
out:
	cap_free(want);
	cap_free(now);
	return rc;
}
