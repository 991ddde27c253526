package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rt11qBuysOf counts the buy requests (X-Seckill-Token) the shop received.
func rt11qBuysOf(shop *e2e.Shop) int {
	n := 0
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" {
			n++
		}
	}
	return n
}

// TestRT11QPauseMidBacklogStopsSends: queue mode at a slow queue.rate
// (1/s, 4 workers). The workers have started sending the backlog when the
// operator pauses the activity. README "Operations" (pause row): "every
// instance obeys within 1 s: ... queue workers send nothing more (queued
// buyers stay queued until resume)". Once the instance itself refuses new
// buys 503 PAUSED (so it has seen the pause) and a further second has
// passed, the shop must receive no more buys; after resume every QUEUED
// buyer ends confirmed, each token sent once.
//
// The reader takes up to queue.workers entries at once and then hands them
// out as the fleet bucket grants tokens (reservation/queue.go run: the
// `for len(got) > 0` loop), without looking at the kill switch again: the
// entries it already read keep going to the shop, one per 1/rate, after
// the pause.
func TestRT11QPauseMidBacklogStopsSends(t *testing.T) {
	e2e.Soak(t)
	if testing.Short() {
		t.Skip("a multi-second queue fault run: the plain pass of make test runs it")
	}
	const n = 8
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11qp", Stock: n, Shards: 1, Mode: "queue"}}}
	p := rqProxy(t, opts, func(c *config.Config) {
		c.Activities[0].Queue.Workers = 4
		c.Activities[0].Queue.Rate = 1
	})
	a := p.Activity(t, "rt11qp")
	var toks []string
	for i := 0; i < n; i++ {
		got := e2e.Buy(p.Addr, "rt11qp", fmt.Sprintf("rt11qp-u%d", i))
		if got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	p.StartQueue(t)
	e2e.Eventually(t, 5*time.Second, "first queued buy at the shop", func() bool { return rt11qBuysOf(shop) >= 1 })

	st := opsStore(t, p.Cfg)
	if err := st.SetPaused(opsCtx(t), "rt11qp", true); err != nil {
		t.Fatalf("pause: %v", err)
	}
	e2e.Eventually(t, 5*time.Second, "the instance refuses buys PAUSED", func() bool {
		return e2e.Buy(p.Addr, "rt11qp", "rt11qp-probe").Code == "PAUSED"
	})
	time.Sleep(time.Second) // README: every instance obeys within 1 s
	atPause := rt11qBuysOf(shop)
	time.Sleep(3500 * time.Millisecond) // at rate 1/s the read entries would go out meanwhile
	after := rt11qBuysOf(shop)
	if after != atPause {
		t.Errorf("shop received %d more buys 1–4.5 s after the pause was in force (%d then %d); README: queue workers send nothing more while paused",
			after-atPause, atPause, after)
	}

	if err := st.SetPaused(opsCtx(t), "rt11qp", false); err != nil {
		t.Fatalf("resume: %v", err)
	}
	last := rqAwaitSettled(p.Addr, toks, 20*time.Second)
	seen := map[string]int{}
	for _, b := range shop.Buys() {
		seen[b.Token]++
	}
	for i, tok := range toks {
		if last[i].State != store.StateConfirmed {
			t.Errorf("buyer %d: %s, want confirmed", i, last[i])
		}
		if seen[tok] != 1 {
			t.Errorf("buyer %d: token sent %d times", i, seen[tok])
		}
	}
	k := rqWantStock(t, st, a)
	if int64(len(shop.Orders())) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d", len(shop.Orders()), k.Confirmed)
	}
}

// TestRT11QPauseWhileWaitingForSlotStopsSends: queue mode with
// upstream.max_inflight 1 and two workers. Worker 1 is at the shop with
// buyer a (the shop is slow); worker 2 has taken buyer b's entry and waits
// for the in-flight slot (or the other way round: the workers race for
// the slot). The operator pauses; once the instance answers
// PAUSED and a further second has passed, the shop finishes a's order and
// the slot frees. README "Operations" (pause): "queue workers send
// nothing more (queued buyers stay queued until resume)": b must not be
// sent while paused. reservation/queue.go handle() takes the slot and
// claims and sends without looking at the kill switch again.
func TestRT11QPauseWhileWaitingForSlotStopsSends(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second queue fault run: the plain pass of make test runs it")
	}
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamExtra: []string{"max_inflight: 1"},
		Activities: []e2e.Activity{{ID: "rt11qs", Stock: 2, Shards: 1, Mode: "queue"}}}
	p := rqProxy(t, opts, func(c *config.Config) { c.Activities[0].Queue.Workers = 2 })
	a := p.Activity(t, "rt11qs")
	// Both are held at the shop: the two workers race for the one slot,
	// and either may win it (the entries are handed out in order, but the
	// workers run concurrently); the winner hangs at the shop, the other
	// waits for the slot.
	relA := shop.Hang("rt11qs-a")
	t.Cleanup(relA)
	relB := shop.Hang("rt11qs-b")
	t.Cleanup(relB)
	var toks []string
	for _, u := range []string{"rt11qs-a", "rt11qs-b"} {
		got := e2e.Buy(p.Addr, "rt11qs", u)
		if got.Code != "QUEUED" {
			t.Fatalf("buy %s: %d %s", u, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	p.StartQueue(t)
	e2e.Eventually(t, 5*time.Second, "a or b at the shop", func() bool { return shop.SeenBuy("rt11qs-a") || shop.SeenBuy("rt11qs-b") })
	first, second, relFirst, relSecond := "rt11qs-a", "rt11qs-b", relA, relB
	if !shop.SeenBuy(first) {
		first, second, relFirst, relSecond = second, first, relB, relA
	}
	t.Logf("%s won the slot; %s waits for it", first, second)
	st := opsStore(t, p.Cfg)
	// Both entries were read at once (two free workers): the other's
	// worker now waits for the slot.
	time.Sleep(500 * time.Millisecond)
	if shop.SeenBuy(second) {
		t.Fatalf("%s was sent while %s held the only slot (upstream.max_inflight 1)", second, first)
	}
	if err := st.SetPaused(opsCtx(t), "rt11qs", true); err != nil {
		t.Fatalf("pause: %v", err)
	}
	e2e.Eventually(t, 5*time.Second, "the instance refuses buys PAUSED", func() bool {
		return e2e.Buy(p.Addr, "rt11qs", "rt11qs-probe").Code == "PAUSED"
	})
	time.Sleep(time.Second)
	relFirst() // the first order done: the slot frees
	time.Sleep(1500 * time.Millisecond)
	if shop.SeenBuy(second) {
		t.Errorf("buyer %s was sent to the shop while the activity had been paused for over a second; README: queue workers send nothing more while paused", second)
	}
	if err := st.SetPaused(opsCtx(t), "rt11qs", false); err != nil {
		t.Fatalf("resume: %v", err)
	}
	e2e.Eventually(t, 5*time.Second, second+" sent after resume", func() bool { return shop.SeenBuy(second) })
	relSecond()
	last := rqAwaitSettled(p.Addr, toks, 10*time.Second)
	for i, l := range last {
		if l.State != store.StateConfirmed {
			t.Errorf("buyer %d: %s, want confirmed", i, l)
		}
	}
	k := rqWantStock(t, st, a)
	if int64(len(shop.Orders())) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d", len(shop.Orders()), k.Confirmed)
	}
}
