package e2e

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// TestRA12TakeoverSlowVerifyOutlivesPendingTimeout: a queue worker dies
// mid-request; another takes the entry over, re-stamps it (claim SAME:
// pending_timeout counts from here), asks verify.url first — which is
// slow, answering within upstream.timeout — and only then sends. The
// shop answers within the 2 × upstream.timeout the README allows a shop
// behind a balancer. pending_timeout is the minimum (2 × upstream.timeout
// + 2 s), which leaves no room for the verify the worker made between the
// stamp and the send: a reconcile pass in that window asks verify
// (absent: not committed yet), releases the unit, and the shop then takes
// the order. Sync mode would not send a winner that old (lateToSend).
func TestRA12TakeoverSlowVerifyOutlivesPendingTimeout(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("≈20 s")
	}
	r := StartRedis(t)
	shop := ra12StartShop(t, 10*time.Second)
	shop.discard.Store(true) // the first worker's send is rolled back
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 3 * time.Second,
		Activities: []Activity{{ID: "act_tk", Stock: 2, Mode: "queue", Pending: 8 * time.Second, Shards: 1}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_tk")
	// claim_idle above one verify plus one send, so a worker never takes
	// over its own entry (the default is 30 s + 3 × upstream.timeout).
	startQ := func(name string) *reservation.Queue {
		q := reservation.NewQueue(p.Store, p.Metrics, zap.NewNop(), reservation.QueueOptions{
			Consumer: name, ClaimIdle: 7 * time.Second, Inflight: p.Server.Inflight()})
		q.Start(p.Cfg)
		t.Cleanup(q.Stop)
		return q
	}
	q1 := startQ("ra12-w1")
	if res := ra12Buy(p.Addr, "act_tk", "tk1", "", 5*time.Second); res.Code != "QUEUED" {
		t.Fatalf("buy: %d %s", res.Status, res.Body)
	}
	Eventually(t, 5*time.Second, "first send at the shop", func() bool { return shop.received.Load() == 1 })
	q1.Kill()

	shop.discard.Store(false)
	shop.latency.Store(int64(5500 * time.Millisecond))
	var verifyAt time.Time
	shop.setVerify(func(http.ResponseWriter, *http.Request, string, bool) bool {
		verifyAt = time.Now()
		time.Sleep(2800 * time.Millisecond)
		return false
	})
	startQ("ra12-w2")
	Eventually(t, 25*time.Second, "the takeover's send at the shop", func() bool { return shop.received.Load() == 2 })
	sent := time.Now()
	t.Logf("verify asked %v before the send", sent.Sub(verifyAt))
	shop.setVerify(nil)
	// The takeover stamped the reservation ≈2.8 s before its send; a
	// reconcile pass 5.3 s after the send finds it past pending_timeout.
	time.Sleep(5300 * time.Millisecond)
	rep := ra12Reconcile(t, p, "act_tk", time.Now())
	for _, ar := range rep.Activities {
		for _, f := range ar.Stale {
			t.Logf("stale %s age %d ms (send %v ago): %s %s %s", f.Token, f.AgeMs, time.Since(sent).Round(time.Millisecond), f.Verdict, f.Action, f.Detail)
		}
	}
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	k := p.SKUStatus(t, "act_tk")
	n, _ := shop.counts()
	t.Logf("status %+v; shop orders %d", k, n)
	if k.Confirmed+k.Pending != int64(n) {
		t.Fatalf("shop holds %d orders; Redis: confirmed %d, pending %d, released %d — the unit the shop sold is back on sale", n, k.Confirmed, k.Pending, k.Released)
	}
}
