package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Review rv17, on settleByCount: a deferred 404 is decided after the pass,
// but its unsettled exception kept the evidence it was found with ("left:
// … decided by count_url after the pass"), so a report-only pass listed a
// would-release as left and undecided, beside a finding saying
// would-release. The exception says what the pass decided.
func TestRV17CountExceptionSaysWhatWasDecided(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 300 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "rv17", Shards: 2, PerUserLimit: 3,
			SKUs: []config.SKU{{ID: "a", Stock: 10}}}}}.Config(t)
	cfg.Activities[0].Verify.CountURL = countServer(t, shop)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "rv17")
	bf := &bundleFixture{shop: shop, p: p}
	shop.Answer("lost", http.StatusServiceUnavailable) // the shop holds no order
	if b := bf.single("rv17", "a", "lost"); b.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("lost: %d %s", b.Status, b.Body)
	}
	a := p.Activity(t, "rv17")
	at := time.Now().Add(a.PendingTimeout + time.Minute)
	rec := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop())
	rep, err := rec.Run(context.Background(), []*config.Activity{a}, false, at)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(rep)
	ar := rep.Activities[0]
	if len(ar.Stale) != 1 || ar.Stale[0].Action != "would-release" {
		t.Fatalf("report-only finding: %s", js)
	}
	found := false
	for _, e := range ar.Exceptions {
		if e.Kind != "unsettled" || e.Token != ar.Stale[0].Token {
			continue
		}
		found = true
		if !strings.Contains(e.Reason, "would-release") || strings.Contains(e.Reason, "after the pass") {
			t.Errorf("the exception's reason %q, its finding would-release: %s", e.Reason, js)
		}
	}
	if !found {
		t.Fatalf("no unsettled exception for the would-release: %s", js)
	}
}
