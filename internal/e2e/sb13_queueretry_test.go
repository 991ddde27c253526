package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestSB13QueueCutSendResentByNetHTTP: a queue worker sends the buyer's
// kept request with net/http. A buyer whose request carries an
// Idempotency-Key header (many client SDKs add one to every POST) makes
// that request "replayable" for net/http's Transport: when a reused
// connection is cut after the shop read the request, before any answer
// byte, the Transport sends the same buy again on another connection,
// inside the one client.Do, unseen by the worker. The worker's one send
// (one max_inflight slot, one claim) reaches the shop several times; a shop
// (or the balancer in front of it) that cut the connection while still
// working on the order gets the buy again at once, above max_inflight.
//
// Promised (README upstream.max_inflight; queue workers, 70de6eb): a send
// with no answer after the request may have left is an unknown outcome,
// its slot held one more upstream.timeout, the reservation left pending
// for the reconciler — sent once.
func TestSB13QueueCutSendResentByNetHTTP(t *testing.T) {
	sb13QueueCutSends(t, "Idempotency-Key")
}

// TestSB13QueueCutSendOnceControl is the same without the header: sent
// once, and the queue goes on after the cut (the slot held one more
// upstream.timeout, then the next entries sent).
func TestSB13QueueCutSendOnceControl(t *testing.T) {
	sb13QueueCutSends(t, "X-Unrelated")
}

func sb13QueueCutSends(t *testing.T, hdr string) {
	r := StartRedis(t)
	shop := StartShop(t)
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		UpstreamExtra: []string{"max_inflight: 1"},
		Activities:    []Activity{{ID: "act_sbq", Stock: 20, Mode: "queue", Pending: 30 * time.Second}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_sbq")
	buy := func(user string) {
		res := Do(nil, p.Addr, Req{URI: "/api/seckill/act_sbq/" + SKU + "/buy",
			Header: [][2]string{{"X-User-Id", user}, {hdr, "k-" + user}}})
		if res.Code != "QUEUED" {
			t.Fatalf("%s: %d %s", user, res.Status, res.Body)
		}
	}
	// A few ordinary buys first: the worker's Transport then holds idle
	// (reused) connections to the shop.
	for i := range 4 {
		buy(fmt.Sprintf("ok%d", i))
	}
	p.StartQueue(t)
	Eventually(t, 10*time.Second, "the first buys sent", func() bool { return len(shop.Orders()) == 4 })
	shop.Cut("cutme")
	buy("cutme")
	Eventually(t, 10*time.Second, "the cut buy sent", func() bool { return shop.SeenBuy("cutme") })
	time.Sleep(500 * time.Millisecond)
	n := 0
	for _, b := range shop.Buys() {
		if b.User == "cutme" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the shop received the cut buy %d times from one worker send (net/http replayed the POST: Idempotency-Key makes it replayable)", n)
	}
	buy("after0")
	buy("after1")
	Eventually(t, 10*time.Second, "the queue goes on after the cut send", func() bool { return len(shop.Orders()) == 6 })
}

// TestSB13QueueCutResendAboveMaxInflight: the same replay against a shop
// (behind a balancer that cuts the connection) still working on the cut
// buy: the replayed copy arrives while it works, so the shop works on two
// buys at once with max_inflight: 1.
func TestSB13QueueCutResendAboveMaxInflight(t *testing.T) {
	r := StartRedis(t)
	var mu sync.Mutex
	var cur, peak, got int
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		tok := q.Header.Get("X-Seckill-Token")
		if tok == "" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		mu.Lock()
		got++
		cur++
		peak = max(peak, cur)
		first := !seen[tok]
		seen[tok] = true
		mu.Unlock()
		if first && q.Header.Get("X-Seckill-User") == "cutme" {
			// The balancer cuts; the shop goes on with the order.
			go func() { time.Sleep(300 * time.Millisecond); mu.Lock(); cur--; mu.Unlock() }()
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		cur--
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": "o-" + tok})
	}))
	t.Cleanup(srv.Close)
	o := Options{Redis: r.Addrs, ShopURL: srv.URL, UpstreamTimeout: time.Second,
		UpstreamExtra: []string{"max_inflight: 1"},
		Activities:    []Activity{{ID: "act_sbm", Stock: 20, Mode: "queue", Pending: 30 * time.Second, NoVerify: true}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "act_sbm")
	buy := func(user string) {
		res := Do(nil, p.Addr, Req{URI: "/api/seckill/act_sbm/" + SKU + "/buy",
			Header: [][2]string{{"X-User-Id", user}, {"Idempotency-Key", "k-" + user}}})
		if res.Code != "QUEUED" {
			t.Fatalf("%s: %d %s", user, res.Status, res.Body)
		}
	}
	for i := range 4 {
		buy(fmt.Sprintf("ok%d", i))
	}
	p.StartQueue(t)
	Eventually(t, 10*time.Second, "the first buys sent", func() bool { mu.Lock(); defer mu.Unlock(); return got == 4 })
	buy("cutme")
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("shop received %d requests, peak %d at once", got, peak)
	if peak > 1 {
		t.Fatalf("the shop worked on %d buys at once with max_inflight 1 (the cut buy replayed by net/http while the shop still worked on it)", peak)
	}
}
