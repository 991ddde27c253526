package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestSP14QueueShopAnswers: the same shop answers to a queue worker's
// send (net/http). A reservation the shop took an order for is never
// released; a 2xx confirms; an unknown outcome stays pending; after
// reconcile --repair units equal orders; the next buyer is judged by its
// own answer.
func TestSP14QueueShopAnswers(t *testing.T) {
	// Where net/http reads an answer fasthttp (sync mode) does not, and
	// the outcome is still right for stock.
	alt := map[string]string{
		"headers-over-64k":           "confirmed", // net/http reads 10 MB of headers
		"body-over-4MiB":             "confirmed", // the worker reads 1 MiB of a 2xx and confirms
		"content-length-conflicting": "pending",
	}
	for i, tc := range sp14Cases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has its own Redis, shop and proxy; most wait ~3 s on a pending verdict
			shop := sp14StartShop(t, sp14OK)
			act := fmt.Sprintf("sp14q%d", i)
			p := sp14Proxy(t, shop, Activity{ID: act, Mode: "queue"})
			p.StartQueue(t)
			sp14QueueBuy(t, p, shop, act, "warm", "confirmed")
			shop.setAnswer(tc.ans)
			want := tc.state
			if s, ok := alt[tc.name]; ok {
				want = s
			}
			sp14QueueBuy(t, p, shop, act, "victim", want)
			shop.setAnswer(sp14OK)
			time.Sleep(200 * time.Millisecond) // late bytes have arrived (as in the sync test)
			sp14QueueBuy(t, p, shop, act, "next", "confirmed")
			sp14Settle(t, p, shop, act)
		})
	}
}

// sp14QueueBuy buys for user (QUEUED) and waits for the reservation to
// reach want after the shop read it.
func sp14QueueBuy(t *testing.T, p *Proxy, shop *sp14Shop, act, user, want string) {
	t.Helper()
	r := sp14BuyReq(p, act, user, "")
	if r.Code != "QUEUED" || r.Status != 202 {
		t.Fatalf("%s: %d %s", user, r.Status, r.Body)
	}
	tok := r.Token()
	deadline := time.Now().Add(8 * time.Second)
	for {
		st, _ := sp14State(t, p, tok)
		_, read := shop.buyOf(user)
		if read && st == want && (want != "pending" || time.Now().After(deadline.Add(-5*time.Second))) {
			if st == "released" && shop.hasOrder(tok) {
				t.Errorf("%s: released a reservation the shop holds an order for", user)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: reservation %s (shop read it: %v, order %v), want %s", user, st, read, shop.hasOrder(tok), want)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
