package store_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestSoldOutWithRequestIDFromMemory: once a SKU is sold out, a buy with
// a request id no reserve ever saw is answered SOLD_OUT from local memory
// (the funnel: no Redis call), while the repeat of a request that did run
// the script (a winner's retry) still reaches its record and is answered
// by the reservation's state, never SOLD_OUT.
func TestSoldOutWithRequestIDFromMemory(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("ridbits", 3, 2, 1)
	mustPreheat(t, s, a)
	winners := map[string]string{}
	for i := 0; len(winners) < 3; i++ {
		u := "w" + strconv.Itoa(i)
		q := reserveReq(a, u, 1)
		q.RequestID = "rid-" + u
		res, err := s.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if res.Code == lua.OK {
			winners[u] = q.RequestID
		}
	}
	// Let the sold-out flags reach this instance's memory.
	for i := 0; ; i++ {
		q := reserveReq(a, "probe", 1)
		if res, err := s.Reserve(ctx(t), q); err == nil && res.FromMemory {
			break
		}
		if i > 200 {
			t.Fatal("sold-out flags never reached local memory")
		}
	}
	fromMemory := soldOutFromMemory(t, s, a, 500,
		func(i int) string { return "late-" + strconv.Itoa(i) },
		func(i int) string { return "r-" + strconv.Itoa(i) })
	if fromMemory < 490 {
		t.Errorf("%d of 500 sold-out buys with a fresh request id answered from memory, want nearly all", fromMemory)
	}
	wantRepeatsAnswered(t, s, a, winners)
}

// soldOutFromMemory sends n buyers of a sold-out SKU with fresh request ids
// (the i-th: user(i), rid(i)); each must be told SOLD_OUT. It returns how
// many were answered from local memory.
func soldOutFromMemory(t *testing.T, s *store.Store, a *config.Activity, n int, user, rid func(int) string) int {
	t.Helper()
	fromMemory := 0
	for i := 0; i < n; i++ {
		q := reserveReq(a, user(i), 1)
		q.RequestID = rid(i)
		res, err := s.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if res.Code != lua.Empty {
			t.Fatalf("buyer %d (%s) after sell-out: %v", i, q.RequestID, res.Code)
		}
		if res.FromMemory {
			fromMemory++
		}
	}
	return fromMemory
}

// wantRepeatsAnswered: each winner's repeat (same user, same request id)
// after the sell-out gets its reservation's state, never SOLD_OUT.
func wantRepeatsAnswered(t *testing.T, s *store.Store, a *config.Activity, winners map[string]string) {
	t.Helper()
	for u, rid := range winners {
		q := reserveReq(a, u, 1)
		q.RequestID = rid
		res, err := s.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if res.Code != lua.Pending && res.Code != lua.Purchased {
			t.Errorf("winner %s's repeat after sell-out: %v, want its reservation's state", u, res.Code)
		}
	}
}

