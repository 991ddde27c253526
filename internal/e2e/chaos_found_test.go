package e2e

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Defects red team chaos found (docs/decisions.md §50), each replayed
// deterministically.

// TestChaosWinnerReclickDuringStallIsNotSoldOut: a winner of the last unit
// clicks again (no request id) while Redis is stopped. The SKU is sold out
// in the instance's memory; the holders check (README "Sold-out from
// memory") must read the buyer's users field, which this instance never
// read: the read fails, and the buyer used to hear 410 SOLD_OUT beside the
// unit they hold (TestChaos, seeds 2 and 3: confirmed winners told
// SOLD_OUT during a CLIENT PAUSE / DEBUG SLEEP). A holders check that
// cannot be read is not a "no": the buyer hears STORE_UNAVAILABLE (nothing
// new is held; ask again), and once Redis is back, ALREADY_PURCHASED.
func TestChaosWinnerReclickDuringStallIsNotSoldOut(t *testing.T) {
	const act = "chw"
	node := redistest.Start(t)
	shop := ra12StartShop(t, 0)
	o := Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: time.Second, Activities: []Activity{{ID: act, Stock: 1, Shards: 1}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, act)
	if r := Buy(p.Addr, act, "winner"); r.Code != "WIN" {
		t.Fatalf("first buy: %d %s", r.Status, r.Body)
	}
	// The instance learns the SKU is sold out (a non-holder is told so from
	// memory, which reads the holders bitset into the cache too).
	Eventually(t, 5*time.Second, "SOLD_OUT from memory", func() bool {
		return Buy(p.Addr, act, "other").Code == "SOLD_OUT"
	})
	waitSettled(t, 5*time.Second, p)
	node.Pause(t)
	r := Buy(p.Addr, act, "winner")
	node.Resume(t)
	if r.Code == "SOLD_OUT" {
		t.Fatalf("winner's re-click during the stall: 410 SOLD_OUT beside the unit they hold (%s)", r.Body)
	}
	if r.Code != "STORE_UNAVAILABLE" && r.Code != "ALREADY_PURCHASED" {
		t.Fatalf("winner's re-click during the stall: %d %s, want STORE_UNAVAILABLE or ALREADY_PURCHASED", r.Status, r.Body)
	}
	Eventually(t, 5*time.Second, "ALREADY_PURCHASED after the stall", func() bool {
		return Buy(p.Addr, act, "winner").Code == "ALREADY_PURCHASED"
	})
}
