/*
 * resolvconf/resolvconf.c — see resolvconf.h.
 */
#include "resolvconf/resolvconf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dns/dns.h"
#include "log/log.h"

#define PROBE_TIMEOUT_MS 500

static bool is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* An address we serve, on our port: forwarding there would loop. */
static bool is_own_address(const struct config *cfg, const struct sockaddr_storage *ss)
{
	for (size_t i = 0; i < config_served_count(cfg); i++) {
		struct sockaddr_storage mine;
		socklen_t len = config_ip_sockaddr(config_served_address(cfg, i),
						   cfg->listen.port, &mine);
		if (mine.ss_family == ss->ss_family && memcmp(&mine, ss, len) == 0)
			return true;
	}
	return false;
}

/*
 * Does a DNS server answer at ss? One ". NS" query over UDP, bounded by
 * PROBE_TIMEOUT_MS. Only used for loopback stubs (systemd-resolved's
 * 127.0.0.53 exists on the host but not in every network namespace).
 */
static bool answers_dns(const struct sockaddr_storage *ss, socklen_t len)
{
	static const uint8_t probe[] = {0x4c, 0x44, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					0, 0, 2, 0, 1};
	uint8_t reply[512];
	struct pollfd p;
	bool ok = false;
	int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	if (connect(fd, (const struct sockaddr *)ss, len) == 0 &&
	    send(fd, probe, sizeof probe, 0) == (ssize_t)sizeof probe) {
		p = (struct pollfd){.fd = fd, .events = POLLIN};
		if (poll(&p, 1, PROBE_TIMEOUT_MS) == 1) {
			ssize_t n = recv(fd, reply, sizeof reply, 0);
			ok = n >= 12 && reply[0] == probe[0] && reply[1] == probe[1];
		}
	}
	close(fd);
	return ok;
}

static int parse_nameserver(const char *text, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(53);
		*len = sizeof *v4;
		return 0;
	}
	if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(53);
		*len = sizeof *v6;
		return 0;
	}
	return -1;
}

/* Decide about one nameserver line; true when it should be used. */
static bool usable_nameserver(const char *path, const char *text, const struct config *cfg)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (parse_nameserver(text, &ss, &len) < 0) {
		log_warn("skipping a nameserver we cannot use (not a plain IP address)",
			 "file", path, "nameserver", text);
		return false;
	}
	if (is_own_address(cfg, &ss)) {
		log_warn("skipping a nameserver that is localdns itself (it would loop)",
			 "file", path, "nameserver", text);
		return false;
	}
	if (is_loopback(&ss) && !answers_dns(&ss, len)) {
		log_warn("skipping a loopback nameserver that does not answer",
			 "file", path, "nameserver", text);
		return false;
	}
	return true;
}

int resolvconf_nameservers(const char *path, const struct config *cfg,
			   char out[][RESOLVCONF_ADDR_TEXT], size_t max, char *err, size_t errlen)
{
	char line[512], server[256];
	size_t n = 0;
	FILE *f = fopen(path, "re");

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, " nameserver %255s", server) != 1)
			continue;
		if (n == max) {
			log_warn("too many nameservers; using the first ones", "file", path,
				 "skipped", server);
			continue;
		}
		if (usable_nameserver(path, server, cfg)) {
			snprintf(out[n++], RESOLVCONF_ADDR_TEXT, "%.*s@53", INET6_ADDRSTRLEN, server);
			log_info("forwarding to a nameserver from resolv.conf", "file", path,
				 "nameserver", server);
		}
	}
	fclose(f);
	return (int)n;
}

/* A search list line's names into out (the line's earlier list is replaced). */
static size_t parse_search_list(char *list, const char *path, uint8_t *out, size_t cap)
{
	size_t len = 0;

	for (char *save = NULL, *tok = strtok_r(list, " \t\r\n", &save); tok;
	     tok = strtok_r(NULL, " \t\r\n", &save)) {
		uint8_t name[DNS_MAX_NAME];
		int n = dns_name_from_text(tok, name);
		if (n <= 1 || len + (size_t)n > cap) {
			log_warn(n <= 1 ? "skipping a search domain that is not a DNS name"
					: "skipping a search domain: the list is too long",
				 "file", path, "domain", tok);
			continue;
		}
		memcpy(out + len, name, (size_t)n);
		len += (size_t)n;
	}
	return len;
}

int resolvconf_search_domains(const char *path, uint8_t *out, size_t cap)
{
	char *line = NULL;
	size_t line_cap = 0, len = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (getline(&line, &line_cap, f) >= 0) {
		char *p = line + strspn(line, " \t");
		size_t word = strcspn(p, " \t\r\n");
		if (word == 6 && (strncmp(p, "search", 6) == 0 || strncmp(p, "domain", 6) == 0))
			len = parse_search_list(p + word, path, out, cap); /* the last one wins */
	}
	free(line);
	fclose(f);
	return (int)len;
}
