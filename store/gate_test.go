package store_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestGateBoundsScriptsAtSellOut: 600 buyers at once for 20 units. Exactly
// 20 win and nobody is refused for anything but SOLD_OUT, as before; but the
// instance no longer writes a reserve call for every buyer in flight: at most
// the units left plus the gate's slack go to Redis at a time, and once the
// sold-out flag shows the rest are answered from memory.
func TestGateBoundsScriptsAtSellOut(t *testing.T) {
	if testing.Short() {
		t.Skip("200 buyers must each get their turn within the Redis timeout: a real-time bound, in the plain pass (make test), not under -race")
	}
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("gate", 20, 1, 1)
	mustPreheat(t, s, a)
	before := evalCalls(srv)

	const buyers = 600
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make([]lua.Code, buyers)
	toks := make([]store.Token, buyers)
	gated := make([]bool, buyers)
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			q := reserveReq(a, "g"+strconv.Itoa(i), 1)
			q.Stock = a.SKUs[0].Stock // as admission sends it
			r, err := s.Reserve(ctx(t), q)
			if err != nil {
				t.Errorf("reserve: %v", err)
				return
			}
			codes[i], toks[i], gated[i] = r.Code, r.Token, r.FromGate
		}()
	}
	close(start)
	wg.Wait()
	won, empty := 0, 0
	for _, c := range codes {
		switch c {
		case lua.OK:
			won++
		case lua.Empty:
			empty++
		default:
			t.Errorf("code %v, want OK or EMPTY", c)
		}
	}
	if won != 20 || empty != buyers-20 {
		t.Fatalf("won %d, sold out %d; want 20 and %d", won, empty, buyers-20)
	}
	wantStatus(t, s, a, 0, 20, 0)
	// 20 units + 16 slack in flight at first, then each reply lets as many
	// through as its units and the slack allow: the flag shows within a few
	// of those rounds (a round whose waiters ran before the invalidation
	// did sends its slack). Without the gate every buyer in flight sent one:
	// 598 of 600 when this test was written.
	calls := evalCalls(srv) - before
	fromGate := 0
	for i, g := range gated {
		if g {
			fromGate++
			if codes[i] != lua.Empty {
				t.Errorf("buyer %d answered %v from the gate, want EMPTY", i, codes[i])
			}
		}
	}
	t.Logf("%d reserve scripts for %d buyers and 20 units; %d answered SOLD_OUT at their turn", calls, buyers, fromGate)
	if fromGate == 0 {
		t.Error("no buyer was answered from the sold-out flags at their turn: the gate held nobody")
	}
	if calls > 20+6*16 {
		t.Fatalf("%d reserve scripts for 20 units, want at most %d", calls, 20+6*16)
	}

	// Units come back (5 released): the instance last heard 0 were left, so
	// its bound is the slack alone; those calls' replies raise it again and
	// exactly 5 of 200 new buyers win, nobody waits past the deadline.
	released := 0
	for i, c := range codes {
		if c == lua.OK && released < 5 {
			if code, err := s.Release(ctx(t), toks[i], a.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
				t.Fatalf("release = %v, %v", code, err)
			}
			released++
		}
	}
	eventually(t, 2*time.Second, "the sold-out flag gone", func() bool {
		out, err := s.SoldOut(ctx(t), a.ID, a.SKUs[0].ID, a.Shards)
		return err == nil && !out
	})
	var mu sync.Mutex
	again := map[lua.Code]int{}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := reserveReq(a, "h"+strconv.Itoa(i), 1)
			q.Stock = a.SKUs[0].Stock
			r, err := s.Reserve(ctx(t), q)
			if err != nil {
				t.Errorf("reserve after the release: %v", err)
				return
			}
			mu.Lock()
			again[r.Code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if again[lua.OK] != 5 || again[lua.Empty] != 195 {
		t.Fatalf("after 5 released: %v, want 5 OK and 195 EMPTY", again)
	}
	wantStatus(t, s, a, 0, 20, 0)
}

// TestGateStallHoldsNothing: Redis stalls past the timeout while 60 buyers
// want 3 units. The calls in flight time out as before (and are settled by
// abort); the buyers waiting at the gate time out too, unavailable, and
// write no call. Afterwards nothing is held and the 3 units sell to the
// next buyers, exactly.
func TestGateStallHoldsNothing(t *testing.T) {
	for _, tt := range stalls {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := stallStore(t)
			a := newActivity("act_gstall", 3, 1, 1)
			mustPreheat(t, s, a)
			warm(t, s, a, "warm")
			before := evalCalls(srv)
			wait := tt.start(t, srv)
			var wg sync.WaitGroup
			var mu sync.Mutex
			gated, unavailable := 0, 0
			for i := range 60 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					q := reserveReq(a, "s"+strconv.Itoa(i), 1)
					q.Stock = a.SKUs[0].Stock
					_, err := s.Reserve(ctx(t), q)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case errors.Is(err, store.ErrUnavailable):
						unavailable++
						if strings.Contains(err.Error(), "waited for a turn") {
							gated++
						}
					case err != nil:
						t.Errorf("reserve: %v", err)
					}
				}()
			}
			wg.Wait()
			wait()
			eventually(t, 5*time.Second, "every call of the stall settled", func() bool {
				st := status(t, s, a)
				return st.Pending == 0 && st.Remaining == 3
			})
			// Written: at most the 3 units + 16 reserves in flight, and an
			// abort for each; a waiter whose turn came with its deadline
			// writes nothing either (the call checks its deadline first).
			// Without the gate: 60 reserves and 60 aborts.
			calls := evalCalls(srv) - before
			t.Logf("%d of 60 unavailable (%d told at the gate); %d scripts reached Redis", unavailable, gated, calls)
			if max := int64(2*(3+16) + 4); calls > max {
				t.Fatalf("%d scripts reached Redis during and after the stall, want at most %d", calls, max)
			}
			for i := range 3 {
				q := reserveReq(a, "after"+strconv.Itoa(i), 1)
				q.Stock = a.SKUs[0].Stock
				if r, err := s.Reserve(ctx(t), q); err != nil || r.Code != lua.OK {
					t.Fatalf("buy %d after the stall = %v, %v", i, r.Code, err)
				}
			}
			// SOLD_OUT from memory once the stall's settles are
			// transitGrace past (STORE_UNAVAILABLE until then, §54).
			eventually(t, time.Second, "SOLD_OUT after the settles", func() bool {
				r, err := s.Reserve(ctx(t), reserveReq(a, "after-late", 1))
				return err == nil && r.Code == lua.Empty
			})
			wantStatus(t, s, a, 0, 3, 0)
		})
	}
}
