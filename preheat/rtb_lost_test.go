package preheat

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// An instance started after its Redis lost a running sale (restarted
// without persistence) could not tell the loss from stock never loaded,
// and preheated: every unit the shop had sold was on sale again (README's
// "bound", red team rtb). With verify.count_url the shop tells: orders of
// the activity mean a lost sale (counted lost, not preheated); none, a
// late first preheat, which goes ahead.
func TestRTBScheduledPreheatAfterALossAsksTheShop(t *testing.T) {
	srv := redistest.Start(t)
	var orders atomic.Int64
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"count": %d}`, orders.Load())
	}))
	t.Cleanup(shop.Close)
	now := time.Now()
	cfg := testConfig(t, srv.Addr, now.Add(-time.Minute), now.Add(time.Hour), "-5m")
	a := &cfg.Activities[0]
	a.Verify = config.Verify{URL: shop.URL + "/orders?token={token}", CountURL: shop.URL + "/count?sku={sku}"}
	st := openStore(t, cfg)
	rec := reservation.NewReconciler(st, metrics.New(), zap.NewNop())
	c := &clock{t: now}
	fresh := func(name string) *Scheduler {
		return New(openStore(t, cfg), func() *config.Config { return cfg }, zap.NewNop(), Options{Now: c.Now, Holder: name, LostSale: rec.LostSale})
	}

	orders.Store(3) // sold before Redis restarted empty
	s := fresh("after-the-loss")
	s.pass(context.Background())
	if count([]*Scheduler{s}, "created") != 0 || count([]*Scheduler{s}, OutcomeLost) != 1 || record(t, st).Ready {
		t.Fatalf("a running sale the shop holds 3 orders of, gone from Redis: created %d, lost %d (want 0, 1)",
			count([]*Scheduler{s}, "created"), count([]*Scheduler{s}, OutcomeLost))
	}

	orders.Store(0) // never preheated: the fleet started late
	s = fresh("late")
	s.pass(context.Background())
	if count([]*Scheduler{s}, "created") != 1 || !record(t, st).Ready {
		t.Fatalf("a late first preheat (the shop holds no order): created %d", count([]*Scheduler{s}, "created"))
	}
}
