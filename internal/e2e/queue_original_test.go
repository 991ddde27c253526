package e2e_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// qoBuy is one buyer's request as a legacy shop needs it to place the
// order: its session cookie, a coupon in the query, an app header and the
// delivery address in a JSON body.
func qoBuy(addr, act, user string, i int) e2e.Resp {
	return e2e.Do(nil, addr, e2e.Req{
		URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy?coupon=c" + fmt.Sprint(i),
		Header: [][2]string{{"X-User-Id", user}, {"Cookie", "sid=sess-" + user + "; theme=dark"},
			{"X-Client", "app-" + user}, {"Content-Type", "application/json"}},
		Body: []byte(fmt.Sprintf(`{"address":"street %d","note":"gift wrap ü"}`, i)),
	})
}

// qoWantConfirmed fails unless every token ends confirmed within 10 s.
func qoWantConfirmed(t *testing.T, addr string, toks []string) {
	t.Helper()
	for i, res := range rqAwaitSettled(addr, toks, 10*time.Second) {
		if res.State != store.StateConfirmed {
			t.Errorf("token %s: %s, want confirmed", toks[i], res)
		}
	}
}

// qoWantOriginal fails unless the shop's buy of each user carried that
// buyer's own request: body, cookie, query, app header, X-Forwarded-For,
// and a signature that verifies over the request line it received.
func qoWantOriginal(t *testing.T, shop *e2e.Shop, users map[string]int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range shop.Requests() {
		user := r.Header.Get("X-Seckill-User")
		i, ok := users[user]
		if r.Header.Get("X-Seckill-Token") == "" || !ok {
			continue
		}
		seen[user] = true
		if want := fmt.Sprintf(`{"address":"street %d","note":"gift wrap ü"}`, i); string(r.Body) != want {
			t.Errorf("%s: the shop got body %q, want the buyer's %q", user, r.Body, want)
		}
		if c := r.Header.Get("Cookie"); !strings.Contains(c, "sid=sess-"+user) || !strings.Contains(c, "theme=dark") {
			t.Errorf("%s: the shop got Cookie %q, want the buyer's session cookie", user, c)
		}
		if q, _ := url.ParseQuery(r.Query); q.Get("coupon") != fmt.Sprint("c", i) {
			t.Errorf("%s: the shop got query %q, want coupon=c%d", user, r.Query, i)
		}
		if h := r.Header.Get("X-Client"); h != "app-"+user {
			t.Errorf("%s: the shop got X-Client %q", user, h)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: the shop got Content-Type %q", user, ct)
		}
		if xff := r.Header.Get("X-Forwarded-For"); !strings.Contains(xff, "127.0.0.1") {
			t.Errorf("%s: the shop got X-Forwarded-For %q, want the buyer's address", user, xff)
		}
		if r.Header.Get("Connection") == "close" && len(r.Header["Connection"]) > 1 {
			t.Errorf("%s: hop-by-hop Connection headers reached the shop: %q", user, r.Header["Connection"])
		}
	}
	for user := range users {
		if !seen[user] {
			t.Errorf("the shop never got %s's buy", user)
		}
	}
	for _, o := range shop.Orders() {
		if _, ok := users[o.User]; ok && !o.SigOK {
			t.Errorf("%s: signature did not verify over %s %s: %v", o.User, o.Method, o.Target, o.SigErr)
		}
	}
}

// TestQueueSendsTheBuyersOwnRequest: in queue mode the worker sends the
// shop what the buyer sent (body, cookies, query, headers), as sync mode
// does: a legacy shop places the order from them (the session that says
// who is logged in, the delivery address). A request rebuilt from the
// route alone lost them, and the shop refused or misfiled every queued
// order.
func TestQueueSendsTheBuyersOwnRequest(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "qo", Stock: 10, Shards: 2, Mode: "queue"}}}, nil)
	a := p.Activity(t, "qo")
	p.StartQueue(t)

	users := map[string]int{}
	var toks []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 8 {
		user := fmt.Sprint("qo-buyer-", i)
		users[user] = i
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := qoBuy(p.Addr, "qo", user, i)
			if got.Code != "QUEUED" {
				t.Errorf("%s: %d %s, want 202 QUEUED", user, got.Status, got.Body)
				return
			}
			mu.Lock()
			toks = append(toks, got.Token())
			mu.Unlock()
		}()
	}
	wg.Wait()
	qoWantConfirmed(t, p.Addr, toks)
	qoWantOriginal(t, shop, users)
	rqWantStock(t, opsStore(t, p.Cfg), a)
}

