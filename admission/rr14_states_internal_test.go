package admission

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

type rr14Store struct{ flags atomic.Int64 }

func (s *rr14Store) Flags(context.Context, string) (store.Flags, error) {
	s.flags.Add(1)
	return store.Flags{Ready: true, Shards: 1}, nil
}
func (s *rr14Store) Reserve(context.Context, store.ReserveRequest) (store.ReserveResult, error) {
	return store.ReserveResult{Code: lua.Empty}, nil
}
func (s *rr14Store) Repeat(context.Context, store.ReserveRequest) (store.ReserveResult, bool, error) {
	return store.ReserveResult{}, false, nil
}

// TestRR14ReloadsDoNotPileUpActivityStates: admission keys its per-activity
// state (flag snapshot, sold-out marks, admission lease) by the
// *config.Activity pointer, and every reload parses new pointers. The old
// states stay in p.acts until they have been unused for 600 s (refresh →
// prune), and the refresher re-reads flags, sold-out marks and eligibility
// for every one of them on every pass (each invalidation, at least every
// 250 ms). A config-management tool touching the file once a second under
// `watch: true` keeps ~600 dead states per activity; reloads in a burst
// keep one per reload. After 200 reloads of a one-activity config, with a
// buy between each, at most the running state (and one being replaced)
// should remain.
func TestRR14ReloadsDoNotPileUpActivityStates(t *testing.T) {
	fs := &rr14Store{}
	p := New(fs, metrics.New(), zap.NewNop(), time.Now)
	t.Cleanup(p.Close)
	now := time.Now()
	for i := 0; i < 200; i++ {
		y := fmt.Sprintf(`upstream: { url: "http://127.0.0.1:1" }
messages: { SOLD_OUT: "gone %d" }
activities:
  - id: a1
    start: %s
    end: %s
    skus: [{ id: s, stock: 10 }]
`, i, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
		cfg, err := config.Parse("rr14.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		p.Apply(cfg)
		_ = p.Decide(context.Background(), &Request{Activity: &cfg.Activities[0], SKU: "s", Qty: 1, User: "u",
			IP: netip.MustParseAddr("10.0.0.1")})
	}
	n := len(*p.acts.Load())
	if n > 2 {
		t.Errorf("after 200 reloads of one activity, admission keeps %d activity states (each refreshed on every pass for 10 minutes); want at most 2", n)
	}
}