// TestSoldOutRequestIDsWaitForNoTurn: after sell-out, Redis stalls while
// the repeats of a winner's request id are in flight (each owed its
// reservation's answer, so each reads its record and runs the script: more
// of them than the reserve gate lets through at 0 units). A buy with a
// fresh request id needs no turn: it is answered SOLD_OUT from local
// memory at once, not queued behind the stalled repeats until its deadline
// and told unavailable. Afterwards the winner's repeat still gets its own
// reservation, and nothing else is held.
func TestSoldOutRequestIDsWaitForNoTurn(t *testing.T) {
	for _, tt := range stalls {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := stallStore(t)
			a := newActivity("ridturn", 2, 1, 1)
			mustPreheat(t, s, a)
			warm(t, s, a, "warm")
			buy := func(user, rid string) (store.ReserveResult, error) {
				q := reserveReq(a, user, 1)
				q.RequestID, q.Stock = rid, a.SKUs[0].Stock
				return s.Reserve(ctx(t), q)
			}
			won := map[string]store.Token{}
			for _, u := range []string{"w0", "w1"} {
				if r, err := buy(u, "rid-"+u); err != nil || r.Code != lua.OK {
					t.Fatalf("winner %s: %v, %v", u, r.Code, err)
				}
			}
			for _, u := range []string{"w0", "w1"} {
				r, err := buy(u, "rid-"+u)
				if err != nil || r.Code != lua.Pending {
					t.Fatalf("winner %s's repeat: %v, %v", u, r.Code, err)
				}
				won[u] = r.Token
			}
			eventually(t, 2*time.Second, "sold out, answered from memory", func() bool {
				r, err := buy("probe", "rid-probe")
				return err == nil && r.Code == lua.Empty && r.FromMemory
			})

			wait := tt.start(t, srv)
			var wg sync.WaitGroup
			for range 2 * 16 { // the gate's slack twice over
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Unavailable (the stall) or its reservation: never another.
					if r, err := buy("w0", "rid-w0"); err == nil && r.Token != won["w0"] {
						t.Errorf("winner's repeat during the stall: %v %v, want its reservation %v", r.Code, r.Token, won["w0"])
					} else if err != nil && !errors.Is(err, store.ErrUnavailable) {
						t.Errorf("winner's repeat during the stall: %v", err)
					}
				}()
			}
			time.Sleep(20 * time.Millisecond) // the repeats are in flight
			var mu sync.Mutex
			codes := map[string]int{}
			var fresh sync.WaitGroup
			for i := range 50 {
				fresh.Add(1)
				go func() {
					defer fresh.Done()
					r, err := buy("late"+strconv.Itoa(i), "rid-late"+strconv.Itoa(i))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						codes[err.Error()]++
					case r.Code == lua.Empty && r.FromMemory:
						codes["SOLD_OUT from memory"]++
					default:
						codes[r.Code.String()]++
					}
				}()
			}
			fresh.Wait()
			wg.Wait()
			wait()
			if codes["SOLD_OUT from memory"] != 50 {
				t.Errorf("50 fresh request ids during the stall: %v, want all SOLD_OUT from memory", codes)
			}
			r, err := buy("w0", "rid-w0")
			if err != nil || r.Code != lua.Pending || r.Token != won["w0"] {
				t.Fatalf("winner's repeat after the stall: %v %v %v, want PENDING %v", r.Code, r.Token, err, won["w0"])
			}
			wantStatus(t, s, a, 0, 2, 0)
		})
	}
}

// TestSoldOutFreshRequestIDsRarelyReadRedis: after a 100-unit sale (every
// winner and some of the first wave's losers leave a request-id record),
// nearly every fresh request id is answered from the bitset in memory. At
// 16 bits per unit (an 8 Kib bitset) about one in 100 found its bit set
// and read its record from Redis; on the 1000users preset, whose first
// wave leaves ~200 records a sale on the same bitset, 180 GETs of 3,000
// buyers after a few sales, in one burst as the sell-out became known.
func TestSoldOutFreshRequestIDsRarelyReadRedis(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("ridfp", 100, 1, 1)
	mustPreheat(t, s, a)
	// The preset's shape: a run id, then the request's number; users by number.
	rid := func(run string, k int) string { return run + "-" + strconv.Itoa(k) }
	for k := 0; k < 200; k++ { // 100 winners, then losers that still reach the script
		q := reserveReq(a, "p1-"+strconv.Itoa(k), 1)
		q.RequestID = rid("3f9a1c0b7d2e", k)
		if _, err := s.Reserve(ctx(t), q); err != nil {
			t.Fatal(err)
		}
	}
	const fresh = 3000
	fromRedis := fresh - soldOutFromMemory(t, s, a, fresh,
		func(k int) string { return "p2-" + strconv.Itoa(k%1000) },
		func(k int) string { return rid("8c41d2e9a056", k) })
	// The ids are fixed, so is the count: 27 at 8 Kib, 3 at 64 Kib.
	if fromRedis > fresh/200 {
		t.Errorf("%d of %d sold-out buys with a fresh request id read Redis, want at most 0.5%%", fromRedis, fresh)
	}
}

