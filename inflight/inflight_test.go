package inflight_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const act = "act_inflight"

func openStore(t testing.TB, addr string) *store.Store {
	t.Helper()
	s, err := store.OpenNow(config.Redis{Addrs: []string{addr}, Timeout: redistest.TimeoutScale * time.Second, ClientCache: true, KeyPrefix: "seckill"}, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// instance is one proxy instance's budgets, on its own Redis client.
func instance(t testing.TB, addr, name string, lim inflight.Limits) *inflight.Fleet {
	t.Helper()
	m := metrics.New()
	f := inflight.NewFleet(openStore(t, addr), m.Inflight, m.InflightLimit, zap.NewNop(), name)
	f.Set(act, lim)
	t.Cleanup(f.Close)
	return f
}

// fleetHeld reads what the fleet's budget counts as held, over every instance.
func fleetHeld(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	out, err := srv.Do("HGETALL", "seckill:{"+act+"}:inflight")
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	return sumHeld(out)
}

// TestBudgetNeverAboveLimitAcrossInstances: three instances' senders take
// and give back slots as fast as they can; at no moment are more requests
// in flight than the limit, and every sender gets its turn.
func TestBudgetNeverAboveLimitAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	const limit, senders, rounds = 5, 12, 25
	lim := inflight.Limits{Max: limit, TTL: 2 * time.Second, SendWithin: 500 * time.Millisecond}
	var fleets []*inflight.Fleet
	for i := 0; i < 3; i++ {
		fleets = append(fleets, instance(t, srv.Addr, "i"+strconv.Itoa(i), lim))
	}
	var inFlight, peak, sent atomic.Int64
	perInstance := make([]atomic.Int64, len(fleets))
	var wg sync.WaitGroup
	for i, f := range fleets {
		b := f.Budget(act)
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					slot, res := b.Acquire(context.Background(), 10*time.Second)
					if res != inflight.Got {
						t.Errorf("instance %d: no slot within 10 s: %v", i, res)
						return
					}
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					inFlight.Add(-1)
					sent.Add(1)
					perInstance[i].Add(1)
					b.Done(slot, time.Millisecond, inflight.Answered)
				}
			}()
		}
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("peak in flight %d, limit %d", p, limit)
	}
	if got, want := sent.Load(), int64(len(fleets)*senders*rounds); got != want {
		t.Fatalf("sent %d, want %d", got, want)
	}
	t.Logf("peak in flight %d of %d; per instance %d %d %d", peak.Load(), limit, perInstance[0].Load(), perInstance[1].Load(), perInstance[2].Load())
	// Nothing is left held once every sender is done: slots are given back.
	eventually(t, 5*time.Second, "slots given back", func() bool { return fleetHeld(t, srv) == 0 })
}

// TestBudgetCrashedInstanceSlotsComeBack: an instance that dies holding
// slots keeps them only until its lease expires; then another instance
// gets the whole limit again.
func TestBudgetCrashedInstanceSlotsComeBack(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 4, TTL: 1500 * time.Millisecond, SendWithin: 500 * time.Millisecond}
	a := instance(t, srv.Addr, "crashes", lim)
	b := instance(t, srv.Addr, "survives", lim)
	ba, bb := a.Budget(act), b.Budget(act)
	for i := 0; i < 3; i++ {
		if _, res := ba.Acquire(context.Background(), 0); res != inflight.Got {
			t.Fatalf("instance A slot %d: %v", i, res)
		}
	}
	a.Kill() // three slots in use, never given back

	var mine []inflight.Slot
	take := func() bool {
		s, res := bb.Acquire(context.Background(), 0)
		if res == inflight.Got {
			mine = append(mine, s)
		}
		return res == inflight.Got
	}
	if !take() {
		t.Fatal("B: no slot although one of four is free")
	}
	if take() {
		t.Fatal("B got a second slot while the crashed instance's three are still leased")
	}
	// The lease of A runs out: its slots come back to the fleet.
	eventually(t, 10*time.Second, "crashed instance's slots back", func() bool {
		for len(mine) < 4 && take() {
		}
		return len(mine) == 4
	})
	if take() {
		t.Fatal("B got a fifth slot of four")
	}
	for _, s := range mine {
		bb.Done(s, time.Millisecond, inflight.Answered)
	}
}

