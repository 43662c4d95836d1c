/*
 * Unit tests for util/datagram.h on real loopback sockets: a batch reaches
 * each message's own peer, in order, with its own bytes, whether it goes
 * with sendmmsg or (one message, or the last one) with sendto; a message
 * the kernel refuses outright (an address of another family) is skipped
 * and the rest still go; an empty batch sends nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "util/datagram.h"

#define MAX 4

struct batch {
	struct mmsghdr msgs[MAX];
	struct iovec iov[MAX];
	struct sockaddr_storage to[MAX];
	char text[MAX][16];
	unsigned n;
};

/* A UDP socket on 127.0.0.1 (its address in *at), reads never waiting long. */
static int receiver(struct sockaddr_in *at)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof *at;
	struct timeval wait = {.tv_usec = 200000};

	assert_true(fd >= 0);
	*at = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(fd, (struct sockaddr *)at, sizeof *at), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)at, &len), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait), 0);
	return fd;
}

static void add(struct batch *b, const void *to, socklen_t to_len, const char *text)
{
	unsigned i = b->n++;

	memcpy(&b->to[i], to, to_len);
	snprintf(b->text[i], sizeof b->text[i], "%s", text);
	b->iov[i] = (struct iovec){.iov_base = b->text[i], .iov_len = strlen(text)};
	b->msgs[i].msg_hdr = (struct msghdr){.msg_name = &b->to[i], .msg_namelen = to_len,
					     .msg_iov = &b->iov[i], .msg_iovlen = 1};
}

/* The next datagram fd holds is text. */
static void expect(int fd, const char *text)
{
	char got[32];
	ssize_t n = recv(fd, got, sizeof got - 1, 0);

	assert_true(n >= 0);
	got[n] = '\0';
	assert_string_equal(got, text);
}

static void expect_nothing(int fd)
{
	char got[32];

	assert_true(recv(fd, got, sizeof got, MSG_DONTWAIT) < 0);
}

static void test_each_message_reaches_its_own_peer_in_order(void **state)
{
	(void)state;
	struct sockaddr_in a, b;
	int ra = receiver(&a), rb = receiver(&b), s = socket(AF_INET, SOCK_DGRAM, 0);
	struct batch out = {0};

	add(&out, &a, sizeof a, "one");
	add(&out, &b, sizeof b, "two");
	add(&out, &a, sizeof a, "three"); /* the last: sendto */
	datagram_send_all(s, out.msgs, out.n, 0);
	expect(ra, "one");
	expect(ra, "three");
	expect(rb, "two");
	expect_nothing(ra);
	expect_nothing(rb);
	close(s);
	close(ra);
	close(rb);
}

static void test_a_batch_of_one_goes_and_an_empty_one_sends_nothing(void **state)
{
	(void)state;
	struct sockaddr_in a;
	int ra = receiver(&a), s = socket(AF_INET, SOCK_DGRAM, 0);
	struct batch out = {0};

	datagram_send_all(s, out.msgs, 0, 0);
	expect_nothing(ra);
	add(&out, &a, sizeof a, "alone");
	datagram_send_all(s, out.msgs, out.n, MSG_NOSIGNAL);
	expect(ra, "alone");
	expect_nothing(ra);
	close(s);
	close(ra);
}

static void test_a_refused_message_is_skipped_and_the_rest_go(void **state)
{
	(void)state;
	struct sockaddr_in a;
	struct sockaddr_in6 other_family = {.sin6_family = AF_INET6, .sin6_port = htons(53),
					    .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	int ra = receiver(&a), s = socket(AF_INET, SOCK_DGRAM, 0);
	struct batch out = {0};

	add(&out, &other_family, sizeof other_family, "refused"); /* sendmmsg stops there */
	add(&out, &a, sizeof a, "after");
	add(&out, &other_family, sizeof other_family, "last"); /* sendto refuses it */
	datagram_send_all(s, out.msgs, out.n, 0);
	expect(ra, "after");
	expect_nothing(ra);
	close(s);
	close(ra);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_message_reaches_its_own_peer_in_order),
		cmocka_unit_test(test_a_batch_of_one_goes_and_an_empty_one_sends_nothing),
		cmocka_unit_test(test_a_refused_message_is_skipped_and_the_rest_go),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
