package admission_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// transitStore is a real store whose InTransit a test sets (the store's
// own answers it while its retrier holds a settle: store
// startTransit is a preheated activity (stock 2 over shards) on a real
// Redis and a pipeline over a transitStore of its instance's store.
func startTransit(t *testing.T, shards int) (*redistest.Server, *config.Activity, *instance, *transitStore, *admission.Pipeline) {
	t.Helper()
	srv := redistest.Start(t)
	cfg := realConfig(t, 2, shards)
	a := &cfg.Activities[0]
	in := startInstance(t, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
	ts := &transitStore{Store: in.st}
	p := runPipeline(t, ts, in.m, cfg, time.Now)
	preheat(t, in.st, a)
	return srv, a, in, ts, p
}

// TestTransitIsNotSoldOut stalls a cluster master for that).
type transitStore struct {
	*store.Store
	on       atomic.Bool
	reserves atomic.Int64
}

func (s *transitStore) Reserve(ctx context.Context, q store.ReserveRequest) (store.ReserveResult, error) {
	s.reserves.Add(1)
	return s.Store.Reserve(ctx, q)
}

func (s *transitStore) InTransit(context.Context, string, string, int) bool { return s.on.Load() }

// TestTransitIsNotSoldOut (decisions §54): a sold-out SKU whose units this
// instance's settles may put back on sale is answered STORE_UNAVAILABLE,
// with Retry-After, not SOLD_OUT from the sold-out mark, single buys and
// bundles alike; SOLD_OUT again once nothing is in transit.
func TestTransitIsNotSoldOut(t *testing.T) {
	_, a, _, ts, p := startTransit(t, 1)
	for i := 0; i < 2; i++ {
		if d := p.Decide(bg(t), req(a, "buyer"+strconv.Itoa(i))); d.Code != admission.Admitted {
			t.Fatalf("buyer %d: %v", i, d.Code)
		}
	}
	// The sold-out mark answers: SOLD_OUT with no call into the store.
	eventually(t, 2*time.Second, "sold-out mark", func() bool {
		n := ts.reserves.Load()
		return p.Decide(bg(t), req(a, "late")).Code == admission.SoldOut && ts.reserves.Load() == n
	})
	ts.on.Store(true)
	d := p.Decide(bg(t), req(a, "late2"))
	if d.Code != admission.StoreUnavailable || d.RetryAfter <= 0 {
		t.Errorf("a buyer of a sold-out SKU with units in transit: %v (retry after %v), want STORE_UNAVAILABLE with Retry-After", d.Code, d.RetryAfter)
	}
	b := req(a, "late3")
	b.Items = []store.BundleItem{{SKU: a.SKUs[0].ID, Qty: 1}}
	if d := p.Decide(bg(t), b); d.Code != admission.StoreUnavailable {
		t.Errorf("a bundle of a sold-out SKU with units in transit: %v, want STORE_UNAVAILABLE", d.Code)
	}
	ts.on.Store(false)
	if d := p.Decide(bg(t), req(a, "late4")); d.Code != admission.SoldOut {
		t.Errorf("nothing in transit: %v, want SOLD_OUT", d.Code)
	}
}

// TestFleetTransitIsNotSoldOut (decisions §58): another instance holding
// a settle of the SKU marks it in transit on a shard's tag (store
// fleetmark.go; the SET it sends, written here as it writes it): this
// instance, which holds nothing, answers the sold-out SKU's buyers
// STORE_UNAVAILABLE instead of SOLD_OUT from the sold-out mark, single
// buys and bundles alike, with no call into the store; SOLD_OUT again
// from the mark once the mark lapses.
func TestFleetTransitIsNotSoldOut(t *testing.T) {
	srv, a, in, ts, p := startTransit(t, 2)
	for i := 0; i < 2; i++ {
		eventually(t, 2*time.Second, "a winner", func() bool {
			return p.Decide(bg(t), req(a, "buyer"+strconv.Itoa(i))).Code == admission.Admitted
		})
	}
	eventually(t, 2*time.Second, "sold-out mark", func() bool {
		n := ts.reserves.Load()
		return p.Decide(bg(t), req(a, "late")).Code == admission.SoldOut && ts.reserves.Load() == n
	})
	k := in.st.SKUKeys(a.ID, a.SKUs[0].ID, a.Shards)
	if _, err := srv.Do("SET", k.Shards[1].Transit, "1", "PX", "400"); err != nil {
		t.Fatal(err)
	}
	marked := time.Now()
	n := ts.reserves.Load()
	eventually(t, time.Second, "STORE_UNAVAILABLE beside the mark", func() bool {
		return p.Decide(bg(t), req(a, "late2")).Code == admission.StoreUnavailable
	})
	b := req(a, "late3")
	b.Items = []store.BundleItem{{SKU: a.SKUs[0].ID, Qty: 1}}
	if d := p.Decide(bg(t), b); d.Code != admission.StoreUnavailable && time.Since(marked) < 300*time.Millisecond {
		t.Errorf("a bundle of a sold-out SKU marked in transit: %v, want STORE_UNAVAILABLE", d.Code)
	}
	if got := ts.reserves.Load(); got != n {
		t.Errorf("%d reserves reached the store beside the mark, want none", got-n)
	}
	eventually(t, 2*time.Second, "SOLD_OUT once the mark lapsed", func() bool {
		return p.Decide(bg(t), req(a, "late4")).Code == admission.SoldOut
	})
	t.Logf("SOLD_OUT again %v after the mark (PX 400)", time.Since(marked))
}
