package e2e_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// buyWithID is a buy of actOpen's SKU by user carrying X-Request-Id rid.
func (f *fixture) buyWithID(user, rid string) e2e.Resp {
	return f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}, {"X-Request-Id", rid}}})
}

// TestReplayAfterConfirmGetsTheShopsAnswer: a winner's exact repeat (same
// user, same X-Request-Id) sent right after the shop confirmed gets the
// shop's original status, Content-Type and body, with the same
// X-Seckill-Token; never the PENDING of before the confirm. The shop sees
// one buy, and nothing more is reserved.
func TestReplayAfterConfirmGetsTheShopsAnswer(t *testing.T) {
	f := newFixture(t)
	first := f.buyWithID("alice", "r-1")
	wantWin(t, first)
	for i := 0; i < 3; i++ {
		again := f.buyWithID("alice", "r-1")
		if again.Err != nil || again.Status != first.Status || !bytes.Equal(again.Body, first.Body) ||
			again.Header["Content-Type"] != first.Header["Content-Type"] || again.Token() != first.Token() {
			t.Fatalf("repeat %d = %d %q (%s) token %s; want the shop's %d %q (%s) token %s",
				i, again.Status, again.Body, again.Header["Content-Type"], again.Token(),
				first.Status, first.Body, first.Header["Content-Type"], first.Token())
		}
		if again.Header["X-Seckill-Replayed"] != "true" {
			t.Errorf("repeat %d: no X-Seckill-Replayed header", i)
		}
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestReplayWhileAtTheShopIsPending: a repeat while the first copy is still
// at the shop answers 202 PENDING (the reservation's true state), with the
// token for a verified buyer only; once the shop answered, the repeat gets
// the shop's answer.
func TestReplayWhileAtTheShopIsPending(t *testing.T) {
	f := newFixture(t)
	release := f.shop.Hang("alice")
	defer release()
	done := make(chan e2e.Resp, 1)
	go func() { done <- f.buyWithID("alice", "r-1") }()
	e2e.Eventually(t, 3*time.Second, "the buy at the shop", func() bool { return f.shop.SeenBuy("alice") })
	again := f.buyWithID("alice", "r-1")
	wantCode(t, again, "PENDING", 202)
	if again.Token() != "" {
		t.Fatalf("PENDING to an unverified caller with the token: %s %v", again.Body, again.Header)
	}
	release()
	first := <-done
	wantWin(t, first)
	tok := first.Token()
	late := f.buyWithID("alice", "r-1")
	if late.Status != first.Status || !bytes.Equal(late.Body, first.Body) || late.Token() != tok {
		t.Fatalf("repeat after the confirm = %d %s, want the shop's %d %s", late.Status, late.Body, first.Status, first.Body)
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
}

// TestReplayAboveTheBoundIsAlreadyPurchased: a shop answer larger than
// upstream.replay_max_bytes is not kept; the repeat answers 409
// ALREADY_PURCHASED, with no token or order id for an unverified caller
// (TestJWTReplayAboveTheBound has the verified one's).
func TestReplayAboveTheBoundIsAlreadyPurchased(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.UpstreamExtra = []string{"replay_max_bytes: 16"} })
	first := f.buyWithID("alice", "r-1")
	wantWin(t, first)
	again := f.buyWithID("alice", "r-1")
	wantCode(t, again, "ALREADY_PURCHASED", 409)
	if again.Token() != "" || again.Str("order_id") != "" {
		t.Fatalf("409 to an unverified caller = %s %v", again.Body, again.Header)
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
}

// TestReplayIsPerUser: another user sending the same X-Request-Id is a new
// buyer, not a replay of alice's answer.
func TestReplayIsPerUser(t *testing.T) {
	f := newFixture(t)
	a := f.buyWithID("alice", "r-1")
	wantWin(t, a)
	b := f.buyWithID("bob", "r-1")
	wantWin(t, b)
	if b.Token() == a.Token() || bytes.Equal(a.Body, b.Body) || b.Header["X-Seckill-Replayed"] != "" {
		t.Fatalf("bob got alice's answer: %s %s", b.Token(), b.Body)
	}
	f.p.WantStock(t, actOpen, 98, 0, 2)
}

// TestReplayOfARefusalIsDecidedAfresh: when the shop refused the first copy
// (4xx: released), the repeat is UPSTREAM_FAILED as before, not a replay of
// the shop's refusal, and nothing is reserved again.
func TestReplayOfARefusalIsDecidedAfresh(t *testing.T) {
	f := newFixture(t)
	f.shop.Answer("alice", http.StatusConflict)
	wantCode(t, f.buyWithID("alice", "r-1"), "UPSTREAM_FAILED", 502)
	again := f.buyWithID("alice", "r-1")
	wantCode(t, again, "UPSTREAM_FAILED", 502)
	if again.Header["X-Seckill-Replayed"] != "" {
		t.Errorf("a refusal was replayed: %v", again.Header)
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestReplayAfterSellOut: the sold-out snapshot answers other buyers from
// memory, but a repeat of a winner's request after the SKU sold out still
// gets the shop's answer, not SOLD_OUT; the winner's new request is
// ALREADY_PURCHASED (they hold the unit: never SOLD_OUT beside it, red team
// rv20), a fresh buyer's SOLD_OUT.
func TestReplayAfterSellOut(t *testing.T) {
	f := newFixture(t)
	buy := func(user, rid string) e2e.Resp {
		return f.do(e2e.Req{URI: "/api/seckill/" + actTiny + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"X-User-Id", user}, {"X-Request-Id", rid}}})
	}
	first := buy("alice", "r-1")
	wantWin(t, first)
	e2e.Eventually(t, 2*time.Second, "SOLD_OUT for others", func() bool { return buy("bob", "r-1").Code == "SOLD_OUT" })
	again := buy("alice", "r-1")
	if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.Token() != first.Token() {
		t.Fatalf("repeat after the sell-out = %d %s, want the shop's %d %s", again.Status, again.Body, first.Status, first.Body)
	}
	wantCode(t, buy("alice", "r-2"), "ALREADY_PURCHASED", 409)
	wantCode(t, buy("carol", "r-3"), "SOLD_OUT", 410)
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
}
