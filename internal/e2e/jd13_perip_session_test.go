package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestJD13PerIPRotatingSessions: identity.user.session; one address
// rotating fresh sessions (each look-up takes the buy's per-IP token),
// sessions warmed from other addresses or on a shadow activity, made-up
// sessions the shop refuses, single buys and bundles: no more get past
// per_ip than its burst and rate allow.
func TestJD13PerIPRotatingSessions(t *testing.T) {
	who := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("sid")
		if err != nil || !strings.HasPrefix(c.Value, "u-") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"user_id": c.Value})
	}))
	t.Cleanup(who.Close)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second,
		User:   fmt.Sprintf(`{ session: { cookie: sid, url: %q } }`, who.URL+"/whoami"),
		Limits: "{ per_ip: { rate: 1, burst: 3 }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }",
		Activities: []e2e.Activity{
			{ID: "jd13so", Stock: 500, Shards: 1},
			{ID: "jd13ss", Stock: 500, Shards: 1, Mode: "shadow"},
			{ID: "jd13sb", Shards: 1, PerUserLimit: 3, SKUs: []config.SKU{{ID: "a", Stock: 100}, {ID: "b", Stock: 100}},
				BundleRoute: `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`},
		}}.Config(t))
	for _, a := range []string{"jd13so", "jd13ss", "jd13sb"} {
		p.Preheat(t, a)
	}
	buy := func(act, sid, ip string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Cookie", "sid=" + sid}, {"X-Forwarded-For", ip}}})
	}
	bundle := func(sid, ip string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/jd13sb/bundle",
			Header: [][2]string{{"Cookie", "sid=" + sid}, {"X-Forwarded-For", ip}, {"Content-Type", "application/json"}},
			Body:   []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`)})
	}
	var warmed []string
	for i := 0; i < 10; i++ {
		s := fmt.Sprintf("u-warm-%d", i)
		if i%2 == 0 {
			buy("jd13so", s, fmt.Sprintf("203.0.113.%d", 10+i))
		} else {
			buy("jd13ss", s, "198.51.100.99")
		}
		warmed = append(warmed, s)
	}
	const ip = "198.51.100.8"
	start := time.Now()
	passed := 0
	codes := map[string]int{}
	for i := 0; i < 36; i++ {
		var got e2e.Resp
		switch i % 4 {
		case 0:
			got = buy("jd13so", fmt.Sprintf("u-new-%d", i), ip)
		case 1:
			got = bundle(warmed[(i/4)%len(warmed)], ip)
		case 2:
			got = bundle(fmt.Sprintf("u-bnew-%d", i), ip)
		case 3:
			got = buy("jd13so", fmt.Sprintf("fake-%d", i), ip)
		}
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		codes[got.Code]++
		if got.Code != "RATE_LIMITED" {
			passed++
		}
	}
	el := time.Since(start).Seconds()
	allowed := 3 + int(el) + 1
	t.Logf("36 requests in %.2fs from %s: %v", el, ip, codes)
	if passed > allowed {
		t.Errorf("one address got %d requests past per_ip {rate 1, burst 3} in %.2fs (allowed about %d): %v", passed, el, allowed, codes)
	}
	if codes["WIN"] == 0 {
		t.Errorf("no buy won at all: %v", codes)
	}
}
