package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt10httpH2CShop is a Go shop served the way Go services that speak
// cleartext HTTP/2 are (h2c.NewHandler, as gRPC-gateway and connect-go set
// it up): an HTTP/1.1 request asking "Upgrade: h2c" is switched to HTTP/2
// (101) and then served as stream 1. A request with X-Seckill-Token is a
// buy: the order is created and answered 200 with its id.
type rt10httpH2CShop struct {
	URL    string
	mu     sync.Mutex
	orders map[string]string // token -> user
	http1  int               // buys that arrived over HTTP/1.x
}

func rt10httpStartH2CShop(t *testing.T) *rt10httpH2CShop {
	t.Helper()
	s := &rt10httpH2CShop{orders: map[string]string{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tok := r.Header.Get("X-Seckill-Token")
		if tok == "" {
			w.Header().Set("X-Shop", "pass")
			w.WriteHeader(200)
			return
		}
		s.mu.Lock()
		s.orders[tok] = r.Header.Get("X-Seckill-User")
		if r.ProtoMajor == 1 {
			s.http1++
		}
		n := len(s.orders)
		s.mu.Unlock()
		w.Header().Set("X-Shop", "order")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": "ord-" + strconv.Itoa(n), "token": tok})
	})
	srv := httptest.NewUnstartedServer(h2c.NewHandler(h, &http2.Server{}))
	srv.Start()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *rt10httpH2CShop) Orders() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.orders {
		out[k] = v
	}
	return out
}

// rt10httpH2CUpgrade are the header lines of an h2c upgrade request
// (RFC 7540 §3.2): the hop-by-hop fields a client asks its next hop with.
const rt10httpH2CUpgrade = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"

// TestRT10HTTPUpgradeH2CBuyOversells: SPEC §5 / §6 — the shop's answer
// settles a winner ("shop answers 2xx → confirmed; any other status →
// released"), and never more units are sold than initial. The proxy
// forwards a buyer's hop-by-hop fields as they came (Connection, Upgrade,
// HTTP2-Settings; RFC 9110 §7.6.1: an intermediary MUST remove them), so a
// buyer can ask the shop itself to switch the proxy's upstream connection
// to HTTP/2. A Go shop behind h2c.NewHandler does: it answers 101
// Switching Protocols and serves the buy as HTTP/2 stream 1 — the order is
// created. The proxy reads the 101 as the shop's final answer, non-2xx:
// without verify.url it releases the unit, and puts the (now HTTP/2)
// connection back in its pool. Once some other buy has used that
// connection up, the next buyer wins the same unit again: two orders at
// the shop for a 1-unit SKU.
func TestRT10HTTPUpgradeH2CBuyOversells(t *testing.T) {
	redis := e2e.StartRedis(t)
	shop := rt10httpStartH2CShop(t)
	o := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "h2one", Stock: 1, Shards: 1, NoVerify: true}, {ID: "h2other", Stock: 10, Shards: 1, NoVerify: true}}}
	p := e2e.StartProxy(t, o.Config(t))
	p.Preheat(t, "h2one")
	p.Preheat(t, "h2other")
	ordersOf := func(act string) int {
		n := 0
		for tok := range shop.Orders() {
			if strings.HasPrefix(tok, act+".") {
				n++
			}
		}
		return n
	}

	rs := rt10httpSend(t, p.Addr, rt10httpBuy("h2one", "mallory", "HTTP/1.1", rt10httpH2CUpgrade, "{}"), 1)
	if len(rs) == 0 || rs[0].Err != nil {
		t.Fatalf("mallory: no answer: %+v", rs)
	}
	t.Logf("mallory (h2c upgrade on the buy): %d %s", rs[0].Status, rs[0].Body)
	// The shop's handler has run for mallory (stream 1) by the time the
	// proxy read the 101; give it a moment to record.
	e2e.Eventually(t, 2*time.Second, "the shop takes mallory's order", func() bool { return ordersOf("h2one") >= 1 })
	k := p.SKUStatus(t, "h2one")
	t.Logf("after mallory: status %+v, shop orders %v", k, shop.Orders())
	if k.Remaining != 0 {
		t.Errorf("the shop created mallory's order (answered over HTTP/2 after the 101), yet the proxy put the unit back on sale: %+v", k)
	}

	// Any buy (here another activity's) takes the pooled HTTP/2 connection
	// next and uses it up; then bob buys on a fresh one.
	z := e2e.Buy(p.Addr, "h2other", "zed")
	t.Logf("zed (plain buy, next on the pooled connection): %d %s", z.Status, z.Body)
	b := e2e.Buy(p.Addr, "h2one", "bob")
	t.Logf("bob (plain buy): %d %s", b.Status, b.Body)
	if n := ordersOf("h2one"); n > 1 {
		t.Errorf("OVERSELL: stock 1, the shop holds %d orders for it %v (mallory's h2c-upgraded buy was released, then sold again)", n, shop.Orders())
	}
}

// TestRT10HTTPUpgradeH2CPoisonsTheNextWinner: same shop, verify.url set
// (so the 101 leaves mallory's own unit pending instead of releasing it).
// The proxy's buy client takes the 101 for a final answer and puts the
// connection — now an HTTP/2 connection at the shop — back into its pool
// (the 101 says "Connection: Upgrade", not "close"). The next winner, an
// ordinary buyer, is written on it as HTTP/1.1: the shop never runs his
// buy, and he is told UPSTREAM_TIMEOUT with his unit held pending. Want:
// an ordinary buy after anyone's Upgrade request wins and reaches the shop.
func TestRT10HTTPUpgradeH2CPoisonsTheNextWinner(t *testing.T) {
	redis := e2e.StartRedis(t)
	shop := rt10httpStartH2CShop(t)
	o := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "h2many", Stock: 10, Shards: 1}}}
	p := e2e.StartProxy(t, o.Config(t))
	p.Preheat(t, "h2many")

	rs := rt10httpSend(t, p.Addr, rt10httpBuy("h2many", "mallory", "HTTP/1.1", rt10httpH2CUpgrade, "{}"), 1)
	if len(rs) == 0 || rs[0].Err != nil {
		t.Fatalf("mallory: no answer: %+v", rs)
	}
	t.Logf("mallory (h2c upgrade on the buy): %d %s", rs[0].Status, rs[0].Body)
	time.Sleep(50 * time.Millisecond)

	for _, user := range []string{"bob", "carol"} {
		b := e2e.Buy(p.Addr, "h2many", user)
		got := false
		for _, u := range shop.Orders() {
			got = got || u == user
		}
		if b.Code != "WIN" || !got {
			t.Errorf("%s, an ordinary buyer after mallory's upgrade: %d %s; shop has his order: %v (want a win placed at the shop)", user, b.Status, b.Body, got)
		}
	}
	t.Logf("status %+v, shop orders %v", p.SKUStatus(t, "h2many"), shop.Orders())
}
