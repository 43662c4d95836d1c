/*
 * kube/backoff.c — how long to wait after a failed request, and before a
 * relist after 410 Gone (see internal.h).
 *
 * client-go's reflector's values (800 ms doubling to 30 s, each wait
 * stretched by a random factor in [1, 2)): kube-proxy runs on every node
 * with them, so a fleet of localdns adds load of the same shape, and the
 * jitter keeps nodes that lost the API server at the same moment from
 * coming back in lockstep. The longest wait is under a minute.
 *
 * A 410 is not a failure (the next good response would reset the backoff
 * above: the relist's LIST always succeeds), so repeated 410s have a
 * backoff of their own, reset by time.
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
	return step + rnd % step;
}

void kube_backoff_reset(struct kube_backoff *b)
{
	b->failures = 0;
}

uint64_t kube_gone_next(struct kube_gone *g, int64_t now_ms, uint32_t rnd)
{
	bool repeated = g->seen && now_ms - g->last_ms < KUBE_GONE_STREAK_MS;

	g->seen = true;
	g->last_ms = now_ms;
	if (!repeated)
		kube_backoff_reset(&g->backoff);
	return kube_backoff_next(&g->backoff, rnd);
}
