package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// stallFor is how long each stall holds Redis: four times the test's
// per-command timeout, as in issue 8's measurement.
const stallFor = 400 * time.Millisecond

// stalls are the two ways Redis stops answering while its clients keep
// their connections: a blocked server (DEBUG SLEEP) and a write pause
// (CLIENT PAUSE ... WRITE, which holds every script). Each starts the
// stall and returns a function that waits for its end.
var stalls = []struct {
	name  string
	start func(t *testing.T, srv *redistest.Server) (wait func())
}{
	{name: "debug sleep", start: func(t *testing.T, srv *redistest.Server) func() {
		done := make(chan error, 1)
		go func() { _, err := srv.Do("DEBUG", "SLEEP", fmt.Sprint(stallFor.Seconds())); done <- err }()
		time.Sleep(30 * time.Millisecond) // the sleep has begun
		return func() {
			if err := <-done; err != nil {
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
		}
	}},
	{name: "client pause write", start: func(t *testing.T, srv *redistest.Server) func() {
		if _, err := srv.Do("CLIENT", "PAUSE", fmt.Sprint(stallFor.Milliseconds()), "WRITE"); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		t0 := time.Now()
		return func() { time.Sleep(stallFor - time.Since(t0) + 10*time.Millisecond) }
	}},
}

// stallStore is a store with a 100 ms command timeout on a Redis that
// takes DEBUG SLEEP.
func stallStore(t *testing.T) (*redistest.Server, *store.Store) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	cfg := redisConfig([]string{srv.Addr}, false)
	cfg.Timeout = 100 * time.Millisecond
	return srv, openStore(t, cfg)
}

// warm reserves and releases one unit for user, so every script is loaded
// in Redis before a stall: a script first sent during a stall would run as
// EVALSHA, find NOSCRIPT afterwards and never run at all.
func warm(t *testing.T, s *store.Store, a *config.Activity, user string) {
	t.Helper()
	tok := mustReserve(t, s, a, user, 1, lua.OK).Token
	if c, err := s.Release(ctx(t), tok, a.Shards, "warm-up", time.Now().UnixMilli(), true); err != nil || c != lua.OK {
		t.Fatalf("Release(warm-up) = %v, %v", c, err)
	}
}

// Issue 8 §2: three 400 ms stalls with 10 buyers in flight each. Every
// buyer told "unavailable" holds nothing: without the reconciler, nothing
// stays pending, each can buy again at once and wins (stock allows), no
// user holds more than the limit and stock adds up.
func TestStallLeavesNothingHeld(t *testing.T) {
	for _, tt := range stalls {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := stallStore(t)
			a := newActivity("act_stall", 40, 2, 1)
			mustPreheat(t, s, a)
			warm(t, s, a, "warm")
			// Sold-out flags come from local memory from now on, so buyers
			// in flight during the stall reach the reserve script.
			if _, err := s.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil {
				t.Fatal(err)
			}
			winners := map[string]store.Token{}
			var late []string // the last round's refused buyers retry only at the end
			refused := 0
			for round := 0; round < 3; round++ {
				wait := tt.start(t, srv)
				var mu sync.Mutex
				var failed []string
				var wg sync.WaitGroup
				for i := 0; i < 10; i++ {
					user := fmt.Sprintf("r%d-u%d", round, i)
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := s.Reserve(ctx(t), reserveReq(a, user, 1))
						mu.Lock()
						defer mu.Unlock()
						switch {
						case errors.Is(err, store.ErrUnavailable):
							failed = append(failed, user)
						case err != nil:
							t.Errorf("Reserve(%s): %v", user, err)
						case res.Code == lua.OK:
							winners[user] = res.Token
						default:
							t.Errorf("Reserve(%s) = %v", user, res.Code)
						}
					}()
				}
				wg.Wait()
				wait()
				refused += len(failed)
				if round == 2 {
					late = failed
					continue
				}
				for _, u := range failed {
					winners[u] = mustReserve(t, s, a, u, 1, lua.OK).Token
				}
			}
			if refused == 0 {
				t.Fatal("no buyer was in flight during a stall")
			}
			for u, tok := range winners {
				if c, err := s.Confirm(ctx(t), tok, a.Shards, "o-"+u); err != nil || c != lua.OK {
					t.Fatalf("Confirm(%s) = %v, %v", u, c, err)
				}
			}
			// No reconciler runs here: aborts settle what the stalls left.
			eventually(t, 3*time.Second, "nothing pending after the stalls", func() bool {
				st := status(t, s, a)
				return st.OK && st.Pending == 0
			})
			n := int64(len(winners))
			wantStatus(t, s, a, 40-n, 0, n)
			for _, u := range late {
				mustReserve(t, s, a, u, 1, lua.OK)
			}
			wantStatus(t, s, a, 40-n-int64(len(late)), int64(len(late)), n)
			// Nobody holds more than the limit: a confirmed buyer's next buy
			// is ALREADY_PURCHASED, a late winner's is PENDING.
			for u := range winners {
				mustReserve(t, s, a, u, 1, lua.Purchased)
			}
			for _, u := range late {
				mustReserve(t, s, a, u, 1, lua.Pending)
			}
		})
	}
}

