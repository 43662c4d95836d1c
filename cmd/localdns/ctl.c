/*
 * localdns ctl — the operator's side of the control socket (src/control/).
 *
 *   localdns ctl [--socket PATH | --config FILE] [--json] COMMAND [ARGS]
 *
 * Checks the command and its arguments here, so a typo gets a usage error
 * whether or not the daemon runs, then sends one request and prints the
 * reply's body on stdout as it streams in; errors go to stderr. --json
 * goes to the daemon as the word after the command, and the daemon writes
 * JSON (docs/ctl.md): nothing is re-parsed here.
 *
 * Exit status: 0 ok, 1 the command failed (the daemon says why), 2 usage,
 * 3 the daemon could not be reached (not running, wrong socket, no reply,
 * or a reply cut short).
 */
#include "ctl.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "control/control.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static const char ctl_usage[] =
	"usage: localdns ctl [--socket PATH | --config FILE] [--json] COMMAND [ARGS]\n"
	"\n"
	"Talk to a running localdns over its control socket (control.socket).\n"
	"\n"
	"  stats                    counters, one \"name value\" per line: queries, answers\n"
	"                           by source, cache, upstream, Kubernetes, node, reloads\n"
	"  lookup NAME [TYPE]       answer NAME (type A by default) and say which source\n"
	"                           gave it: static, cluster, cache, stale or upstream\n"
	"  flush [NAME]             drop every cache entry, or every type of NAME\n"
	"  dump-cache [--records]   one line per cache entry (and its records)\n"
	"  reload                   read the config file again and apply it\n"
	"  top clients|names|nxdomain|servfail [--since DURATION] [-n COUNT]\n"
	"                           the heaviest clients (and their pods) or names over the\n"
	"                           last minute (--since: up to 10m), estimated from one\n"
	"                           query in 16\n"
	"  node                     what localdns installed on this node (link, addresses,\n"
	"                           nftables table, heartbeat, fallback endpoints) and\n"
	"                           where each address's DNS would go if localdns died now\n"
	"\n"
	"  -s, --socket PATH        the control socket (default " CONTROL_DEFAULT_SOCKET ")\n"
	"  -c, --config FILE        the control socket named by FILE's control.socket\n"
	"  -j, --json               stats, lookup, top: one JSON document; dump-cache:\n"
	"                           one JSON object per line (per entry)\n"
	"  -h, --help               print this help and exit\n"
	"\n"
	"Exit status: 0 ok, 1 the command failed, 2 usage error, 3 localdns not reachable.\n";

struct command {
	const char *name;
	int min_args, max_args;
	bool json; /* takes --json */
};

static const struct command commands[] = {
	{"stats", 0, 0, true},      {"lookup", 1, 2, true}, {"flush", 0, 1, false},
	{"dump-cache", 0, 1, true}, {"reload", 0, 0, false}, {"top", 1, 5, true},
	{"node", 0, 0, false},
};

static int usage_error(const char *why, const char *what)
{
	fprintf(stderr, "localdns ctl: %s%s\n\n%s", why, what ? what : "", ctl_usage);
	return EXIT_USAGE;
}


/* Whether argv[0..argc) is a command we know with fitting arguments (and
 * JSON output if asked); else why not. */
static bool command_ok(int argc, char **argv, bool json, char *why, size_t whylen)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		if (strcmp(argv[0], commands[i].name) != 0)
			continue;
		if (json && !commands[i].json) {
			snprintf(why, whylen, "%s has no --json output (stats, lookup, dump-cache and top "
				 "have)", argv[0]);
			return false;
		}
		if (argc - 1 < commands[i].min_args || argc - 1 > commands[i].max_args) {
			snprintf(why, whylen, "wrong number of arguments for %s", argv[0]);
			return false;
		}
		if (strcmp(argv[0], "dump-cache") == 0 && argc > 1 && strcmp(argv[1], "--records") != 0) {
			snprintf(why, whylen, "dump-cache takes only --records, not %s", argv[1]);
			return false;
		}
		return true;
	}
	snprintf(why, whylen, "unknown command %s", argv[0]);
	return false;
}

/* The request line: the words joined by single spaces, "--json" after the command if asked. */
static int build_request(int argc, char **argv, bool json, char *line, size_t cap)
{
	size_t len = 0;

	for (int i = 0; i < argc; i++) {
		if (argv[i][0] == '\0' || strpbrk(argv[i], " \t\r\n"))
			return usage_error("an argument may not be empty or hold spaces: ", argv[i]);
		int n = snprintf(line + len, cap - len, "%s%s%s", i ? " " : "", argv[i],
				 i == 0 && json ? " --json" : "");
		if (n < 0 || (size_t)n >= cap - len)
			return usage_error("the request is too long", NULL);
		len += (size_t)n;
	}
	return EXIT_OK;
}

/* control.socket from a config file; "" (off) is a usage error. */
static int socket_from_config(const char *file, char *path, size_t pathlen)
{
	struct config *cfg;
	char err[CONFIG_ERR_MAX];

	if (config_load(file, &cfg, err, sizeof err) < 0) {
		fprintf(stderr, "localdns ctl: %s\n", err);
		return EXIT_USAGE;
	}
	snprintf(path, pathlen, "%s", cfg->control.socket);
	config_free(cfg);
	if (path[0] == '\0') {
		fprintf(stderr, "localdns ctl: %s: control.socket is \"\" (off): no control socket\n",
			file);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

int ctl_main(int argc, char **argv)
{
	static const struct option options[] = {
		{"socket", required_argument, NULL, 's'},
		{"config", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *socket_path = NULL, *config_file = NULL;
	char path[4096], request[CONTROL_REQUEST_MAX], msg[CONFIG_ERR_MAX + 512];
	bool json = false;
	int opt, rc;

	/* "+": options end at the command, so `dump-cache --records` reaches it. */
	while ((opt = getopt_long(argc, argv, "+s:c:jh", options, NULL)) != -1) {
		switch (opt) {
		case 's':
			socket_path = optarg;
			break;
		case 'c':
			config_file = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(ctl_usage, stdout);
			return EXIT_OK;
		default:
			fputs(ctl_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (socket_path && config_file)
		return usage_error("--socket and --config are alternatives", NULL);
	if (optind >= argc)
		return usage_error("no command", NULL);
	if (!command_ok(argc - optind, argv + optind, json, msg, sizeof msg))
		return usage_error(msg, NULL);
	if ((rc = build_request(argc - optind, argv + optind, json, request, sizeof request)) !=
	    EXIT_OK)
		return rc;
	if (config_file && (rc = socket_from_config(config_file, path, sizeof path)) != EXIT_OK)
		return rc;
	if (!config_file)
		snprintf(path, sizeof path, "%s", socket_path ? socket_path : CONTROL_DEFAULT_SOCKET);

	switch (control_call(path, request, stdout, msg, sizeof msg)) {
	case CONTROL_OK:
		return EXIT_OK;
	case CONTROL_FAILED:
		fprintf(stderr, "localdns ctl: %s\n", msg);
		return EXIT_FAILED;
	case CONTROL_USAGE:
		return usage_error(msg, NULL);
	case CONTROL_UNREACHABLE:
		break;
	}
	fprintf(stderr, "localdns ctl: %s\n", msg);
	return EXIT_UNREACHABLE;
}
