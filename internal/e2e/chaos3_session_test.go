package e2e_test

import (
	"fmt"
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

// TestSessionHolderUnknownToTheInstanceIsNotSoldOut (decisions §62; the
// last note's "needs a decision"): a session buyer holding the last unit
// who clicks again on an instance that never looked their session up was
// answered 410 SOLD_OUT from memory beside it (410 such answers over 64
// chaos session seeds). Their win also set their session's holder alias in
// the holders bitset, so that instance looks the session up (one whoami
// call) and answers 409 ALREADY_PURCHASED with the token; strangers on the
// sold-out SKU still cost the shop no look-up, including 500 made-up
// cookies.
func TestSessionHolderUnknownToTheInstanceIsNotSoldOut(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	other := e2e.StartProxy(t, f.opts.Config(t)) // same Redis; has looked up nobody
	g := &fixture{redis: f.redis, shop: f.shop, p: other, opts: f.opts}
	if r := buyWithCookie(f, actTiny, "sid=u:alice"); r.Code != "WIN" {
		t.Fatalf("alice: %d %s", r.Status, r.Body)
	}
	e2e.Eventually(t, 5*time.Second, "the SKU sold out in the other instance's memory", func() bool {
		calls := w.calls.Load()
		r := buyWithCookie(g, actTiny, "sid=u:nobody-seen")
		return r.Code == "SOLD_OUT" && w.calls.Load() == calls
	})
	calls := w.calls.Load()
	r := buyWithCookie(g, actTiny, "sid=u:alice")
	if r.Code != "ALREADY_PURCHASED" || r.Status != 409 || r.Str("token") == "" {
		t.Fatalf("alice, holding the last unit, clicked on an instance that never looked her up: %d %s; want 409 ALREADY_PURCHASED with her token", r.Status, r.Body)
	}
	if got := w.calls.Load() - calls; got != 1 {
		t.Fatalf("%d whoami calls for alice's first click there, want 1", got)
	}
	calls = w.calls.Load()
	if r := buyWithCookie(g, actTiny, "sid=u:alice"); r.Code != "ALREADY_PURCHASED" || w.calls.Load() != calls {
		t.Fatalf("alice again (now known there): %d %s, %d look-ups", r.Status, r.Body, w.calls.Load()-calls)
	}
	for i := range 500 {
		cookie := fmt.Sprintf("sid=u:stranger-%d", i)
		if i%2 == 1 {
			cookie = fmt.Sprintf("sid=made-up-%d", i)
		}
		if r := buyWithCookie(g, actTiny, cookie); r.Code != "SOLD_OUT" {
			t.Fatalf("%s on a sold-out SKU: %d %s", cookie, r.Status, r.Body)
		}
	}
	if got := w.calls.Load() - calls; got != 0 {
		t.Fatalf("500 strangers on a sold-out SKU cost the shop %d look-ups, want 0", got)
	}
}