// TestBudgetFairShare: one instance's senders keep every slot busy; a
// second instance that starts asking still gets its share, not leftovers.
func TestBudgetFairShare(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 4, TTL: 2 * time.Second, SendWithin: 500 * time.Millisecond}
	hog := instance(t, srv.Addr, "hog", lim).Budget(act)
	late := instance(t, srv.Addr, "late", lim).Budget(act)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(b *inflight.Budget, n int, count *atomic.Int64) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					s, res := b.Acquire(ctx, time.Second)
					if res != inflight.Got {
						continue
					}
					time.Sleep(2 * time.Millisecond)
					count.Add(1)
					b.Done(s, 2*time.Millisecond, inflight.Answered)
				}
			}()
		}
	}
	var hogN, lateN atomic.Int64
	run(hog, 16, &hogN)
	time.Sleep(100 * time.Millisecond) // the hog holds every slot
	hogBefore := hogN.Load()
	run(late, 16, &lateN)
	eventually(t, 10*time.Second, "the late instance served", func() bool { return lateN.Load() >= 200 })
	stop()
	wg.Wait()
	hogAfter := hogN.Load() - hogBefore
	t.Logf("while both asked: hog %d, late %d", hogAfter, lateN.Load())
	// Equal shares of a busy shop: neither gets less than a third of what
	// the other does (the late one was counted to 200 while the hog ran on).
	if l := lateN.Load(); l*3 < hogAfter {
		t.Fatalf("late instance got %d sends against the hog's %d: not a fair share", l, hogAfter)
	}
}

// TestBudgetLimitChangeAndRetire: a lower limit holds from the next
// sends on; removing the bound lets everyone go.
func TestBudgetLimitChangeAndRetire(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 3, TTL: 2 * time.Second, SendWithin: 500 * time.Millisecond}
	f := instance(t, srv.Addr, "one", lim)
	b := f.Budget(act)
	var slots []inflight.Slot
	for i := 0; i < 3; i++ {
		s, res := b.Acquire(context.Background(), 0)
		if res != inflight.Got {
			t.Fatalf("slot %d: %v", i, res)
		}
		slots = append(slots, s)
	}
	if _, res := b.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("fourth slot of three: %v, want full", res)
	}
	lim.Max = 1
	f.Set(act, lim)
	for _, s := range slots[:2] {
		b.Done(s, time.Millisecond, inflight.Answered)
	}
	// One still in flight = the new limit: no room.
	if _, res := b.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("slot above the lowered limit: %v, want full", res)
	}
	if got := b.Limit(); got != 1 {
		t.Fatalf("limit in force %d, want 1", got)
	}
	b.Done(slots[2], time.Millisecond, inflight.Answered)
	if s, res := b.Acquire(context.Background(), 0); res != inflight.Got {
		t.Fatalf("slot under the lowered limit: %v", res)
	} else {
		b.Done(s, time.Millisecond, inflight.Answered)
	}
	// No bound any more: any number go.
	f.Set(act, inflight.Limits{})
	for i := 0; i < 10; i++ {
		if _, res := b.Acquire(context.Background(), 0); res != inflight.Got {
			t.Fatalf("retired budget refused: %v", res)
		}
	}
	if f.Budget(act) != nil {
		t.Fatal("a removed bound still has a budget")
	}
	eventually(t, 5*time.Second, "slots given back", func() bool { return fleetHeld(t, srv) == 0 })
}

// TestBudgetRedisDown: with Redis gone, a sender waiting for one look is
// told Down, not left hanging; slots still leased may be used until the
// lease would no longer outlive a request and the hold after it (2 ×
// SendWithin), never after.
func TestBudgetRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 2, TTL: 1200 * time.Millisecond, SendWithin: 500 * time.Millisecond}
	b := instance(t, srv.Addr, "one", lim).Budget(act)
	s, res := b.Acquire(context.Background(), 0)
	if res != inflight.Got {
		t.Fatalf("slot: %v", res)
	}
	srv.Kill()
	killed := time.Now()
	b.Done(s, time.Millisecond, inflight.Answered)
	eventually(t, 10*time.Second, "down reported", func() bool {
		s, res := b.Acquire(context.Background(), 0)
		if res == inflight.Got {
			if time.Since(killed) > lim.TTL-2*lim.SendWithin {
				t.Fatal("a slot handed out when its lease could expire before the request ends")
			}
			b.Done(s, time.Millisecond, inflight.Answered)
		}
		return res == inflight.Down
	})
	for end := time.Now().Add(lim.TTL); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, res := b.Acquire(context.Background(), 0); res == inflight.Got {
			t.Fatal("a slot handed out with the fleet's budget unreachable")
		}
	}
}

func sumHeld(hgetall string) int64 {
	// srv.Do renders an array reply one element a line.
	var n int64
	lines := strings.Split(hgetall, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		if len(lines[i]) > 2 && lines[i][:2] == "h:" {
			v, _ := strconv.ParseInt(lines[i+1], 10, 64)
			n += v
		}
	}
	return n
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