// A buyer refused during a stall retries on another instance before the
// first instance's abort ran: they may hear PENDING for the phantom, never
// win a second unit, and win once the abort has run.
func TestStallRetryElsewhereKeepsLimit(t *testing.T) {
	srv, s1 := stallStore(t)
	cfg := redisConfig([]string{srv.Addr}, false)
	cfg.Timeout = 100 * time.Millisecond
	s2 := openStore(t, cfg)
	a := newActivity("act_sx", 10, 2, 1)
	mustPreheat(t, s1, a)
	warm(t, s1, a, "warm")
	if _, err := s1.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil {
		t.Fatal(err)
	}
	wait := stalls[0].start(t, srv)
	if _, err := s1.Reserve(ctx(t), reserveReq(a, "u", 1)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve during the stall = %v, want ErrUnavailable", err)
	}
	wait()
	var tok store.Token
	eventually(t, 3*time.Second, "the buyer wins on the other instance", func() bool {
		res, err := s2.Reserve(ctx(t), reserveReq(a, "u", 1))
		if err != nil {
			return false
		}
		switch res.Code {
		case lua.OK:
			tok = res.Token
			return true
		case lua.Pending:
			return false
		}
		t.Fatalf("retry on the other instance = %v", res.Code)
		return false
	})
	if c, err := s2.Confirm(ctx(t), tok, a.Shards, "o1"); err != nil || c != lua.OK {
		t.Fatalf("Confirm = %v, %v", c, err)
	}
	wantStatus(t, s2, a, 9, 0, 1)
	mustReserve(t, s2, a, "u", 1, lua.Purchased)
}

// A steal whose reply came too late moved units out of the donor: they
// land on the buyer's home shard without the reconciler, and the buyer
// wins them on their retry.
func TestStallDuringStealLosesNoStock(t *testing.T) {
	srv, s := stallStore(t)
	a := newActivity("act_sts", 1, 2, 1) // shard 0 holds the unit, shard 1 none
	mustPreheat(t, s, a)
	// The warm-up moves the unit to shard 1 and gives it back there.
	warm(t, s, a, userOn(1, 2, 1))
	if _, err := s.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil {
		t.Fatal(err)
	}
	u := userOn(0, 2, 0)
	wait := stalls[0].start(t, srv)
	if _, err := s.Reserve(ctx(t), reserveReq(a, u, 1)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve during the stall = %v, want ErrUnavailable", err)
	}
	wait()
	eventually(t, 3*time.Second, "the moved unit lands", func() bool {
		st := status(t, s, a)
		return st.OK && st.InTransit == 0
	})
	mustReserve(t, s, a, u, 1, lua.OK)
	wantStatus(t, s, a, 0, 1, 0)
}

// The buyer's client repeats the refused request with the same
// X-Request-Id: the repeat is decided afresh (the late reservation's
// request-id record goes with it), not answered RELEASED or PENDING.
func TestStallRetrySameRequestID(t *testing.T) {
	srv, s := stallStore(t)
	a := newActivity("act_srid", 10, 2, 1)
	mustPreheat(t, s, a)
	warm(t, s, a, "warm")
	if _, err := s.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil {
		t.Fatal(err)
	}
	q := reserveReq(a, "u", 1)
	q.RequestID = "req-1"
	wait := stalls[1].start(t, srv)
	if _, err := s.Reserve(ctx(t), q); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve during the stall = %v, want ErrUnavailable", err)
	}
	wait()
	res, err := s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("repeat of the refused request = %v, %v; want OK", res.Code, err)
	}
	wantStatus(t, s, a, 9, 1, 0)
	// And its own repeat now answers by the new reservation.
	if again, err := s.Reserve(ctx(t), q); err != nil || again.Code != lua.Pending || again.Token != res.Token {
		t.Fatalf("second repeat = %+v, %v; want PENDING with %v", again, err, res.Token)
	}
}

// The same in queue mode: a late reserve there writes a queued record and
// a stream entry. The abort releases the queued record (no worker has
// claimed it: the buyer was told "unavailable"), so afterwards only the
// winners' units are held and every refused buyer can buy again at once.
func TestStallLeavesNothingQueued(t *testing.T) {
	srv, s := stallStore(t)
	a := newActivity("act_stallq", 40, 2, 1)
	a.Mode = config.ModeQueue
	mustPreheat(t, s, a)
	queued := func(user string) store.ReserveRequest {
		q := reserveReq(a, user, 1)
		q.Queue, q.MaxBacklog = true, 1000
		return q
	}
	warmTok, err := s.Reserve(ctx(t), queued("warm"))
	if err != nil || warmTok.Code != lua.OK {
		t.Fatalf("warm-up: %v %v", warmTok.Code, err)
	}
	if c, err := s.Release(ctx(t), warmTok.Token, a.Shards, "warm-up", time.Now().UnixMilli(), false); err != nil || c != lua.OK {
		t.Fatalf("Release(warm-up) = %v, %v", c, err)
	}
	wait := stalls[0].start(t, srv)
	var mu sync.Mutex
	var failed []string
	won := 0
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		user := fmt.Sprintf("q-u%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Reserve(ctx(t), queued(user))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, store.ErrUnavailable):
				failed = append(failed, user)
			case err == nil && res.Code == lua.OK:
				won++
			default:
				t.Errorf("Reserve(%s) = %v, %v", user, res.Code, err)
			}
		}()
	}
	wg.Wait()
	wait()
	if len(failed) == 0 {
		t.Fatal("no buyer was in flight during the stall")
	}
	eventually(t, 3*time.Second, "only the winners' units held after the stall", func() bool {
		st := status(t, s, a)
		return st.OK && st.Pending == int64(won)
	})
	for _, u := range failed {
		if res, err := s.Reserve(ctx(t), queued(u)); err != nil || res.Code != lua.OK {
			t.Errorf("%s after the stall: %v %v, want a new reservation", u, res.Code, err)
		}
	}
	wantStatus(t, s, a, 40-10, 10, 0)
}
