/*
 * kube/conn.c — where the API server is and how to authenticate to it (see
 * internal.h): a kubeconfig file or the in-cluster service account, and the
 * bearer token file that kubelet rotates under us.
 *
 * The kubeconfig is read with libyaml's document API like our own config,
 * but it is not our format: unknown keys are ignored (kubectl adds its own),
 * and only what a cache needs is taken: current-context, that context's
 * cluster (server, CA, insecure-skip-tls-verify) and user (client
 * certificate and key, token, tokenFile). Credentials we cannot use (exec
 * plugins, auth-provider, basic auth) stop start-up with a message rather
 * than produce a client that can only get 401s, and so does a token that
 * would go to a plain http:// server or to one whose certificate is not
 * checked (insecure-skip-tls-verify).
 */
#include "kube/internal.h"
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Kubeconfigs and tokens are small; anything larger is a mistake. */
#define FILE_MAX (4u << 20)

/* ---- reading files ---------------------------------------------------------- */

/* The whole file, NUL-terminated, in *out; -1 with why set on failure.
 * Only a regular file (util/file.h): a FIFO would block the thread. */
static int read_small_file(const char *path, char **out, size_t *out_len, struct stat *st,
			   const char **why)
{
	struct stat sb;
	int fd = file_open_regular(path, &sb, why);
	if (fd < 0)
		return -1;
	if ((size_t)sb.st_size > FILE_MAX) {
		close(fd);
		*why = strerror(EFBIG);
		return -1;
	}
	char *buf = malloc((size_t)sb.st_size + 1);
	size_t len = 0;
	ssize_t n = 1;
	while (buf && len < (size_t)sb.st_size && (n = read(fd, buf + len, (size_t)sb.st_size - len)) > 0)
		len += (size_t)n;
	int e = errno;
	close(fd);
	if (!buf || n < 0) {
		free(buf);
		*why = strerror(buf ? e : ENOMEM);
		return -1;
	}
	buf[len] = '\0';
	*out = buf;
	*out_len = len;
	if (st)
		*st = sb;
	return 0;
}

/* ---- base64 ----------------------------------------------------------------- */

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int kube_base64_decode(const char *text, size_t len, struct kube_blob *out)
{
	unsigned char *buf = malloc(len / 4 * 3 + 3);
	size_t n = 0, pad = 0;
	uint32_t acc = 0;
	unsigned bits = 0;

	if (!buf)
		return -1;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
			continue;
		if (c == '=') {
			pad++;
			continue;
		}
		int v = b64_value(c);
		if (v < 0 || pad)
			goto bad; /* a stray byte, or data after padding */
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[n++] = (unsigned char)(acc >> bits);
		}
	}
	/* Leftover bits must be fewer than a byte and zero; padding completes a quantum. */
	if (bits >= 6 || (acc & ((1u << bits) - 1)) || pad > 2 || (pad && (bits / 2 != pad)))
		goto bad;
	out->data = buf;
	out->len = n;
	return 0;
bad:
	free(buf);
	return -1;
}

/* ---- the token file ------------------------------------------------------- */

/* Whitespace around a token (a trailing newline from echo) is not part of it. */
static char *trim(char *s)
{
	while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t'))
		s[--n] = '\0';
	return s;
}

