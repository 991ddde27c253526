package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Spike is a flash-sale crowd: Users distinct buyers, each trying Tries
// times, at most Conc requests in flight, requests alternating over Addrs.
type Spike struct {
	Addrs    []string
	Activity string
	Users    int
	Tries    int
	Conc     int
	// UserPrefix names the buyers UserPrefix+"0".. (default "u").
	UserPrefix string
}

// SpikeResult tallies a spike's answers.
type SpikeResult struct {
	// ByCode counts answers by SPEC code ("WIN" for a shop 2xx).
	ByCode map[string]int
	// Wins maps each winning user to the tokens of their wins.
	Wins map[string][]string
	// MaxInFlight is the most requests that were in flight at once.
	MaxInFlight int64
	// Odd lists answers that were neither a win nor a SPEC code, and
	// transport errors.
	Odd []string
}

// Fire runs the spike and returns its tally. Every buyer's first try goes
// out before anyone's second, as a crowd hitting refresh would.
func (s Spike) Fire(t testing.TB) SpikeResult {
	t.Helper()
	prefix := or(s.UserPrefix, "u")
	clients := make([]*fasthttp.Client, len(s.Addrs))
	for i := range clients {
		clients[i] = &fasthttp.Client{MaxConnsPerHost: s.Conc, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	}
	type job struct{ n, user int }
	jobs := make(chan job)
	res := SpikeResult{ByCode: map[string]int{}, Wins: map[string][]string{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	for w := 0; w < s.Conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				i := j.n % len(s.Addrs)
				user := prefix + strconv.Itoa(j.user)
				n := inFlight.Add(1)
				mu.Lock()
				res.MaxInFlight = max(res.MaxInFlight, n)
				mu.Unlock()
				r := Do(clients[i], s.Addrs[i], Req{
					URI:     "/api/seckill/" + s.Activity + "/" + SKU + "/buy",
					Header:  [][2]string{{"X-User-Id", user}},
					Timeout: 10 * time.Second,
				})
				inFlight.Add(-1)
				mu.Lock()
				switch {
				case r.Err != nil:
					res.Odd = append(res.Odd, fmt.Sprintf("%s: %v", user, r.Err))
				case r.Code == "WIN":
					res.ByCode["WIN"]++
					res.Wins[user] = append(res.Wins[user], r.Token())
				case r.Code != "":
					res.ByCode[r.Code]++
				default:
					res.Odd = append(res.Odd, fmt.Sprintf("%s: %d %s", user, r.Status, r.Body))
				}
				mu.Unlock()
			}
		}()
	}
	n := 0
	for try := 0; try < s.Tries; try++ {
		for u := 0; u < s.Users; u++ {
			jobs <- job{n: n, user: u}
			n++
		}
	}
	close(jobs)
	wg.Wait()
	return res
}

// Check asserts the invariants of a sold-out spike of stock units on
// activity act: the shop holds exactly stock orders from stock distinct
// users, all signed, matching the winners' distinct tokens; every other
// answer is SOLD_OUT, ALREADY_PURCHASED or PENDING; Redis shows remaining 0,
// confirmed stock, pending 0; each winner's reservation reads confirmed
// with the shop's order id.
func (r SpikeResult) Check(t testing.TB, shop *Shop, p *Proxy, act string, stock int) {
	t.Helper()
	if len(r.Odd) > 0 {
		t.Errorf("%d unexpected answers, first: %v", len(r.Odd), r.Odd[:min(5, len(r.Odd))])
	}
	for code, n := range r.ByCode {
		switch code {
		case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING":
		default:
			t.Errorf("%d answers %s; want only wins, SOLD_OUT, ALREADY_PURCHASED, PENDING", n, code)
		}
	}
	if r.ByCode["WIN"] != stock || len(r.Wins) != stock {
		t.Errorf("wins = %d by %d users, want %d by %d (by code: %v)", r.ByCode["WIN"], len(r.Wins), stock, stock, r.ByCode)
	}
	tokens := map[string]string{}
	for user, toks := range r.Wins {
		for _, tok := range toks {
			if other, dup := tokens[tok]; dup {
				t.Errorf("token %s won by %s and %s", tok, other, user)
			}
			tokens[tok] = user
		}
	}

	orders := shop.Orders()
	users := map[string]bool{}
	for tok, o := range orders {
		users[o.User] = true
		if !o.SigOK {
			t.Errorf("order %s: bad signature", tok)
		}
		if o.Activity != act || o.SKU != SKU || o.Qty != "1" {
			t.Errorf("order %s: activity/sku/qty = %s/%s/%s", tok, o.Activity, o.SKU, o.Qty)
		}
		if tokens[tok] != o.User {
			t.Errorf("order %s of %s: the proxy told %q it won with this token", tok, o.User, tokens[tok])
		}
	}
	if len(orders) != stock || len(users) != stock {
		t.Errorf("shop has %d orders from %d users, want %d from %d", len(orders), len(users), stock, stock)
	}
	if buys := shop.Buys(); len(buys) != stock {
		t.Errorf("shop received %d buy requests, want %d", len(buys), stock)
	}
	p.WantStock(t, act, 0, 0, int64(stock))

	// Every winner's reservation, read through the public endpoint.
	for tok := range tokens {
		g := Do(nil, p.Addr, Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
		if g.Status != 200 || g.Str("state") != "confirmed" || g.Str("order_id") != orders[tok].OrderID {
			t.Errorf("reservation %s: %d %s, want confirmed with order %s", tok, g.Status, g.Body, orders[tok].OrderID)
		}
	}
}
