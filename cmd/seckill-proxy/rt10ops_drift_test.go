package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team round 10, operator errors: the config edited after preheat.

// rt10opsConfig writes (or rewrites, when path is set) a config for
// activity "rt10" with the given skus (YAML flow list) starting at start.
func rt10opsConfig(t *testing.T, path, redisAddr, shopURL, skus string, start time.Time, extra string) string {
	t.Helper()
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms }
redis: { addrs: [%q], timeout: 1s }
activities:
  - id: rt10
    start: %s
    end: %s
    skus: %s
    shards: 2
    pending_timeout: 3s
    verify: { url: %q }
%s`, redistest.FreePort(t), redistest.FreePort(t), shopURL, redisAddr,
		start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), skus,
		shopURL+"/internal/orders?token={token}", extra)
	if path == "" {
		path = filepath.Join(t.TempDir(), "seckill.yaml")
	}
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// rt10opsNoOrders is a shop that holds no order (verify answers 404).
func rt10opsNoOrders(t *testing.T) string {
	t.Helper()
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	t.Cleanup(shop.Close)
	return shop.URL
}

// A SKU dropped from the config during or after the sale (recalled, sold
// out, a typo fixed) still holds reservations in Redis. The reconciler
// walks only the config's SKUs (reservation/reconcile.go activity: skuIDs
// from a.SKUs), and status shows only them: a reservation of the dropped
// SKU left pending (a crash, a shop timeout) is never settled. Here the
// shop says it holds no such order, so `reconcile --repair` must release
// it (or at least name it and exit 1); instead it exits 0, says nothing,
// and the unit stays pending for ever, while `status` exits 0 with every
// SKU "ok". Preheat already looks at the SKUs Redis holds, not the new
// config's ("a SKU dropped from the config would otherwise be wiped
// unseen", store/activity.go); reconcile and status do not.
func TestRT10OpsDroppedSKUPendingNeverReconciled(t *testing.T) {
	srv := redistest.Start(t)
	shop := rt10opsNoOrders(t)
	start := time.Now().Add(-time.Minute)
	path := rt10opsConfig(t, "", srv.Addr, shop, "[{ id: keep, stock: 5 }, { id: gone, stock: 5 }]", start, "")
	want(t, 0, "rt10: created", "preheat", "-c", path)
	cfg, st := openStore(t, path)
	a := &cfg.Activities[0]
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "rt10", SKU: "gone", User: "u1", Qty: 1, Limit: 1,
		Shards: 2, NowMs: time.Now().Add(-time.Hour).UnixMilli(), ExpireAt: store.ExpireAt(a), Stock: 5})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}

	// The operator drops SKU "gone" from the file.
	rt10opsConfig(t, path, srv.Addr, shop, "[{ id: keep, stock: 5 }]", start, "")
	code, out, errs := cliRun("reconcile", "-c", path, "--repair")
	res, ok, err := st.Lookup(context.Background(), r.Token, 2)
	if err != nil || !ok {
		t.Fatalf("lookup %s: %v %v", r.Token, ok, err)
	}
	said := strings.Contains(out+errs, r.Token.String()) || strings.Contains(out+errs, "gone")
	if res.State == store.StatePending && (code == 0 || !said) {
		scode, sout, _ := cliRun("status", "-c", path)
		t.Errorf("reservation %s of SKU \"gone\" (dropped from the config), pending for an hour, shop says no order: "+
			"reconcile --repair exit %d and it is still %s; it is never named\nreconcile stdout %q\nstderr %q\nstatus exit %d:\n%s",
			r.Token, code, res.State, out, errs, scode, sout)
	}
}

// The stock edited in the file after preheat, before the sale (5 → 50):
// nothing the runbook runs says that Redis still holds 5. `preflight`
// ("check everything a sale depends on ... preheated keys") reports
// "preheat rt10: preheated at ... by hand" as a pass, `status` prints
// initial 5 with "ok", and `serve` starts: the sale sells 5 units while
// the file says 50. The scheduler "never overwrites loaded stock" and
// preheat must be re-run by hand (README, Scheduled preheat), so the
// operator must be told. Want: a preflight check that is not a pass and
// names the difference.
func TestRT10OpsPreflightMissesStockEditedAfterPreheat(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "256mb")
	shop := rt10opsNoOrders(t)
	start := time.Now().Add(time.Hour)
	path := rt10opsConfig(t, "", srv.Addr, shop, "[{ id: s1, stock: 5 }]", start, "")
	want(t, 0, "rt10: created", "preheat", "-c", path)
	for _, edit := range []struct{ name, skus string }{
		{"stock 5 → 50", "[{ id: s1, stock: 50 }]"},
		{"SKU s1 renamed s2", "[{ id: s2, stock: 5 }]"},
	} {
		rt10opsConfig(t, path, srv.Addr, shop, edit.skus, start, "")
		code, out, errs := cliRun("preflight", "-c", path, "--json")
		var doc struct {
			Checks []map[string]string `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("preflight --json: %v\n%s%s", err, out, errs)
		}
		told := false
		var pre string
		for _, c := range doc.Checks {
			if c["name"] == "preheat rt10" {
				pre = c["result"] + ": " + c["detail"]
			}
			if c["result"] != "pass" && (strings.Contains(c["name"], "rt10") || strings.Contains(c["detail"], "stock")) {
				told = true
			}
		}
		if !told {
			t.Errorf("%s after preheat: preflight exit %d says nothing (preheat rt10 = %q); Redis still holds the old stock", edit.name, code, pre)
		}
	}
}

