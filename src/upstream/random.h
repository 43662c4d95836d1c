/*
 * upstream/random.h — the random numbers libunbound draws (each question's
 * ID and source port, the choice among servers): a pool per thread that
 * one getrandom fills 64 numbers at a time.
 *
 * Why. libunbound, built with OpenSSL, takes them from arc4random and
 * arc4random_uniform, which glibc 2.36 answers with a getrandom system
 * call each: two a miss, a tenth of a miss's system calls, each also
 * through the seccomp filter. Our libunbound is built with those two names
 * bound to these functions (deploy/libunbound/build.sh), so every draw
 * but one in 64 is a load from the thread's pool. The numbers are the
 * kernel's, as before; only when they are fetched changes.
 *
 * Owns: each thread's pool. Must never: hand out a number twice (a drawn
 * word is wiped), share a pool between threads (it is thread-local, no
 * lock), or let a child of fork draw what its parent will (the forking
 * thread's pool is emptied in the child).
 */
#ifndef LOCALDNS_UPSTREAM_RANDOM_H
#define LOCALDNS_UPSTREAM_RANDOM_H

#include <stdint.h>

/* 32 random bits (arc4random's contract: never fails). */
uint32_t upstream_arc4random(void);
/* Uniform in [0, upper) without modulo bias; 0 when upper < 2 (arc4random_uniform's). */
uint32_t upstream_arc4random_uniform(uint32_t upper);

#endif
