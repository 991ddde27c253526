package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func rt10fleetBuyRID(addr, act, user, rid string) e2e.Resp {
	return rt10fleetBuy(addr, act, e2e.SKU, user, [2]string{"X-Request-Id", rid})
}

// TestRT10FleetRefusedRequestIDAfterRefund: a buyer at their limit sends
// a new request (request id R2): 409 ALREADY_PURCHASED, nothing reserved
// for R2. The operator then refunds the buyer's order (release of the
// confirmed token). The buyer's client repeats R2 (SPEC §4: a repeat
// "returns the same outcome and never reserves twice").
//
// Observed: 502 UPSTREAM_FAILED, "the shop could not place the order;
// nothing was charged" — on every instance, and still after the buyer
// won again with a third request. R2 never reserved anything and never
// reached the shop, and the shop did place (and charge) the refunded
// order: reserve.lua wrote R2's record as "3|<the buyer's last
// reservation>" and answers a repeat by that other reservation's state,
// mapping its release to UPSTREAM_FAILED (admission.go, lua.Released).
func TestRT10FleetRefusedRequestIDAfterRefund(t *testing.T) {
	const act = "rt10i"
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.Activities = []e2e.Activity{{ID: act, Stock: 10, Shards: 2}}
	})
	a, b := env.proxies[0], env.proxies[1]
	first := rt10fleetBuyRID(a.Addr, act, "ursula", "R1")
	if first.Code != "WIN" {
		t.Fatalf("first buy: %d %s", first.Status, first.Body)
	}
	env.waitConfirms(t)
	second := rt10fleetBuyRID(b.Addr, act, "ursula", "R2")
	rt10fleetCheckCode(t, "R2", second)
	if second.Code != "ALREADY_PURCHASED" {
		t.Fatalf("R2 at the limit: %d %s, want 409 ALREADY_PURCHASED", second.Status, second.Body)
	}
	tok, err := store.ParseToken(first.Token())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if code, err := env.st.Release(ctx, tok, 2, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("refund: %v %v", code, err)
	}
	buysBefore := len(env.shop.Buys())
	r2Token := "" // R2 decided afresh may win; its repeats then replay that win
	for i, p := range []*e2e.Proxy{b, a} {
		again := rt10fleetBuyRID(p.Addr, act, "ursula", "R2")
		t.Logf("repeat %d of R2 after the refund: %d %s", i, again.Status, again.Body)
		if r2Token != "" && again.Status == 200 && again.Header["X-Seckill-Token"] == r2Token {
			continue // the replay of R2's fresh win (the shop's answer, kept)
		}
		rt10fleetCheckCode(t, "R2 repeat", again)
		if again.Code == "UPSTREAM_FAILED" {
			t.Errorf("repeat of R2 on instance %d after the refund of another request's order: 502 UPSTREAM_FAILED "+
				"(\"the shop could not place the order\"), but R2 reserved nothing and never reached the shop; its first "+
				"answer was 409 ALREADY_PURCHASED: want the same outcome or a fresh decision, never a shop failure", i)
		}
		if again.Code == "WIN" {
			if r2Token != "" && again.Token() != r2Token {
				t.Errorf("R2 won twice: %s then %s", r2Token, again.Token())
			}
			r2Token = again.Token()
		}
	}
	if r2Token != "" {
		env.waitConfirms(t)
	}
	// The buyer buys again with a new request: they hold a unit again
	// (R3's, or R2's when R2 was decided afresh and won).
	third := rt10fleetBuyRID(a.Addr, act, "ursula", "R3")
	switch {
	case r2Token == "" && third.Code != "WIN":
		t.Fatalf("R3 after the refund: %d %s", third.Status, third.Body)
	case r2Token != "" && third.Code != "ALREADY_PURCHASED":
		t.Fatalf("R3 after R2 won afresh: %d %s, want 409 ALREADY_PURCHASED", third.Status, third.Body)
	}
	env.waitConfirms(t)
	again := rt10fleetBuyRID(b.Addr, act, "ursula", "R2")
	t.Logf("R2 once the buyer holds R3's unit: %d %s", again.Status, again.Body)
	if again.Code == "UPSTREAM_FAILED" {
		t.Errorf("R2 while the buyer holds a confirmed unit (R3): 502 UPSTREAM_FAILED, want ALREADY_PURCHASED (the buyer is at the limit)")
	}
	if n := len(env.shop.Buys()) - buysBefore; n != 1 {
		t.Errorf("the shop got %d buys after the refund, want 1 (R2 afresh or R3)", n)
	}
	env.checkStock(t, act, nil, false)
}

