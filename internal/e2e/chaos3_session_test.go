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
	soldOutInMemory(t, w, f)
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
	soldOutInMemory(t, w, g)
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

// TestSessionSoldOutRequestIDsCostNoLookups (decisions §62): a buy with a
// request id on a sold-out SKU goes past the sold-out mark (a repeat of a
// won request is owed its replay), and with a session identity that meant
// a look-up for every such click of a session the instance did not know:
// a scalper adding made-up X-Request-Id headers to made-up cookies made
// every sold-out click a call to the shop's whoami. Now a session whose
// holder alias is clear cannot be repeating a win made with it: SOLD_OUT
// from memory, no look-up. The winner's own repeat, on an instance that
// never saw her cookie, still gets her replay.
func TestSessionSoldOutRequestIDsCostNoLookups(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	other := e2e.StartProxy(t, f.opts.Config(t))
	buy := func(addr, cookie, rid string) e2e.Resp {
		return e2e.Do(manyConns, addr, e2e.Req{URI: "/api/seckill/" + actTiny + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Cookie", cookie}, {"X-Request-Id", rid}}})
	}
	won := buy(f.p.Addr, "sid=u:alice", "alice-1")
	if won.Code != "WIN" {
		t.Fatalf("alice: %d %s", won.Status, won.Body)
	}
	soldOutInMemory(t, w, &fixture{p: other})
	calls := w.calls.Load()
	for i := range 300 {
		if r := buy(other.Addr, fmt.Sprintf("sid=u:stranger-%d", i), fmt.Sprintf("rid-%d", i)); r.Code != "SOLD_OUT" {
			t.Fatalf("stranger %d with a request id on a sold-out SKU: %d %s", i, r.Status, r.Body)
		}
	}
	if got := w.calls.Load() - calls; got != 0 {
		t.Fatalf("300 strangers with request ids on a sold-out SKU cost the shop %d look-ups, want 0", got)
	}
	r := buy(other.Addr, "sid=u:alice", "alice-1")
	if r.Status != won.Status || r.Token() != won.Token() || r.Token() == "" {
		t.Fatalf("alice's repeat on the other instance: %d %s (token %q), want her replay %d (token %q)", r.Status, r.Body, r.Token(), won.Status, won.Token())
	}
}

// soldOutInMemory waits until f's instance answers actTiny SOLD_OUT from
// memory: a session it never saw is refused without a whoami call.
func soldOutInMemory(t *testing.T, w *whoamiShop, f *fixture) {
	t.Helper()
	e2e.Eventually(t, 5*time.Second, "the SKU sold out in the instance's memory", func() bool {
		calls := w.calls.Load()
		r := buyWithCookie(f, actTiny, "sid=u:nobody-seen")
		return r.Code == "SOLD_OUT" && w.calls.Load() == calls
	})
}