static int64_t mtime_of(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Not empty, and nothing that would end or split an HTTP header line. */
static bool valid_token(const char *tok)
{
	if (!*tok)
		return false;
	for (const char *p = tok; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

int kube_token_refresh(struct kube_token *t, const char *path, bool force)
{
	struct stat st;

	/* stat follows kubelet's ..data symlink, so a swap shows as a new inode. */
	if (stat(path, &st) < 0)
		return -1;
	if (!force && t->value && st.st_dev == t->dev && st.st_ino == t->ino &&
	    st.st_size == t->size && mtime_of(&st) == t->mtime_ns)
		return 0;
	const char *why;
	char *text;
	size_t len;
	if (read_small_file(path, &text, &len, &st, &why) < 0)
		return -1;
	/* A NUL would cut the token short without anyone noticing. */
	const char *tok = memchr(text, '\0', len) ? "" : trim(text);
	if (!valid_token(tok)) {
		free(text);
		return -1;
	}
	int changed = !t->value || strcmp(t->value, tok) != 0;
	char *value = strdup(tok);
	free(text);
	if (!value)
		return -1;
	free(t->value);
	t->value = value;
	t->dev = st.st_dev;
	t->ino = st.st_ino;
	t->size = st.st_size;
	t->mtime_ns = mtime_of(&st);
	return changed;
}

void kube_token_free(struct kube_token *t)
{
	free(t->value);
	*t = (struct kube_token){0};
}

/* ---- the kubeconfig ------------------------------------------------------- */

struct kc {
	const char *path;
	char *dir;           /* the kubeconfig's directory, for relative paths */
	yaml_document_t doc;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 2, 3)))
static int kc_fail(struct kc *kc, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(kc->err, kc->errlen, "kubeconfig %s: ", kc->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < kc->errlen)
		vsnprintf(kc->err + n, kc->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static const char *scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The value under key in mapping map, or NULL. */
static yaml_node_t *get(struct kc *kc, const yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		const char *k = scalar(yaml_document_get_node(&kc->doc, p->key));
		if (k && strcmp(k, key) == 0)
			return yaml_document_get_node(&kc->doc, p->value);
	}
	return NULL;
}

/* A scalar under key that is not empty, or NULL. */
static const char *get_string(struct kc *kc, const yaml_node_t *map, const char *key)
{
	const char *v = scalar(get(kc, map, key));
	return v && *v ? v : NULL;
}

/*
 * In the list under list_key (contexts, clusters, users), the entry whose
 * name is name; returns its body (the mapping under body_key), or NULL with
 * the error set.
 */
static yaml_node_t *named_entry(struct kc *kc, const yaml_node_t *root, const char *list_key,
				const char *body_key, const char *name)
{
	const yaml_node_t *list = get(kc, root, list_key);

	if (list && list->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *i = list->data.sequence.items.start;
		     i < list->data.sequence.items.top; i++) {
			yaml_node_t *e = yaml_document_get_node(&kc->doc, *i);
			const char *n = scalar(get(kc, e, "name"));
			if (!n || strcmp(n, name) != 0)
				continue;
			yaml_node_t *body = get(kc, e, body_key);
			if (body && body->type == YAML_MAPPING_NODE)
				return body;
			kc_fail(kc, "%s \"%s\" has no %s mapping", body_key, name, body_key);
			return NULL;
		}
	}
	kc_fail(kc, "%s \"%s\" not found in %s", body_key, name, list_key);
	return NULL;
}

/* A formatted string, or NULL when out of memory (asprintf leaves its pointer undefined then). */
__attribute__((format(printf, 1, 2)))
static char *str_printf(const char *fmt, ...)
{
	va_list ap;
	char *out;

	va_start(ap, fmt);
	int n = vasprintf(&out, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : out;
}

/* A copy of path, joined to the kubeconfig's directory when relative. */
static char *resolve_path(struct kc *kc, const char *path)
{
	if (path[0] == '/' || !kc->dir)
		return strdup(path);
	return str_printf("%s/%s", kc->dir, path);
}

/* file_key (a path) and data_key (base64) of one credential; data wins. */
static int take_file_or_data(struct kc *kc, const yaml_node_t *map, const char *kind,
			     const char *name, const char *file_key, const char *data_key, char **file,
			     struct kube_blob *data)
{
	const char *b64 = get_string(kc, map, data_key);
	const char *path = get_string(kc, map, file_key);

	if (b64) {
		if (kube_base64_decode(b64, strlen(b64), data) < 0)
			return kc_fail(kc, "%s \"%s\": %s is not valid base64", kind, name,
				       data_key);
		return 0;
	}
	if (path && !(*file = resolve_path(kc, path)))
		return kc_fail(kc, "out of memory");
	return 0;
}

/* "https://user:secret@host": a password in the URL would be logged with it. */
static bool has_userinfo(const char *url)
{
	const char *host = strstr(url, "://") + 3;

	return memchr(host, '@', strcspn(host, "/?#")) != NULL;
}

static int take_cluster(struct kc *kc, const yaml_node_t *root, const char *name, struct kube_conn *c)
{
	const yaml_node_t *cl = named_entry(kc, root, "clusters", "cluster", name);
	if (!cl)
		return -1;
	const char *server = get_string(kc, cl, "server");
	if (!server)
		return kc_fail(kc, "cluster \"%s\" has no server", name);
	if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
		return kc_fail(kc, "cluster \"%s\": server \"%s\" is not an http(s) URL", name, server);
	/* "https://" alone would be trimmed to "https:/" below, a URL no check knows */
	const char *host = server + (server[4] == 's' ? 8 : 7);
	if (*host == '\0' || *host == '/')
		return kc_fail(kc, "cluster \"%s\": server \"%s\" names no host", name, server);
	if (has_userinfo(server))
		return kc_fail(kc, "cluster \"%s\": the server URL holds credentials (user@); "
			       "put them in the user entry", name);
	if (!(c->server = strdup(server)))
		return kc_fail(kc, "out of memory");
	size_t n = strlen(c->server);
	while (n && c->server[n - 1] == '/')
		c->server[--n] = '\0';
	const char *insecure = scalar(get(kc, cl, "insecure-skip-tls-verify"));
	c->insecure = insecure && strcmp(insecure, "true") == 0;
	return take_file_or_data(kc, cl, "cluster", name, "certificate-authority",
				 "certificate-authority-data", &c->ca_file, &c->ca_data);
}

/* Credentials that need more than a file or a header; we refuse them by name. */
static const char *const unsupported_auth[] = {"exec", "auth-provider", "username", "password", NULL};

static int take_user(struct kc *kc, const yaml_node_t *root, const char *name, struct kube_conn *c)
{
	const yaml_node_t *u = named_entry(kc, root, "users", "user", name);
	if (!u)
		return -1;
	for (const char *const *k = unsupported_auth; *k; k++)
		if (get(kc, u, *k))
			return kc_fail(kc, "user \"%s\" uses %s credentials, which localdns does not "
				       "support (use a token, tokenFile or a client certificate)",
				       name, *k);
	if (take_file_or_data(kc, u, "user", name, "client-certificate", "client-certificate-data",
			      &c->cert_file, &c->cert_data) < 0 ||
	    take_file_or_data(kc, u, "user", name, "client-key", "client-key-data", &c->key_file,
			      &c->key_data) < 0)
		return -1;
	if (!(c->cert_file || c->cert_data.data) != !(c->key_file || c->key_data.data))
		return kc_fail(kc, "user \"%s\" has a client certificate without a key, or a key "
			       "without a certificate", name);
	const char *token = get_string(kc, u, "token");
	const char *token_file = get_string(kc, u, "tokenFile");
	if ((token && !(c->token = strdup(token))) ||
	    (token_file && !(c->token_file = resolve_path(kc, token_file))))
		return kc_fail(kc, "out of memory");
	return 0;
}

/*
 * A bearer token is a password for the whole service account: over plain
 * http:// anyone on the path (the node's network, a proxy) could read it
 * and use it, and with insecure-skip-tls-verify anyone on the path could
 * answer in the server's place and be handed it. A client certificate is
 * different (its key never leaves us: TLS proves possession of it without
 * sending it, and curl does not offer it without TLS); an anonymous client
 * has nothing to hide.
 */
static int refuse_token_in_clear(struct kc *kc, const struct kube_conn *c, const char *cluster,
				 const char *user)
{
	if (!(c->token || c->token_file))
		return 0;
	if (strncmp(c->server, "http://", 7) == 0)
		return kc_fail(kc, "cluster \"%s\": server \"%s\" is plain http://, and user \"%s\" "
			       "has a bearer token, which would cross the network unencrypted; use "
			       "https:// (or a user without a token)", cluster, c->server, user);
	if (c->insecure)
		return kc_fail(kc, "cluster \"%s\" has insecure-skip-tls-verify, and user \"%s\" has "
			       "a bearer token, which would go to whoever answers in the server's "
			       "place; give the cluster its certificate-authority (or use a user "
			       "without a token)", cluster, user);
	return 0;
}

static int take_current_context(struct kc *kc, struct kube_conn *c)
{
	const yaml_node_t *root = yaml_document_get_root_node(&kc->doc);
	if (!root || root->type != YAML_MAPPING_NODE)
		return kc_fail(kc, "not a YAML mapping");
	const char *current = get_string(kc, root, "current-context");
	if (!current)
		return kc_fail(kc, "no current-context");
	const yaml_node_t *ctx = named_entry(kc, root, "contexts", "context", current);
	if (!ctx)
		return -1;
	const char *cluster = get_string(kc, ctx, "cluster");
	const char *user = get_string(kc, ctx, "user");
	if (!cluster)
		return kc_fail(kc, "context \"%s\" names no cluster", current);
	if (take_cluster(kc, root, cluster, c) < 0)
		return -1;
	/* A context without a user is legal: an API server open to anonymous reads. */
	if (!user)
		return 0;
	if (take_user(kc, root, user, c) < 0)
		return -1;
	return refuse_token_in_clear(kc, c, cluster, user);
}

int kube_conn_from_kubeconfig(const char *path, const char *yaml, size_t len,
			      struct kube_conn *out, char *err, size_t errlen)
{
	struct kc kc = {.path = path, .err = err, .errlen = errlen};
	struct kube_conn c = {0};
	yaml_parser_t parser;
	int rc = -1;

	const char *slash = strrchr(path, '/');
	if (slash && !(kc.dir = strndup(path, slash == path ? 1 : (size_t)(slash - path))))
		return kc_fail(&kc, "out of memory");
	if (!yaml_parser_initialize(&parser)) {
		free(kc.dir);
		return kc_fail(&kc, "out of memory");
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
	unsigned line, col;
	if (!config_yaml_shallow(yaml, len, &line, &col)) {
		kc_fail(&kc, "%u:%u: nested deeper than %d levels", line, col, CONFIG_YAML_DEPTH_MAX);
		yaml_parser_delete(&parser);
		free(kc.dir);
		return -1;
	}
	if (!yaml_parser_load(&parser, &kc.doc)) {
		kc_fail(&kc, "%zu:%zu: %s", parser.problem_mark.line + 1,
			parser.problem_mark.column + 1, parser.problem ? parser.problem : "YAML error");
		yaml_parser_delete(&parser);
		free(kc.dir);
		return -1;
	}
	rc = take_current_context(&kc, &c);
	yaml_document_delete(&kc.doc);
	yaml_parser_delete(&parser);
	free(kc.dir);
	if (rc < 0) {
		kube_conn_free(&c);
		return -1;
	}
	*out = c;
	return 0;
}

int kube_conn_load_kubeconfig(const char *path, struct kube_conn *out, char *err, size_t errlen)
{
	const char *why;
	char *text;
	size_t len;

	if (read_small_file(path, &text, &len, NULL, &why) < 0) {
		snprintf(err, errlen, "kubeconfig %s: %s", path, why);
		return -1;
	}
	int rc = kube_conn_from_kubeconfig(path, text, len, out, err, errlen);
	free(text);
	return rc;
}

int kube_conn_in_cluster(const char *host, const char *port, const char *sa_dir,
			 struct kube_conn *out, char *err, size_t errlen)
{
	struct kube_conn c = {0};

	if (!host || !*host || !port || !*port) {
		snprintf(err, errlen, "in-cluster: %s is not set (no kubernetes.kubeconfig given, and "
			 "not running in a pod?)",
			 !host || !*host ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT");
		return -1;
	}
	bool v6 = strchr(host, ':') != NULL;
	c.server = str_printf("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
	c.ca_file = str_printf("%s/ca.crt", sa_dir);
	c.token_file = str_printf("%s/token", sa_dir);
	if (!c.server || !c.ca_file || !c.token_file) {
		snprintf(err, errlen, "in-cluster: out of memory");
		kube_conn_free(&c);
		return -1;
	}
	*out = c;
	return 0;
}

void kube_conn_free(struct kube_conn *c)
{
	free(c->server);
	free(c->ca_file);
	free(c->ca_data.data);
	free(c->cert_file);
	free(c->cert_data.data);
	free(c->key_file);
	free(c->key_data.data);
	free(c->token);
	free(c->token_file);
	*c = (struct kube_conn){0};
}
