/*
 * kube/backoff.c — how long to wait after a failed request (see internal.h).
 *
 * client-go's reflector backs off from 800 ms to 30 s; we start at 400 ms
 * because one node's cache is cheap for the API server and a blip (an API
 * server restart, a load balancer change) should cost little staleness.
 * The jitter keeps a fleet of nodes that lost the API server at the same
 * moment from reconnecting in lockstep.
 */
#include "kube/internal.h"

uint64_t kube_backoff_next(struct kube_backoff *b, uint32_t rnd)
{
	uint64_t step = KUBE_BACKOFF_INITIAL_MS;

	for (unsigned i = 0; i < b->failures && step < KUBE_BACKOFF_CAP_MS; i++)
		step *= 2;
	if (step > KUBE_BACKOFF_CAP_MS)
		step = KUBE_BACKOFF_CAP_MS;
	b->failures++;
	return step / 2 + rnd % (step / 2 + 1);
}

void kube_backoff_reset(struct kube_backoff *b)
{
	b->failures = 0;
}
