/*
 * util/tsan — what ThreadSanitizer must be told about liburcu (`make tsan`).
 * liburcu is not instrumented, so TSan sees neither a grace period nor a
 * node published in a cds_lfht (the library's rcu_assign_pointer): without
 * these annotations every free after a grace period, and every read of a
 * node another thread has just published, looks like a race. They model
 * exactly the ordering RCU provides:
 *
 *   TSAN_GRACE_RELEASE()  a thread is done with what it read under RCU (a
 *                         reader before leaving its read-side section, a
 *                         writer before handing an object to call_rcu)
 *   TSAN_GRACE_ACQUIRE()  a grace period has passed (synchronize_rcu
 *                         returned, or in a call_rcu callback): before free
 *   TSAN_PUBLISH(p)       before a writer makes p visible through liburcu
 *   TSAN_SUBSCRIBE(p)     a reader found p through liburcu, before it reads *p
 *
 * Without -fsanitize=thread they compile to nothing.
 *
 * Must never: change what the program does, or stand in for
 * synchronisation the code does not have (an annotation says what liburcu
 * already guarantees, nothing more).
 */
#ifndef LOCALDNS_UTIL_TSAN_H
#define LOCALDNS_UTIL_TSAN_H

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>

/* The one object every grace period releases and acquires; weak, so each
 * file that includes this header shares the same one. */
__attribute__((weak)) char tsan_rcu_grace;

#define TSAN_GRACE_RELEASE() __tsan_release(&tsan_rcu_grace)
#define TSAN_GRACE_ACQUIRE() __tsan_acquire(&tsan_rcu_grace)
#define TSAN_PUBLISH(p) __tsan_release((void *)(p))
#define TSAN_SUBSCRIBE(p) __tsan_acquire((void *)(p))
#else
#define TSAN_GRACE_RELEASE() ((void)0)
#define TSAN_GRACE_ACQUIRE() ((void)0)
#define TSAN_PUBLISH(p) ((void)(p))
#define TSAN_SUBSCRIBE(p) ((void)(p))
#endif

#endif
