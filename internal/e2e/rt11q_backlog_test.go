package e2e_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func rt11qBuyRID(addr, act, user, rid string) e2e.Resp {
	return e2e.Do(nil, addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}, {"X-Request-Id", rid}}})
}

// TestRT11QBacklogBusyRepeatBuysAfresh: queue mode with queue.max_backlog 1
// (one shard). The backlog is full: a second buyer with an X-Request-Id is
// answered 503 BUSY (nothing reserved). Repeats of that request while the
// backlog is still full stay BUSY and reserve nothing; once the worker has
// drained the backlog, the same request buys (QUEUED, then confirmed):
// BUSY holds nothing, so its repeat is decided afresh. A repeat of a
// QUEUED buyer's request is 202 (PENDING, token only for verified
// buyers: README Identity) and reserves nothing more.
func TestRT11QBacklogBusyRepeatBuysAfresh(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11qb", Stock: 5, Shards: 1, Mode: "queue"}}}
	p := rqProxy(t, opts, func(c *config.Config) {
		c.Activities[0].Queue.MaxBacklog = 1
		c.Activities[0].Queue.Workers = 1
	})
	a := p.Activity(t, "rt11qb")
	st := opsStore(t, p.Cfg)

	first := rt11qBuyRID(p.Addr, "rt11qb", "rt11qb-a", "rid-a")
	if first.Code != "QUEUED" {
		t.Fatalf("first buyer: %d %s", first.Status, first.Body)
	}
	for i := 0; i < 3; i++ {
		got := rt11qBuyRID(p.Addr, "rt11qb", "rt11qb-b", "rid-b")
		if got.Code != "BUSY" || got.Status != 503 {
			t.Fatalf("second buyer, backlog full, try %d: %d %s; want 503 BUSY", i, got.Status, got.Body)
		}
		again := rt11qBuyRID(p.Addr, "rt11qb", "rt11qb-a", "rid-a")
		if again.Status != 202 || (again.Token() != "" && again.Token() != first.Token()) {
			t.Fatalf("repeat of the queued buyer: %d %s (token %s, want %s)", again.Status, again.Body, again.Token(), first.Token())
		}
	}
	k := rqWantStock(t, st, a)
	if k.Remaining != 4 || k.Pending != 1 {
		t.Fatalf("after BUSY repeats: %+v; want remaining 4, pending 1", k)
	}
	p.StartQueue(t)
	rqAwaitSettled(p.Addr, []string{first.Token()}, 5*time.Second)
	e2e.Eventually(t, 5*time.Second, "backlog drained", func() bool {
		n, err := st.QueueLength(opsCtx(t), "rt11qb", e2e.SKU, 1)
		return err == nil && n == 0
	})
	retry := rt11qBuyRID(p.Addr, "rt11qb", "rt11qb-b", "rid-b")
	if retry.Code != "QUEUED" {
		t.Fatalf("repeat of the BUSY request after the backlog drained: %d %s; want 202 QUEUED (BUSY held nothing)", retry.Status, retry.Body)
	}
	last := rqAwaitSettled(p.Addr, []string{first.Token(), retry.Token()}, 5*time.Second)
	for i, l := range last {
		if l.State != store.StateConfirmed {
			t.Errorf("buyer %d: %s, want confirmed", i, l)
		}
	}
	k = rqWantStock(t, st, a)
	if int64(len(shop.Orders())) != k.Confirmed || k.Confirmed != 2 {
		t.Errorf("shop orders %d, confirmed %d; want 2", len(shop.Orders()), k.Confirmed)
	}
}
