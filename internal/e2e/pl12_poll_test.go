package e2e_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestPL12ReservationPollRedisDown: the reservation poll with Redis gone is
// the SPEC's 503 STORE_UNAVAILABLE (code, Retry-After), as every other
// answer the proxy makes when Redis cannot be read; it said
// {"error":"state unavailable"} (red team rc12's note).
func TestPL12ReservationPollRedisDown(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 200 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "pl12", Stock: 5, Shards: 1}}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "pl12")
	won := e2e.Buy(p.Addr, "pl12", "pl12-u")
	tok := won.Token()
	if tok == "" {
		t.Fatalf("buy: %d %s", won.Status, won.Body)
	}
	r.Node.Kill()
	got := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
	if got.Status != 503 || got.Code != "STORE_UNAVAILABLE" || got.Header["Retry-After"] == "" {
		t.Errorf("poll with Redis down: %d %s (Retry-After %q), want 503 STORE_UNAVAILABLE with Retry-After", got.Status, got.Body, got.Header["Retry-After"])
	}
}
