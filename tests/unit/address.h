/*
 * address.h — a client's socket address from its text, IPv4 or IPv6, for
 * the tests that say who asks (autopath, views, DNS64, client prefixes).
 * Include after <cmocka.h>.
 */
#ifndef LOCALDNS_TEST_ADDRESS_H
#define LOCALDNS_TEST_ADDRESS_H

#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static inline struct sockaddr_storage address_of(const char *ip)
{
	struct sockaddr_storage ss = {0};

	if (strchr(ip, ':')) {
		struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
		v6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, ip, &v6->sin6_addr), 1);
	} else {
		struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
		v4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, ip, &v4->sin_addr), 1);
	}
	return ss;
}

#endif
