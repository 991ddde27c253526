package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// ra12PendingSale leaves n reservations pending: the shop is slower than
// upstream.timeout; with withOrders it then creates the order (a late 2xx
// nobody reads), without it creates none.
func ra12PendingSale(t *testing.T, n int, withOrders bool) (*Proxy, *ra12Shop) {
	t.Helper()
	r := StartRedis(t)
	shop := ra12StartShop(t, 600*time.Millisecond)
	shop.discard.Store(!withOrders)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 300 * time.Millisecond,
		Activities: []Activity{{ID: "act_rv", Stock: int64(n) + 4, Pending: 30 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_rv")
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := ra12Buy(p.Addr, "act_rv", fmt.Sprintf("v%d", i), "", 5*time.Second); res.Code != "UPSTREAM_TIMEOUT" {
				t.Errorf("buyer %d: %d %s, want 504 UPSTREAM_TIMEOUT", i, res.Status, res.Body)
			}
		}()
	}
	wg.Wait()
	Eventually(t, 5*time.Second, "shop idle", func() bool { return shop.cur.Load() == 0 })
	if k := p.SKUStatus(t, "act_rv"); k.Pending != int64(n) {
		t.Fatalf("status %+v, want %d pending", k, n)
	}
	return p, shop
}

// TestRA12VerifyOddAnswers: verify.url answers that are neither "200 the
// order exists" nor "404 it does not" must settle nothing (SPEC §6: never
// guessed). The reconciler's http.Client follows redirects, so a verify
// endpoint behind a login gateway (302 to a login page that answers 200)
// confirms every pending reservation though the shop holds no order: the
// units are sold to nobody; a verify that moved (301 to a path that
// answers 404) releases reservations the shop holds orders for: sold twice.
func TestRA12VerifyOddAnswers(t *testing.T) {
	Soak(t)
	const n = 4
	t.Run("redirect to login page", func(t *testing.T) {
		p, shop := ra12PendingSale(t, n, false)
		shop.setVerify(func(w http.ResponseWriter, r *http.Request, _ string, _ bool) bool {
			http.Redirect(w, r, "/login?next="+r.URL.Query().Get("token"), http.StatusFound)
			return true
		})
		ra12Reconcile(t, p, "act_rv", time.Now().Add(time.Minute))
		k := p.SKUStatus(t, "act_rv")
		orders, _ := shop.counts()
		if k.Confirmed != int64(orders) {
			t.Fatalf("verify answered 302 (to a login page): status %+v, shop holds %d orders — %d units confirmed for orders that do not exist", k, orders, k.Confirmed-int64(orders))
		}
	})
	t.Run("redirect to a 404", func(t *testing.T) {
		p, shop := ra12PendingSale(t, n, true)
		shop.setVerify(func(w http.ResponseWriter, r *http.Request, _ string, _ bool) bool {
			http.Redirect(w, r, "/gone?token="+r.URL.Query().Get("token"), http.StatusMovedPermanently)
			return true
		})
		ra12Reconcile(t, p, "act_rv", time.Now().Add(time.Minute))
		k := p.SKUStatus(t, "act_rv")
		orders, _ := shop.counts()
		if k.Released != 0 || k.Pending+k.Confirmed != int64(orders) {
			t.Fatalf("verify answered 301 (to a path that is 404): status %+v, shop holds %d orders — released units the shop holds orders for", k, orders)
		}
	})
	for _, c := range []struct {
		name string
		v    func(w http.ResponseWriter, r *http.Request, id string, ok bool) bool
	}{
		{"500", func(w http.ResponseWriter, _ *http.Request, _ string, _ bool) bool { w.WriteHeader(500); return true }},
		{"503", func(w http.ResponseWriter, _ *http.Request, _ string, _ bool) bool { w.WriteHeader(503); return true }},
		{"slow", func(w http.ResponseWriter, _ *http.Request, _ string, _ bool) bool {
			time.Sleep(6 * time.Second)
			w.WriteHeader(404)
			return true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "slow" && testing.Short() {
				t.Skip("slow verify takes 6 s a reservation")
			}
			p, shop := ra12PendingSale(t, 1, true)
			shop.setVerify(c.v)
			ra12Reconcile(t, p, "act_rv", time.Now().Add(time.Minute))
			k := p.SKUStatus(t, "act_rv")
			if k.Pending != 1 || !k.OK {
				t.Fatalf("verify %s: status %+v, want the reservation left pending", c.name, k)
			}
			shop.setVerify(nil)
			ra12Reconcile(t, p, "act_rv", time.Now().Add(time.Minute))
			orders, _ := shop.counts()
			if k := p.SKUStatus(t, "act_rv"); k.Pending != 0 || k.Confirmed != int64(orders) {
				t.Fatalf("after verify recovered: %+v, shop %d orders", k, orders)
			}
		})
	}
}

// TestRA12QueueWorkerFollowsShopRedirect: a legacy shop answers a buy
// whose session expired with 302 to its login page. In sync mode the
// proxy reads the 302 (no order, unit not confirmed); the queue worker's
// net/http client follows it, reads the login page's 200 and confirms a
// unit the shop holds no order for (README: the worker sends the buyer's
// own request, "a bearer token in the request may have expired by the
// time the worker sends it").
func TestRA12QueueWorkerFollowsShopRedirect(t *testing.T) {
	const n = 5
	r := StartRedis(t)
	shop := ra12StartShop(t, 0)
	shop.redirect.Store(true)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		Activities: []Activity{{ID: "act_rq", Stock: 10, Mode: "queue"}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_rq")
	p.StartQueue(t)
	for i := 0; i < n; i++ {
		if res := ra12Buy(p.Addr, "act_rq", fmt.Sprintf("q%d", i), "", 5*time.Second); res.Code != "QUEUED" {
			t.Fatalf("buyer %d: %d %s", i, res.Status, res.Body)
		}
	}
	Eventually(t, 10*time.Second, "every queued buy sent", func() bool { return shop.received.Load() >= n })
	time.Sleep(500 * time.Millisecond)
	k := p.SKUStatus(t, "act_rq")
	orders, _ := shop.counts()
	t.Logf("status %+v, shop orders %d", k, orders)
	if k.Confirmed != int64(orders) {
		t.Fatalf("the shop answered every buy 302 (to its login page) and holds %d orders; Redis confirmed %d", orders, k.Confirmed)
	}
}

// TestRA12SyncShopRedirectHeld is the sync-mode control of
// TestRA12QueueWorkerFollowsShopRedirect: the proxy reads the shop's 302
// itself (an unknown outcome with verify.url: 504, pending), and the
// reconciler releases it (verify: 404). Holds.
func TestRA12SyncShopRedirectHeld(t *testing.T) {
	r := StartRedis(t)
	shop := ra12StartShop(t, 0)
	shop.redirect.Store(true)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		Activities: []Activity{{ID: "act_rs2", Stock: 10}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_rs2")
	res := ra12Buy(p.Addr, "act_rs2", "s1", "", 5*time.Second)
	t.Logf("answer %d %s", res.Status, res.Body)
	if !ra12SpecCode(res) || res.Code == "WIN" {
		t.Fatalf("a buy the shop answered 302: %d %s", res.Status, res.Body)
	}
	ra12Reconcile(t, p, "act_rs2", time.Now().Add(time.Hour))
	if k := p.SKUStatus(t, "act_rs2"); k.Confirmed != 0 || k.Pending != 0 || !k.OK {
		t.Fatalf("status %+v, want nothing confirmed nor pending", k)
	}
}