// TestQueueRefusesARequestTooLargeToKeep: the queue keeps each waiting
// buyer's request in Redis, so a request above queue.max_request_bytes is
// refused before anything is reserved (400, stock untouched), rather than
// queued and sent without what made it too large.
func TestQueueRefusesARequestTooLargeToKeep(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "qb", Stock: 3, Shards: 1, Mode: "queue"}}},
		func(c *config.Config) { c.Activities[0].Queue.MaxRequestBytes = 2048 })
	a := p.Activity(t, "qb")
	p.StartQueue(t)

	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/qb/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", "big"}, {"Content-Type", "application/json"}},
		Body:   []byte(`{"note":"` + strings.Repeat("x", 3000) + `"}`)})
	if got.Status != http.StatusBadRequest || got.Code != "BAD_REQUEST" || !strings.Contains(string(got.Body), "max_request_bytes") {
		t.Fatalf("a 3 KB buy with queue.max_request_bytes 2048: %d %s, want 400 BAD_REQUEST naming the bound", got.Status, got.Body)
	}
	if k := rqWantStock(t, opsStore(t, p.Cfg), a); k.Remaining != 3 {
		t.Fatalf("after the refused buy: %+v, want all 3 units on sale", k)
	}
	// A buyer just under the bound is queued and sent whole.
	if got := qoBuy(p.Addr, "qb", "small", 1); got.Code != "QUEUED" {
		t.Fatalf("a small buy: %d %s", got.Status, got.Body)
	}
	e2e.Eventually(t, 5*time.Second, "the small buy at the shop", func() bool { return len(shop.Orders()) == 1 })
	qoWantOriginal(t, shop, map[string]int{"small": 1})
}

// TestOverflowQueueSendsTheBuyersOwnRequest: a sync winner the shop has no
// room for (upstream.max_inflight, overflow: queue) is sent later by a
// queue worker; it too carries the buyer's own request, as it would have
// had there been room.
func TestOverflowQueueSendsTheBuyersOwnRequest(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 5 * time.Second,
		UpstreamExtra: []string{"max_inflight: 1", "overflow: queue"},
		Activities:    []e2e.Activity{{ID: "qs", Stock: 5, Shards: 1}}}, nil)
	a := p.Activity(t, "qs")
	p.StartQueue(t)

	release := shop.Hang("holder")
	defer release()
	held := make(chan e2e.Resp, 1)
	go func() { held <- qoBuy(p.Addr, "qs", "holder", 0) }()
	e2e.Eventually(t, 3*time.Second, "the holder's buy at the shop", func() bool { return shop.SeenBuy("holder") })

	got := qoBuy(p.Addr, "qs", "spilled", 7)
	if got.Code != "QUEUED" {
		t.Fatalf("a winner past max_inflight 1 with overflow: queue: %d %s, want 202 QUEUED", got.Status, got.Body)
	}
	release()
	if h := <-held; h.Code != "WIN" {
		t.Fatalf("the holder: %d %s", h.Status, h.Body)
	}
	for _, res := range rqAwaitSettled(p.Addr, []string{got.Token()}, 10*time.Second) {
		if res.State != "confirmed" {
			t.Fatalf("the spilled winner: %s, want confirmed", res)
		}
	}
	qoWantOriginal(t, shop, map[string]int{"holder": 0, "spilled": 7})
	rqWantStock(t, opsStore(t, p.Cfg), a)
}
