package e2e_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestSessionHolderOfASoldOutSKUIsNotSoldOut (red team chaos3, docs/
// decisions.md §57; TestChaos seed 160, mix session): with a session
// identity, the sold-out check from memory ran before the session look-up,
// with no user to ask the holders bitset about, so a buyer holding the
// last unit who clicked again heard 410 SOLD_OUT beside it (README: "never
// SOLD_OUT beside a unit they hold"). A session this instance has looked
// up is known from memory at no cost: its buyer is asked about now (409
// ALREADY_PURCHASED here). A session it has not looked up still costs no
// look-up on a sold-out SKU (README, Session identity): SOLD_OUT.
func TestSessionHolderOfASoldOutSKUIsNotSoldOut(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	if r := buyWithCookie(f, actTiny, "sid=u:alice"); r.Code != "WIN" {
		t.Fatalf("alice: %d %s", r.Status, r.Body)
	}
	e2e.Eventually(t, 5*time.Second, "the SKU sold out in memory", func() bool {
		calls := w.calls.Load()
		r := buyWithCookie(f, actTiny, "sid=u:nobody-seen")
		return r.Code == "SOLD_OUT" && w.calls.Load() == calls
	})
	calls := w.calls.Load()
	r := buyWithCookie(f, actTiny, "sid=u:alice")
	if r.Code != "ALREADY_PURCHASED" || r.Status != 409 {
		t.Fatalf("alice, holding the last unit, clicked again: %d %s; want 409 ALREADY_PURCHASED", r.Status, r.Body)
	}
	if r.Str("token") == "" {
		t.Fatalf("alice's ALREADY_PURCHASED (a verified identity) without her token: %s", r.Body)
	}
	if got := w.calls.Load(); got != calls {
		t.Fatalf("%d whoami calls for a cached session", got-calls)
	}
	if r := buyWithCookie(f, actTiny, "sid=u:zed"); r.Code != "SOLD_OUT" || w.calls.Load() != calls {
		t.Fatalf("a session never looked up, on a sold-out SKU: %d %s, %d look-ups", r.Status, r.Body, w.calls.Load()-calls)
	}
}
