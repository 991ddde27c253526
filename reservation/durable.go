package reservation

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// durable is a queue worker's wait for replicas (redis.durable_winners)
// between the claim and the request to the shop: one WAIT on the shard's
// node covers the buyer's reserve and this claim. The buyer's request
// waited already before its 202, but a worker may claim an entry within
// that wait; checking here too means the shop never sees a reservation a
// failover could take back. It reports whether to send the reservation;
// when not, it has settled (released, acknowledged) what it could. sentMs
// is the stamp its claim wrote: the release is conditional on it, so a
// takeover that claimed and sent the reservation since (a worker stalled
// here past claim_idle) is left to settle its own send.
func (aq *actQueue) durable(ctx context.Context, tok store.Token, j job, claim lua.Code, sentMs int64, ack func()) bool {
	st := aq.q.st
	count := func(result string) { aq.q.m.DurableWinners.WithLabelValues("queue", result).Inc() }
	ok, _, err := st.WaitReplicas(ctx, tok, j.shards, aq.expireAt)
	switch {
	case ok:
		count(store.DurableOK.String())
		return true
	case !st.DurableRefuses():
		count(store.DurableLate.String())
		aq.q.log.Warn("queue: replicas did not acknowledge; sending anyway (on_timeout: forward)",
			zap.String("token", j.e.Token), zap.Error(err))
		return true
	case claim == lua.Same:
		// Redelivered: the worker that claimed it first may have sent it,
		// so it is never released here; the next delivery tries again.
		count("deferred")
		aq.q.log.Warn("queue: replicas did not acknowledge a redelivered reservation; left for its next delivery",
			zap.String("token", j.e.Token), zap.Error(err))
		return false
	}
	count(store.DurableRefused.String())
	aq.q.log.Warn("queue: replicas did not acknowledge; reservation released (on_timeout: refuse)",
		zap.String("token", j.e.Token), zap.Error(err))
	// Claimed by this worker and never sent: pending, released by token.
	if aq.settle(ctx, "release", func(c context.Context) (lua.Code, error) {
		return st.ReleaseSent(c, tok, j.shards, "not_durable", time.Now().UnixMilli(), sentMs)
	}) {
		ack()
	}
	return false
}
