package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// A shadow activity: preheat and status act on its shadow copy (the real
// activity's keys stay untouched), and shadow-report prints what was
// recorded, in text and JSON.
func TestShadowCommands(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "    mode: shadow\n")
	want(t, 0, "kact~shadow: created (1 SKUs, 5 units, 4 shards)", "preheat", "-c", cfgPath)
	want(t, 0, "kact~shadow", "status", "-c", cfgPath, "--activity", "kact")
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	real := *a
	real.Mode = config.ModeSync
	if k := skuStatus(t, st, &real); k.Preheated {
		t.Fatalf("the real activity's stock was written: %+v", k)
	}
	if k := skuStatus(t, st, a.Shadow()); !k.OK || k.Initial != 5 {
		t.Fatalf("shadow stock: %+v", k)
	}

	exp := store.ExpireAt(a)
	recs := []store.ShadowRecord{
		{Code: "ADMITTED", Admitted: true, Status: 200, User: "u1", SKU: "sku1", Qty: 1, OrderID: "o1", DecisionUs: 900},
		{Code: "SOLD_OUT", Status: 200, User: "u1", SKU: "sku1", Qty: 1, DecisionUs: 120},
		{Code: "SOLD_OUT", Status: 410, User: "u2", SKU: "sku1", Qty: 1, DecisionUs: 130},
		{Code: "RATE_LIMITED", Status: 0, User: "u3", SKU: "sku1", Qty: 1, DecisionUs: 15},
	}
	for i := range recs {
		recs[i].Activity, recs[i].ExpireAt = a.Shadow().ID, exp
	}
	for i := 0; i < 4; i++ { // stock 5: the shop sold 6; u1 and u9 past the limit
		recs = append(recs, store.ShadowRecord{Activity: a.Shadow().ID, ExpireAt: exp, Code: "ALREADY_PURCHASED", Status: 201, User: "u9", SKU: "sku1", Qty: 1, DecisionUs: 2500})
	}
	if err := st.RecordShadow(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	out, _ := want(t, 0, "buys the proxy would have refused that the shop accepted: 5", "shadow-report", "-c", cfgPath, "--activity", "kact")
	for _, s := range []string{"shop's orders beyond the stock: 1 units", "users above per_user_limit (1) at the shop: 2 of 2 buyers (e.g. [u1 u9])",
		"ALREADY_PURCHASED", "none=1", "410=1", "p50 "} {
		if !contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	code, js, errs := cliRun("shadow-report", "-c", cfgPath, "--activity", "kact", "--json")
	var rep store.ShadowReport
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil {
		t.Fatalf("--json: exit %d %s %s", code, js, errs)
	}
	if rep.Total != 8 || rep.Decisions["SOLD_OUT"] != 2 || rep.RefusedButAccepted["SOLD_OUT"] != 1 || rep.RefusedButAccepted["ALREADY_PURCHASED"] != 4 ||
		rep.BeyondStock != 1 || rep.OverLimit != 2 || rep.ShopBuyers != 2 || rep.Logged != 8 ||
		rep.LatencyP50Us != 900 || rep.LatencyP99Us != 2500 || rep.ShopStatus["0"] != 1 {
		t.Fatalf("report %+v", rep)
	}
	// A forced preheat of the copy starts a new report.
	want(t, 0, "kact~shadow: overwritten", "preheat", "-c", cfgPath, "--force")
	code, js, _ = cliRun("shadow-report", "-c", cfgPath, "--activity", "kact", "--json")
	rep = store.ShadowReport{}
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil || rep.Total != 0 || rep.Logged != 0 {
		t.Fatalf("after preheat --force: %s", js)
	}
	_ = time.Now
}

// shadow-report refuses what is not a shadow activity, or none.
func TestShadowReportUsage(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 2, "give --activity", "shadow-report", "-c", cfgPath)
	want(t, 2, `no activity "nope"`, "shadow-report", "-c", cfgPath, "--activity", "nope")
	want(t, 2, `activity "kact" is mode: sync, not shadow`, "shadow-report", "-c", cfgPath, "--activity", "kact")
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