// TestSellOutFlagReadBringsTheBitset: when a shard sells out on another
// instance, the invalidation of its flag marks it here, and the next read
// of the flags by a buyer with a request id brings the shard's bitset in
// the same round trip: the sold-out answer that follows needs no second
// read (under a first wave each one waits 10-20 ms for the CPU). A read
// with nothing invalidated brings nothing more.
func TestSellOutFlagReadBringsTheBitset(t *testing.T) {
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act := newActivity("sellbits", 1, 1, 1)
	mustPreheat(t, b, act)
	sku := act.SKUs[0].ID
	out, err := a.ReadOutFlagsAs(ctx(t), act.ID, sku, 1) // a now tracks the flag
	if err != nil || out[0] {
		t.Fatalf("flags before the sale: %v, %v", out, err)
	}
	q := reserveReq(act, "winner", 1)
	q.RequestID = "rid-w"
	if res, err := b.Reserve(ctx(t), q); err != nil || res.Code != lua.OK {
		t.Fatalf("the sale on the other instance: %v, %v", res.Code, err)
	}
	eventually(t, 3*time.Second, "the flag's invalidation marked here", func() bool {
		return a.OutInvalidated(ctx(t), act.ID, sku, 1, 0)
	})
	if out, err = a.ReadOutFlagsAs(ctx(t), act.ID, sku, 1); err != nil || !out[0] {
		t.Fatalf("flags after the sale: %v, %v", out, err)
	}
	if a.OutInvalidated(ctx(t), act.ID, sku, 1, 0) {
		t.Error("the mark outlived the read")
	}
	if !a.BitsInMemory(ctx(t), act.ID, sku, 1, 0) {
		t.Error("the bitset did not come with the flags")
	}
	// And the buyer that follows is answered from memory.
	late := reserveReq(act, "late", 1)
	late.RequestID = "rid-late"
	if res, err := a.Reserve(ctx(t), late); err != nil || res.Code != lua.Empty || !res.FromMemory {
		t.Fatalf("late buyer: %v (from memory %v), %v", res.Code, res.FromMemory, err)
	}

	// A second instance that saw no invalidation reads the flags alone.
	c := openStore(t, redisConfig([]string{srv.Addr}, false))
	if out, err = c.ReadOutFlagsAs(ctx(t), act.ID, sku, 1); err != nil || !out[0] {
		t.Fatalf("flags on a fresh instance: %v, %v", out, err)
	}
	if c.BitsInMemory(ctx(t), act.ID, sku, 1, 0) {
		t.Error("a flag read with nothing invalidated brought the bitset")
	}
}

// TestSellOutReadStalled: Redis stalls (DEBUG SLEEP, past the timeout)
// just as the first read after a sell-out would bring the flags and the
// bitset together. That buyer is told unavailable and holds nothing; once
// Redis is back, fresh request ids are still answered SOLD_OUT from
// memory, winners' repeats still get their reservations, and stock adds up
// (the prefetch is lost, nothing else).
func TestSellOutReadStalled(t *testing.T) {
	srv, s := stallStore(t)
	seller := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("ridstall", 2, 1, 1)
	mustPreheat(t, s, a)
	warm(t, s, a, "warm")
	sku := a.SKUs[0].ID
	if _, err := s.ReadOutFlagsAs(ctx(t), a.ID, sku, 1); err != nil {
		t.Fatal(err)
	}
	winners := map[string]string{}
	for _, u := range []string{"w0", "w1"} {
		q := reserveReq(a, u, 1)
		q.RequestID = "rid-" + u
		if r, err := seller.Reserve(ctx(t), q); err != nil || r.Code != lua.OK {
			t.Fatalf("winner %s on the other instance: %v, %v", u, r.Code, err)
		}
		winners[u] = q.RequestID
	}
	eventually(t, 3*time.Second, "the flag's invalidation marked here", func() bool {
		return s.OutInvalidated(ctx(t), a.ID, sku, 1, 0)
	})
	wait := stalls[0].start(t, srv) // DEBUG SLEEP: reads stall too
	q := reserveReq(a, "late-stalled", 1)
	q.RequestID = "r-late-stalled"
	if r, err := s.Reserve(ctx(t), q); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("buyer during the stall: %v, %v; want unavailable", r.Code, err)
	}
	if s.OutInvalidated(ctx(t), a.ID, sku, 1, 0) {
		t.Error("the stalled buyer's flag read did not take the mark")
	}
	wait()
	var fromMemory int
	eventually(t, 3*time.Second, "fresh request ids answered from memory again", func() bool {
		fromMemory = soldOutFromMemory(t, s, a, 20,
			func(i int) string { return "late-" + strconv.Itoa(i) },
			func(i int) string { return "r-late-" + strconv.Itoa(i) })
		return fromMemory == 20
	})
	wantRepeatsAnswered(t, s, a, winners)
	wantStatus(t, s, a, 0, 2, 0)
}