// TestRT10FleetRetryIDAfterReconcilerRelease: the shop answers a winner
// 503 (verify.url configured: outcome unknown, 504 UPSTREAM_TIMEOUT,
// pending). The buyer's client retries with a new request id on another
// instance: 202 PENDING (R2 holds nothing: it names the first
// reservation). The reconciler then finds no order at the shop and
// releases the first reservation. The client repeats R2.
//
// Observed: 502 UPSTREAM_FAILED for R2 — a request that reserved nothing
// and was never sent to the shop — on every instance, for as long as R2's
// Redis record lives (5 minutes). Expected: the buyer holds nothing, so
// R2 is decided afresh (it wins, stock is there), as after an abort
// (README: "request-id record cleared, so a repeat is decided afresh").
func TestRT10FleetRetryIDAfterReconcilerRelease(t *testing.T) {
	const act = "rt10k"
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.UpstreamTimeout = time.Second
		o.Activities = []e2e.Activity{{ID: act, Stock: 10, Shards: 2, Pending: 4 * time.Second}}
	})
	a, b := env.proxies[0], env.proxies[1]
	env.shop.Answer("victor", http.StatusServiceUnavailable)
	first := rt10fleetBuyRID(a.Addr, act, "victor", "R1")
	rt10fleetCheckCode(t, "R1", first)
	if first.Code != "UPSTREAM_TIMEOUT" {
		t.Fatalf("first buy: %d %s, want 504 UPSTREAM_TIMEOUT", first.Status, first.Body)
	}
	env.shop.Answer("victor", 0)
	retry := rt10fleetBuyRID(b.Addr, act, "victor", "R2")
	rt10fleetCheckCode(t, "R2", retry)
	if retry.Code != "PENDING" {
		t.Fatalf("retry R2: %d %s, want 202 PENDING", retry.Status, retry.Body)
	}
	rec := reservation.NewReconciler(env.st, metrics.New(), zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rec.Run(ctx, []*config.Activity{a.Activity(t, act)}, true, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if k := env.checkStock(t, act, nil, false)[e2e.SKU]; k.Remaining != 10 {
		t.Fatalf("after the reconciler: %+v, want everything back", k)
	}
	again := rt10fleetBuyRID(b.Addr, act, "victor", "R2")
	rt10fleetCheckCode(t, "R2 repeat", again)
	t.Logf("repeat of R2 after the reconciler released R1's reservation: %d %s", again.Status, again.Body)
	if again.Code == "UPSTREAM_FAILED" {
		t.Errorf("repeat of R2: 502 UPSTREAM_FAILED, but R2 reserved nothing and was never sent to the shop; " +
			"the buyer holds nothing: want R2 decided afresh (a win)")
	}
	again2 := rt10fleetBuyRID(a.Addr, act, "victor", "R2")
	if again2.Code == "UPSTREAM_FAILED" {
		t.Errorf("repeat of R2 on the other instance: 502 UPSTREAM_FAILED too")
	}
	env.waitConfirms(t)
	env.checkStock(t, act, nil, false)
}

// TestRT10FleetAlreadyPurchasedNamesAReleasedToken: a verified buyer
// (JWT) holds two units (limit 2) from two buys; the operator refunds the
// second. Asking for 2 more is rightly 409 ALREADY_PURCHASED (one unit
// held), but the token the answer names (SPEC §4: "body has token and
// order_id") is the refunded reservation's, not the one the buyer holds:
// the users hash kept naming the last reservation after a release
// (lua/giveback.lua) and reserve.lua's lastAnswer answered with it. It
// lists the held ones now: the answer names the first unit's.
func TestRT10FleetAlreadyPurchasedNamesAReleasedToken(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	const act = "rt10n"
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Activities = []e2e.Activity{{ID: act, Stock: 10, Shards: 2, PerUserLimit: 2, MaxQty: 2, QtyFrom: "query:qty"}}
	})
	bearer := bearerOf(k.Sign(t, "RS256", jwtClaims("wendy")))
	buy := func(p *e2e.Proxy, qty string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy?qty=" + qty, Header: [][2]string{bearer}})
	}
	t1 := buy(env.proxies[0], "1")
	t2 := buy(env.proxies[1], "1")
	if t1.Code != "WIN" || t2.Code != "WIN" {
		t.Fatalf("two buys: %d %s / %d %s", t1.Status, t1.Body, t2.Status, t2.Body)
	}
	env.waitConfirms(t)
	tok2, _ := store.ParseToken(t2.Token())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if code, err := env.st.Release(ctx, tok2, 2, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("refund: %v %v", code, err)
	}
	r := buy(env.proxies[0], "2")
	rt10fleetCheckCode(t, "qty 2", r)
	if r.Code != "ALREADY_PURCHASED" {
		t.Fatalf("qty 2 with one unit held of 2: %d %s, want 409", r.Status, r.Body)
	}
	named := r.Token()
	g := e2e.Do(nil, env.proxies[1].Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + named})
	t.Logf("409 names %s: %s", named, g.Body)
	if named == t2.Token() || g.Str("state") == "released" {
		t.Errorf("ALREADY_PURCHASED names the refunded reservation %s (state %q), not the one the buyer holds (%s)", named, g.Str("state"), t1.Token())
	}
	// The users hash lists the held ones: the answer names the one held.
	if named != t1.Token() || r.Str("order_id") == "" {
		t.Errorf("ALREADY_PURCHASED names %q (order id %q), want the held one %s with its order id", named, r.Str("order_id"), t1.Token())
	}
}

