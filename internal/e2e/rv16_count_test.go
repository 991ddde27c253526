package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// countServer is a shop's verify.count_url: the units of sku it holds in
// orders, a bundle's items included (X-Seckill-Items "a:1,b:2").
func countServer(t *testing.T, shop *e2e.Shop) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sku := req.URL.Query().Get("sku")
		n := 0
		for _, o := range shop.Orders() {
			if o.Items == "" {
				if o.SKU == sku {
					q, _ := strconv.Atoi(o.Qty)
					n += max(q, 1)
				}
				continue
			}
			for _, it := range strings.Split(o.Items, ",") {
				if id, qty, _ := strings.Cut(it, ":"); id == sku {
					q, _ := strconv.Atoi(qty)
					n += q
				}
			}
		}
		fmt.Fprintf(w, `{"count": %d}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/count?sku={sku}"
}

func unsettledBySKU(rep reservation.Report) map[string]int64 {
	got := map[string]int64{}
	for _, ar := range rep.Activities {
		for _, k := range ar.SKUs {
			got[k.ID] = k.Unsettled
		}
	}
	return got
}

// stuck fails the test unless r is a winner left pending: the shop's answer
// lost (504 UPSTREAM_TIMEOUT).
func stuck(t *testing.T, who string, r e2e.Resp) {
	t.Helper()
	if r.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("%s: %d %s, want UPSTREAM_TIMEOUT", who, r.Status, r.Body)
	}
}

// runPass runs one reconcile pass over a at the time at; the report comes
// with its JSON for failure messages.
func runPass(t *testing.T, rec *reservation.Reconciler, a *config.Activity, repair bool, at time.Time) (reservation.Report, []byte) {
	t.Helper()
	rep, err := rec.Run(context.Background(), []*config.Activity{a}, repair, at)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(rep)
	return rep, js
}

// actionsOf is each stale finding's action by its user (the first activity).
func actionsOf(rep reservation.Report) map[string]string {
	out := map[string]string{}
	for _, fd := range rep.Activities[0].Stale {
		out[fd.User] = fd.Action
	}
	return out
}

// countSale is a sale whose verify.count_url counts the shop's orders
// (countServer), preheated: SKU a, and b with a bundle route when bundle;
// on the proxy's clock now when given.
func countSale(t *testing.T, id string, bundle bool, now func() time.Time) *bundleFixture {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	act := e2e.Activity{ID: id, Shards: 2, PerUserLimit: 3, SKUs: []config.SKU{{ID: "a", Stock: 10}}}
	if bundle {
		act.BundleRoute, act.SKUs = bundleRoute, append(act.SKUs, config.SKU{ID: "b", Stock: 10})
	}
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 300 * time.Millisecond,
		Activities: []e2e.Activity{act}}.Config(t)
	cfg.Activities[0].Verify.CountURL = countServer(t, shop)
	var p *e2e.Proxy
	if now != nil {
		p = e2e.StartProxyClock(t, cfg, now)
	} else {
		p = e2e.StartProxy(t, cfg)
	}
	p.Preheat(t, id)
	return &bundleFixture{shop: shop, p: p}
}

// Red team rv16, on decisions §46 (settleByCount): with no confirmed
// reservation to check verify.url against, count_url decides its 404s.
//   - A report-only pass settles nothing: a "would-release" stays in the
//     SKU's unsettled units, as everywhere else in the report (it was
//     subtracted, so the report read as if the pass had released it).
//   - A would-confirmed bundle's units are its items' (they were counted
//     under "*", so the shop's count of an item read as an order verify
//     denied, and a true 404 was alerted as verify untrusted).
//   - A repairing pass then confirms the bundle, releases the lost buy,
//     and leaves nothing unsettled.
func TestRV16CountReportOnlyKeepsUnsettledAndBundleUnits(t *testing.T) {
	bf := countSale(t, "rv16", true, nil)
	shop, p := bf.shop, bf.p
	shop.AnswerAfterOrder("kept", http.StatusBadGateway) // the shop holds the bundle
	shop.Answer("lost", http.StatusServiceUnavailable)   // it holds no order of a
	stuck(t, "kept", bf.bundle("rv16", "kept", itemsJSON("a:1", "b:2")))
	stuck(t, "lost", bf.single("rv16", "a", "lost"))
	a := p.Activity(t, "rv16")
	at := time.Now().Add(a.PendingTimeout + time.Minute)
	rec := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop())

	rep, js := runPass(t, rec, a, false, at)
	actions := actionsOf(rep)
	if actions["kept"] != "would-confirm" || actions["lost"] != "would-release" {
		t.Fatalf("report-only actions %v; report %s", actions, js)
	}
	if al := strings.Join(rep.Activities[0].Alerts, "\n"); strings.Contains(al, "count_url") {
		t.Errorf("the would-confirmed bundle's item a read as an order verify denied: %s", al)
	}
	if got := unsettledBySKU(rep); got["a"] != 2 || got["b"] != 2 {
		t.Errorf("report-only unsettled %v, want a:2 (the bundle's and the lost buy's) b:2: nothing was settled; report %s", got, js)
	}
	if st := bf.stock(t, "rv16"); st["a"].Pending != 2 || st["b"].Pending != 2 {
		t.Fatalf("a report-only pass changed Redis: %+v", st)
	}

	rep, js = runPass(t, rec, a, true, at)
	maps.Copy(actions, actionsOf(rep))
	if actions["kept"] != "confirmed" || actions["lost"] != "released" {
		t.Fatalf("repair actions %v; report %s", actions, js)
	}
	if got := unsettledBySKU(rep); got["a"] != 0 || got["b"] != 0 {
		t.Errorf("repair left unsettled %v; report %s", got, js)
	}
	if st := bf.stock(t, "rv16"); st["a"].Confirmed != 1 || st["b"].Confirmed != 2 || st["a"].Remaining != 9 || st["a"].Pending+st["b"].Pending != 0 {
		t.Fatalf("after repair: %+v", st)
	}
}

// A bundle verify.url said absent, with no confirmed reservation to check
// verify against, is left (count_url counts SKUs: its items' counts would
// decide it only for a shop that counts bundles' items under their SKUs,
// which nothing checks), its units unsettled under its items' SKUs, and
// its finding says so (it said "decided by count_url after the pass",
// which never happened). Once a buy is confirmed, a pass checks verify
// against it and releases the bundle.
func TestRV16CountBundleLeftUntilAConfirm(t *testing.T) {
	bf := countSale(t, "rv16b", true, nil)
	shop, p := bf.shop, bf.p
	shop.Answer("u", http.StatusServiceUnavailable) // the shop holds no order
	stuck(t, "u", bf.bundle("rv16b", "u", itemsJSON("a:1", "b:2")))
	a := p.Activity(t, "rv16b")
	rec := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop())
	at := time.Now().Add(a.PendingTimeout + time.Minute)
	rep, js := runPass(t, rec, a, true, at)
	st := bf.stock(t, "rv16b")
	got := unsettledBySKU(rep)
	if st["a"].Pending != 1 || st["b"].Pending != 2 || got["a"] != 1 || got["b"] != 2 {
		t.Fatalf("nothing confirmed to check verify against: the bundle is left, unsettled a:1 b:2; got %+v, unsettled %v; report %s", st, got, js)
	}
	if fd := rep.Activities[0].Stale; len(fd) != 1 || fd[0].Action != "left" || !strings.Contains(fd[0].Detail, "not bundles") {
		t.Fatalf("the bundle's finding: %s", js)
	}

	if b := bf.single("rv16b", "a", "v"); b.Code != "WIN" {
		t.Fatalf("v: %d %s", b.Status, b.Body)
	}
	rep, js = runPass(t, rec, a, true, at)
	st = bf.stock(t, "rv16b")
	if st["a"].Pending+st["b"].Pending != 0 || st["a"].Confirmed != 1 || st["b"].Remaining != 10 {
		t.Fatalf("with v's confirm to check verify against, the bundle is released whole: %+v; report %s", st, js)
	}
}
