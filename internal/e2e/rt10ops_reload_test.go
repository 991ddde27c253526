package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team round 10, operator errors: a reload while serving.

// The operator switches a queue-mode activity to mode: sync mid-sale (the
// queue looks slow) and reloads (SIGHUP). serve's reload calls
// queue.Start(next) (cmd/seckill-proxy/serve.go), which starts workers
// only for activities that use the queue now (reservation/queue.go Start:
// !cfg.UsesQueue(a) → skipped): the buyers already told 202 QUEUED are
// never sent. Their units stay pending for good, the shop never hears of
// them, and the only signal is the reconciler's "queued_stale" alert
// ("are the queue workers running?") ten minutes later, which never
// settles them either. Nothing at the reload says N buyers were left in
// the queue. Want: the queued entries still sent (workers drain what an
// activity has queued whatever its mode now), or the reload refused with
// a message while the queue is not empty.
func TestRT10OpsReloadQueueToSyncStrandsQueuedBuyers(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt10q", Stock: 5, Shards: 1, Mode: "queue"}}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10q")
	a := p.Activity(t, "rt10q")
	for i := 0; i < 3; i++ {
		if got := e2e.Buy(p.Addr, "rt10q", fmt.Sprintf("q%d", i)); got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
	}
	// The reload: the same file with mode: sync; serve then restarts the
	// queue workers with the new config.
	opts.Activities[0].Mode = "sync"
	next := opts.Config(t)
	q := reservation.NewQueue(p.Store, metrics.New(), zap.NewNop(), reservation.QueueOptions{
		Consumer: "rt10-" + p.Addr, Inflight: p.Server.Inflight()})
	q.Start(next)
	t.Cleanup(q.Stop)

	st, err := store.OpenNow(p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s, err := st.Status(context.Background(), a)
		if err == nil && s.SKUs[0].Pending == 0 {
			return // the queued buyers were sent and settled
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, _ := st.Status(context.Background(), a)
	t.Errorf("3 buyers told 202 QUEUED, then mode: queue → sync and a reload: after 5 s the shop got %d buys and status is %+v; the queued buyers are never sent",
		len(shop.Buys()), s.SKUs[0])
}

// A reload (SIGHUP, or watch: true) of a file without a running
// activity (removed "to stop the sale", or a file cut short by an editor
// while watch polls it) is accepted, and the activity's buy route goes
// with it: its path is then ordinary traffic, passed to the shop with no
// admission at all — no stock check, no per-user limit, no token. The
// shop's own buy handler sells. Stopping a sale is `pause`; a reload must
// not open the path to the shop (keep refusing the old route, or refuse
// a reload that drops a preheated, running activity).
func TestRT10OpsReloadDroppingActivityOpensItsRoute(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "keep", Stock: 5, Shards: 1},
		{ID: "rt10d", Path: "/flash/{sku}/buy", Stock: 1, Shards: 1},
	}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10d")
	if got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/flash/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "u0"}}}); got.Code != "WIN" {
		t.Fatalf("first buy: %d %s", got.Status, got.Body)
	}
	// The reload without rt10d.
	opts.Activities = opts.Activities[:1]
	// A refusal is a fix: the running config, and rt10d's admission, stay.
	if err := p.Server.Apply(opts.Config(t)); err != nil {
		t.Logf("reload refused: %v", err)
		if msg := err.Error(); !strings.Contains(msg, `"rt10d"`) || !strings.Contains(msg, "pause") {
			t.Errorf("the refusal names neither the activity nor the kill switch: %v", err)
		}
	}
	for _, u := range []string{"u1", "u2", "u3"} {
		e2e.Do(nil, p.Addr, e2e.Req{URI: "/flash/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", u}}})
	}
	n := 0
	for _, rq := range shop.Requests() {
		if rq.Path == "/flash/"+e2e.SKU+"/buy" && rq.Header.Get("X-Seckill-Token") == "" {
			n++
		}
	}
	if n > 0 {
		t.Errorf("after a reload dropping activity rt10d (stock 1, sold), %d buys on its route reached the shop with no admission and no token", n)
	}
}

// A reload that moves a running activity's buy route elsewhere leaves the
// old path to ordinary traffic, as a drop does: refused the same way, and
// the old route keeps its admission.
func TestRT10OpsReloadMovingBuyRouteOpensOldPath(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "rt10m", Path: "/flash/{sku}/buy", Stock: 1, Shards: 1},
	}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "rt10m")
	if got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/flash/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "u0"}}}); got.Code != "WIN" {
		t.Fatalf("first buy: %d %s", got.Status, got.Body)
	}
	opts.Activities[0].Path = "/sale/{sku}/buy"
	err := p.Server.Apply(opts.Config(t))
	if err == nil {
		t.Fatal("a reload moving a running sale's buy route was accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "POST /flash/{sku}/buy") || !strings.Contains(msg, "pause") {
		t.Errorf("the refusal names neither the old route nor the kill switch: %v", err)
	}
	for _, u := range []string{"u1", "u2"} {
		if got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/flash/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", u}}}); got.Code != "SOLD_OUT" {
			t.Errorf("buy on the old route after the refused reload: %d %s, want SOLD_OUT", got.Status, got.Body)
		}
	}
	// A reload that keeps the route is accepted.
	opts.Activities[0].Path = "/flash/{sku}/buy"
	if err := p.Server.Apply(opts.Config(t)); err != nil {
		t.Errorf("a reload keeping the route was refused: %v", err)
	}
}

// What may go: an activity never preheated, or one past its end and
// pending window.
func TestRT10OpsReloadDroppingIdleActivitiesAccepted(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	now := time.Now()
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "keep", Stock: 5, Shards: 1},
		{ID: "never", Path: "/never/{sku}/buy", Stock: 1, Shards: 1},
		{ID: "over", Path: "/over/{sku}/buy", Stock: 1, Shards: 1, Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour), Pending: 10 * time.Minute},
	}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "over")
	opts.Activities = opts.Activities[:1]
	if err := p.Server.Apply(opts.Config(t)); err != nil {
		t.Errorf("a reload dropping a never-preheated and an ended activity was refused: %v", err)
	}
}