// TestRT10FleetInFlightBuyerToldAlreadyPurchased: limit 2. The buyer's
// first unit is still at the shop (in flight, pending); their second buy
// is refused by the shop (409: UPSTREAM_FAILED, released). Asking for 2
// more units now must be 202 PENDING (SPEC §4: "same user asks again
// while their reservation is still in flight") — observed 409
// ALREADY_PURCHASED: reserve.lua's lastAnswer judged by the last
// reservation named in the users hash, which is the released one. The
// users hash now lists the reservations a buyer holds (giveback.lua takes
// a released one off), and lastAnswer answers PENDING while one of them
// is pending or queued.
func TestRT10FleetInFlightBuyerToldAlreadyPurchased(t *testing.T) {
	const act = "rt10p"
	env := rt10fleetStart(t, false, 2, func(o *e2e.Options) {
		o.Activities = []e2e.Activity{{ID: act, Stock: 10, Shards: 2, PerUserLimit: 2, MaxQty: 2, QtyFrom: "query:qty", NoVerify: true}}
	})
	release := env.shop.Hang("yuki")
	defer release()
	done := make(chan e2e.Resp, 1)
	go func() { done <- rt10fleetBuyQty(env.proxies[0].Addr, act, e2e.SKU, "yuki", 1) }()
	e2e.Eventually(t, 5*time.Second, "first buy at the shop", func() bool { return env.shop.SeenBuy("yuki") })
	env.shop.Answer("yuki", http.StatusConflict) // the hanging buy keeps hanging
	second := rt10fleetBuyQty(env.proxies[1].Addr, act, e2e.SKU, "yuki", 1)
	rt10fleetCheckCode(t, "second", second)
	if second.Code != "UPSTREAM_FAILED" {
		t.Fatalf("second buy: %d %s, want 502 UPSTREAM_FAILED", second.Status, second.Body)
	}
	env.waitConfirms(t)
	third := rt10fleetBuyQty(env.proxies[1].Addr, act, e2e.SKU, "yuki", 2)
	rt10fleetCheckCode(t, "third", third)
	t.Logf("qty 2 while the first unit is in flight: %d %s", third.Status, third.Body)
	if third.Code != "PENDING" {
		t.Errorf("qty 2 while the first unit is still at the shop: %d %s, want 202 PENDING", third.Status, third.Body)
	}
	env.shop.Answer("yuki", 0)
	release()
	if first := <-done; first.Code != "WIN" {
		t.Errorf("first buy: %d %s", first.Status, first.Body)
	}
	env.waitConfirms(t)
	env.checkStock(t, act, nil, false)
}
