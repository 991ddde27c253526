package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// re15Parse renders o with key_ttl_after_end ttl on every activity and
// parses it (defaults and validation included).
func re15Parse(t *testing.T, o e2e.Options, ttl time.Duration) *config.Config {
	t.Helper()
	y := strings.ReplaceAll(o.YAML(t), "    shards: ", "    key_ttl_after_end: "+ttl.String()+"\n    shards: ")
	cfg, err := rr14Parse(t, y)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// The operator extends a running sale by reload (SIGHUP): `end` three hours
// later, key_ttl_after_end 1h as in the file (valid: at least
// pending_timeout 10m + 5m). The keys were written by the preheat with
// the old end, and every instance's reconciler runs on (serve's background
// pass): nothing moved them. They expire an hour after the *old* end,
// two hours before the new one: mid-sale the stock, the reservations
// pending at the shop and the buyers' holdings vanish, buys are answered
// NOT_READY, a `preheat` then loads the whole stock again (units sold
// twice, buyers buying twice) and `status` says "not preheated", OK. The
// config validation that keeps keys alive past the last settlement
// (key_ttl_after_end ≥ pending_timeout + 5m) is only true of the file the
// preheat ran with. After a reload that moves `end` later, the keys must
// expire no sooner than the new end + key_ttl_after_end.
func TestRE15ReloadExtendingEndKeepsTheKeys(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	end := time.Now().Add(time.Hour)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		Activities: []e2e.Activity{{ID: "re15x", Stock: 10, Shards: 2, End: end}}}
	cfg := re15Parse(t, opts, time.Hour)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "re15x")

	// A winner, and a buy the shop never answers (pending, for the reconciler).
	if b := e2e.Buy(p.Addr, "re15x", "alice"); b.Code != "WIN" {
		t.Fatalf("alice = %d %s %s", b.Status, b.Code, b.Body)
	}
	release := shop.Hang("bob")
	defer release()
	if b := e2e.Buy(p.Addr, "re15x", "bob"); b.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("bob = %d %s %s", b.Status, b.Code, b.Body)
	}

	// The reload: end three hours later (listen addresses as running).
	opts.Activities[0].End = end.Add(3 * time.Hour)
	y := strings.ReplaceAll(opts.YAML(t), "    shards: ", "    key_ttl_after_end: 1h\n    shards: ")
	y = replaceListen(y, cfg)
	next, err := rr14Parse(t, y)
	if err != nil {
		t.Fatal(err)
	}
	if err := rr14Reload(p, next); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// serve's background reconciler pass, with the running file.
	rec := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rec.Run(ctx, []*config.Activity{next.Activity("re15x")}, true, time.Now()); err != nil {
		t.Fatalf("reconcile: %v", err)
	}

	want := store.ExpireAt(next.Activity("re15x"))
	keys := []string{p.Store.MetaKey("re15x")}
	for _, sk := range p.Store.SKUKeys("re15x", e2e.SKU, 2).Shards {
		keys = append(keys, sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Epoch)
	}
	now := time.Now().UnixMilli()
	for _, k := range keys {
		v, err := r.Node.Do("PTTL", k)
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		ms, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if ms == -2 {
			continue // not created on this shard (no buyer homed there)
		}
		if at := now + ms; ms < 0 || at < want-60_000 {
			t.Errorf("%s expires at %s, %s before the new end + key_ttl_after_end (%s): the sale runs until %s, a reservation pending at its end is settled up to %s",
				k, time.UnixMilli(at).UTC().Format(time.RFC3339), time.Duration(want-at)*time.Millisecond,
				time.UnixMilli(want).UTC().Format(time.RFC3339), next.Activity("re15x").End.UTC().Format(time.RFC3339),
				next.Activity("re15x").End.Add(next.Activity("re15x").PendingTimeout).UTC().Format(time.RFC3339))
		}
	}
}

// replaceListen gives y the running config's listen addresses (a reload
// keeps them; the harness picks new free ports per rendering).
func replaceListen(y string, running *config.Config) string {
	lines := strings.Split(y, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "listen: "):
			lines[i] = "listen: " + strconv.Quote(running.Listen)
		case strings.HasPrefix(l, "  listen: "):
			lines[i] = "  listen: " + strconv.Quote(running.Admin.Listen)
		}
	}
	return strings.Join(lines, "\n")
}
