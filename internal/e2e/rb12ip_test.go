package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRB12IPv6BlockEvadedWithinOwnPrefix: the per-IP limit counts an IPv6
// client per /64 (limits.ipv6_prefix, default 64: "an IPv6 subscriber owns
// a /64: rotating the interface id must not buy new buckets",
// admission/state.go limiters.client), but the IP blocklist matches the
// exact address (admission/admission.go checkWho: b.ip[r.IP]; admin
// ValidateListValues takes only a single address, no prefix). An operator
// who blocks a scalper's address (`seckill-proxy block --ip 2001:db8:1:2::10`)
// has blocked one of the 2^64 addresses the scalper owns: the next buy
// from 2001:db8:1:2::11 — the same subscriber, the same per-IP bucket — is
// admitted and wins. Want: an IPv6 blocklist entry covers its /ipv6_prefix
// (or `--ip` takes a prefix and the address is cut as the limiter cuts it).
func TestRB12IPv6BlockEvadedWithinOwnPrefix(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	// The harness connects from 127.0.0.1, the default trusted proxy: the
	// client address is X-Forwarded-For's.
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rb12ip", Stock: 10, Shards: 1}}}.Config(t))
	p.Preheat(t, "rb12ip")

	blocked := "2001:db8:1:2::10"
	vals, err := admin.ValidateListValues(store.BlockIP, []string{blocked})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Store.BlockAdd(ctx, store.BlockIP, vals, 10*time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	buy := func(user, ip string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rb12ip/" + e2e.SKU + "/buy",
			Header: [][2]string{{"X-User-Id", user}, {"X-Forwarded-For", ip}}})
	}
	// Control: the blocked address itself is refused (once the refresher has it).
	e2e.Eventually(t, 5*time.Second, "block obeyed", func() bool {
		return buy("rb12-ctl", blocked).Code == "BLOCKED"
	})
	if _, err := admin.ValidateListValues(store.BlockIP, []string{"2001:db8:1:2::/64"}); err == nil {
		t.Logf("a prefix is accepted by the blocklist")
	} else {
		t.Logf("a prefix is refused by the blocklist: %v", err)
	}
	got := buy("rb12-rot", "2001:db8:1:2::11")
	t.Logf("same /64, next interface id: %d %s", got.Status, got.Code)
	if got.Code != "BLOCKED" {
		t.Errorf("BUG: %s is blocked, but a buy from 2001:db8:1:2::11 (same /64, the per-IP limiter's one client) is %d %s, not 403 BLOCKED",
			blocked, got.Status, got.Code)
	}
}
