/*
 * deferred_rcu.h — call_rcu for a fuzz target that frees through it
 * (fuzz_cluster, fuzz_mesh; each linked with
 * -Wl,--wrap=urcu_memb_call_rcu,--wrap=urcu_memb_barrier, see the
 * Makefile): liburcu's call_rcu thread sleeps 10 ms before each batch, and
 * the tables' free waits for it (urcu_memb_barrier), which held such a
 * target to 80 inputs a second. Here callbacks wait in a list and run after
 * a grace period at the barrier: what call_rcu promises, without the
 * thread, and every free done before the input ends (so libFuzzer's leak
 * check sees a balanced input). Include in exactly one file of a target.
 */
#ifndef LOCALDNS_FUZZ_DEFERRED_RCU_H
#define LOCALDNS_FUZZ_DEFERRED_RCU_H

#include <urcu/urcu-memb.h>

static struct rcu_head *deferred;

void __wrap_urcu_memb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void __wrap_urcu_memb_barrier(void);

void __wrap_urcu_memb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head))
{
	head->func = func;
	head->next.next = deferred ? &deferred->next : NULL;
	deferred = head;
}

void __wrap_urcu_memb_barrier(void)
{
	urcu_memb_synchronize_rcu();
	while (deferred) {
		struct rcu_head *head = deferred;
		deferred = head->next.next ? caa_container_of(head->next.next, struct rcu_head, next)
					   : NULL;
		head->func(head);
	}
}

#endif
