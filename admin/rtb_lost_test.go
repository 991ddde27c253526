package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// POST /admin/preheat is the CLI's preheat: a running activity Redis holds
// nothing of, whose shop holds orders of it (verify.count_url), is a sale
// Redis lost (restarted without persistence), not one to load again
// (red team rtb); force=1 loads it.
func TestRTBAdminPreheatOfALostSaleRefused(t *testing.T) {
	f := newFixture(t, token)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"count": 3}`)
	}))
	t.Cleanup(shop.Close)
	cfg := *f.cfg.Load()
	cfg.Activities = append(cfg.Activities[:0:0], cfg.Activities...)
	cfg.Activity(actOpen).Verify.CountURL = shop.URL + "/count?sku={sku}"
	f.cfg.Store(&cfg)

	var out map[string]string
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusConflict, &out)
	if !strings.Contains(out[actOpen], "shop holds 3 unit") || !strings.Contains(out[actOpen], "force=1") {
		t.Fatalf("preheat of a running sale Redis holds nothing of, the shop 3 orders: %v", out)
	}
	if fl := f.flags(t, actOpen); fl.Ready {
		t.Fatal("a refused preheat loaded the stock")
	}
	out = nil
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen+"&force=1", http.StatusOK, &out)
	if fl := f.flags(t, actOpen); !fl.Ready {
		t.Fatalf("forced preheat: %v, not ready", out)
	}
}
