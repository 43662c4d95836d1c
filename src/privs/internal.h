/*
 * privs/internal.h — between privs.c and deny.c. Private to src/privs/.
 */
#ifndef LOCALDNS_PRIVS_INTERNAL_H
#define LOCALDNS_PRIVS_INTERNAL_H

#include <stddef.h>

/*
 * Install on the calling thread the seccomp deny-list of what localdns
 * never does (deny.c): everything else stays allowed. Needs no_new_privs.
 * 0, or -1 with err.
 */
int privs_deny_never_used(char *err, size_t errlen);

#endif
