package admission

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// DurableStore is what a Store offers for redis.durable_winners; the
// pipeline uses it only when the store says durable winners are on.
type DurableStore interface {
	DurableWinners() bool
	MakeDurable(ctx context.Context, q store.ReserveRequest, res store.ReserveResult) (store.Durability, error)
}

var _ DurableStore = (*store.Store)(nil)

// durableCheck is the winners' wait for replicas (issue 11 §2): after a
// reserve that won, before the decision goes back to the proxy (which
// forwards a sync winner to the shop, or answers a queued one 202). No
// other answer waits.
type durableCheck struct {
	ds      DurableStore
	wait    prometheus.Observer
	results [store.DurableTaken + 1]prometheus.Counter
	lastLog atomic.Int64 // unix ns of the last "not acknowledged" line
}

func newDurableCheck(s Store, m *metrics.Metrics) *durableCheck {
	ds, ok := s.(DurableStore)
	if !ok || !ds.DurableWinners() {
		return nil
	}
	d := &durableCheck{ds: ds, wait: m.ScriptLatency.WithLabelValues("durable_wait")}
	for r := range d.results {
		d.results[r] = m.DurableWinners.WithLabelValues("buy", store.Durability(r).String())
	}
	return d
}

// makeDurable waits for the winner's replicas; refused is true when
// on_timeout refuse released the reservation: the buyer is told
// STORE_UNAVAILABLE (nothing held, SPEC §4).
func (p *Pipeline) makeDurable(ctx context.Context, q store.ReserveRequest, won store.ReserveResult) (d Decision, refused bool) {
	dc := p.dur
	t0 := time.Now()
	res, err := dc.ds.MakeDurable(ctx, q, won)
	dc.wait.Observe(time.Since(t0).Seconds())
	if int(res) < len(dc.results) {
		dc.results[res].Inc()
	}
	if err != nil {
		// Every winner of a sale can hit this while a replica is down: a
		// line a second at most; the metric counts them all.
		if now, last := time.Now().UnixNano(), dc.lastLog.Load(); now-last > int64(time.Second) && dc.lastLog.CompareAndSwap(last, now) {
			p.log.Warn("winner not acknowledged by the replicas", zap.String("token", won.Token.String()),
				zap.Stringer("result", res), zap.Error(err))
		}
	}
	if res == store.DurableRefused {
		return p.refuse(rNotDurable, retryAfterDefault), true
	}
	return Decision{}, false
}
