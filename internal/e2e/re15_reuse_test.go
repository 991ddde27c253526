package e2e_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Last week's sale "re15r" (3 units, sold out) ended; its keys live on for
// key_ttl_after_end (24h by default). This week's sale reuses the id, SKU
// and stock in the file with a new window, and the runbook's `preheat`
// answered "unchanged": the new sale opened on the old stock — every buyer
// SOLD_OUT at its start, last week's buyers ALREADY_PURCHASED — with status
// OK and nothing said. (A different stock is refused: "has sales; use
// --force".) A preheat for a window that starts after the recorded sale's
// end, over stock that has sales, is a new sale: it must not pass as
// "unchanged" — refused with what to do, or loaded afresh.
func TestRE15SameIDNewSaleIsNotUnchanged(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	now := time.Now()
	// Last week's sale, shortened to end in two seconds.
	old := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "re15r", Stock: 3, Shards: 1, Start: now.Add(-time.Minute), End: now.Add(2 * time.Second)}}}.Config(t)
	p := e2e.StartProxy(t, old)
	p.Preheat(t, "re15r")
	for _, u := range []string{"u1", "u2", "u3"} {
		if b := e2e.Buy(p.Addr, "re15r", u); b.Code != "WIN" {
			t.Fatalf("%s = %d %s %s", u, b.Status, b.Code, b.Body)
		}
	}
	p.WantStock(t, "re15r", 0, 0, 3)
	time.Sleep(time.Until(now.Add(2 * time.Second)))

	// This week's file: same id, SKU and stock; opens in ten minutes.
	next := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "re15r", Stock: 3, Shards: 1, Start: now.Add(10 * time.Minute), End: now.Add(time.Hour)}}}.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := p.Store.Preheat(ctx, next.Activity("re15r"), false, time.Now())
	switch {
	case err == nil && out == store.PreheatUnchanged:
		st := p.Status(t, "re15r")
		t.Fatalf("preheat of a new sale over last week's stock = %s, nil: the sale opens with %+v", out, st.SKUs)
	case err != nil:
		if !errors.Is(err, store.ErrRunning) || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "ended") {
			t.Errorf("refusal = %v; want a refusal (ErrRunning) that says the earlier sale ended and what to do (--force)", err)
		}
		t.Logf("refused: %v", err)
	default:
		if k := p.SKUStatus(t, "re15r"); k.Remaining != 3 || k.Confirmed != 0 {
			t.Errorf("preheat %s, yet status %+v", out, k)
		}
	}
	// --force loads the new sale's stock (what the refusal says to do).
	if out, err := p.Store.Preheat(ctx, next.Activity("re15r"), true, time.Now()); err != nil || out != store.PreheatOverwritten {
		t.Fatalf("preheat --force = %s, %v", out, err)
	}
	p.WantStock(t, "re15r", 3, 0, 0)
	// Re-running the preheat of the new sale is idempotent (unchanged).
	if out, err := p.Store.Preheat(ctx, next.Activity("re15r"), false, time.Now()); err != nil || out != store.PreheatUnchanged {
		t.Fatalf("preheat again = %s, %v", out, err)
	}
}