// The same for a whole activity dropped from the file (SIGHUP mid-sale,
// or the file cleaned up after the end while its pending reservations
// wait for pending_timeout): serve's background reconciler and the
// commands walk only the config's activities, so nothing ever settles
// them, and `reconcile --repair` / `status` exit 0 without a word.
func TestRT10OpsDroppedActivityPendingNeverReconciled(t *testing.T) {
	srv := redistest.Start(t)
	shop := rt10opsNoOrders(t)
	start := time.Now().Add(-time.Minute)
	second := fmt.Sprintf(`  - id: rt10b
    start: %s
    end: %s
    route: { path: "/other/{activity}/{sku}/buy" }
    skus: [{ id: s1, stock: 5 }]
    shards: 2
    pending_timeout: 3s
    verify: { url: %q }
`, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), shop+"/internal/orders?token={token}")
	path := rt10opsConfig(t, "", srv.Addr, shop, "[{ id: s1, stock: 5 }]", start, second)
	want(t, 0, "rt10b: created", "preheat", "-c", path)
	cfg, st := openStore(t, path)
	b := cfg.Activity("rt10b")
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "rt10b", SKU: "s1", User: "u1", Qty: 1, Limit: 1,
		Shards: 2, NowMs: time.Now().Add(-time.Hour).UnixMilli(), ExpireAt: store.ExpireAt(b), Stock: 5})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	rt10opsConfig(t, path, srv.Addr, shop, "[{ id: s1, stock: 5 }]", start, "")
	code, out, errs := cliRun("reconcile", "-c", path, "--repair")
	res, ok, err := st.Lookup(context.Background(), r.Token, 2)
	if err != nil || !ok {
		t.Fatalf("lookup %s: %v %v", r.Token, ok, err)
	}
	said := strings.Contains(out+errs, r.Token.String()) || strings.Contains(out+errs, "rt10b")
	if res.State == store.StatePending && (code == 0 || !said) {
		t.Errorf("reservation %s of activity rt10b (dropped from the config), pending for an hour, shop says no order: reconcile --repair exit %d, still %s, never named\n%s%s",
			r.Token, code, res.State, out, errs)
	}
}

// `preheat` of an activity whose keys would already have expired (end +
// key_ttl_after_end in the past: dates copied from last month's sale, a
// rehearsal config not updated) answers "rt10: created (1 SKUs, 5 units,
// 2 shards)", exit 0, and writes every key with a PEXPIREAT in the past:
// Redis deletes them at once. `status` then says "not preheated". Want
// preheat to refuse (exit 1 or 2) saying the activity is over, or at
// least not to claim it loaded the stock.
func TestRT10OpsPreheatOfExpiredActivitySaysCreated(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Now().Add(-30 * 24 * time.Hour)
	path := rt10opsConfig(t, "", srv.Addr, "http://127.0.0.1:1", "[{ id: s1, stock: 5 }]", start, "")
	code, out, errs := cliRun("preheat", "-c", path)
	_, sout, _ := cliRun("status", "-c", path)
	if code == 0 && strings.Contains(sout, "not preheated") {
		t.Errorf("preheat of an activity that ended a month ago: exit 0 %q, then status:\n%s(the keys were written already expired)", strings.TrimSpace(out+errs), sout)
	}
}
