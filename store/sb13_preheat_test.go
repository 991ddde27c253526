package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestSB13TwoPreheatsDuringStall: two operators (two proxies' stores)
// preheat the same activity at once while Redis stalls past
// redis.timeout, in both stall kinds. Both succeed (one loads, the other
// finds it loaded), and the stock is loaded once: exactly stock units sell.
func TestSB13TwoPreheatsDuringStall(t *testing.T) {
	for _, st := range stalls {
		t.Run(st.name, func(t *testing.T) {
			srv, s1 := stallStore(t)
			cfg := redisConfig([]string{srv.Addr}, false)
			cfg.Timeout = 100 * time.Millisecond
			s2 := openStore(t, cfg)
			// Scripts loaded on both clients first (see TestPreheatOutlastsAStallLongerThanRedisTimeout).
			mustPreheat(t, s1, newActivity("w1", 1, 1, 1))
			mustPreheat(t, s2, newActivity("w2", 1, 1, 1))
			a := newActivity("tp", 6, 2, 1)
			a.Start = time.Now().Add(time.Hour) // not running yet: a preheat may load it
			a.End = a.Start.Add(time.Hour)
			wait := st.start(t, srv)
			var wg sync.WaitGroup
			outs := make([]store.PreheatOutcome, 2)
			errs := make([]error, 2)
			for i, s := range []*store.Store{s1, s2} {
				wg.Add(1)
				go func() { defer wg.Done(); outs[i], errs[i] = s.Preheat(ctx(t), a, false, time.Now()) }()
			}
			wg.Wait()
			wait()
			for i := range errs {
				if errs[i] != nil {
					t.Errorf("operator %d: %v", i, errs[i])
				}
			}
			t.Logf("outcomes %v", outs)
			run := *a
			run.Start, run.End = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
			for i := range 6 {
				mustReserve(t, s1, &run, fmt.Sprintf("u%d", i), 1, lua.OK)
			}
			res, err := s1.Reserve(ctx(t), reserveReq(&run, "u6", 1))
			if err != nil || res.Code == lua.OK {
				t.Fatalf("a seventh unit of six: %v %v", res.Code, err)
			}
		})
	}
}

// TestSB13PreheatGivenUpLeavesLockHeld: an operator's preheat during a
// Redis stall longer than its lock-call retry bound (max(2s, 10 x
// redis.timeout)) is reported unavailable, as promised (b60cd16). But its
// lock calls were written to Redis and run when the stall ends: the lock
// is then held by a preheat that has returned and will never release it.
// The operator's retry, once Redis answers again, waits out that lock's
// TTL (10 x redis.timeout + 10 s) and fails with "another preheat of ...
// has held its lock"; a scheduled preheat_at in that window is missed.
func TestSB13PreheatGivenUpLeavesLockHeld(t *testing.T) {
	srv, s := stallStore(t)
	mustPreheat(t, s, newActivity("w1", 1, 1, 1))
	a := newActivity("pg", 5, 2, 1)
	a.Start = time.Now().Add(time.Hour)
	a.End = a.Start.Add(time.Hour)
	done := make(chan error, 1)
	go func() { _, err := srv.Do("DEBUG", "SLEEP", "2.6"); done <- err }()
	time.Sleep(30 * time.Millisecond)
	t0 := time.Now()
	_, err := s.Preheat(ctx(t), a, false, time.Now())
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("preheat during a 2.6 s stall: %v (want unavailable)", err)
	}
	t.Logf("first preheat gave up after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if err := <-done; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	// Redis answers again: the operator retries.
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	t1 := time.Now()
	if _, err := s.Preheat(c, a, false, time.Now()); err != nil {
		keys, _ := srv.Do("KEYS", "*preheat:pg*")
		t.Logf("lock keys: %v", keys)
		t.Fatalf("the operator's retry on a healthy Redis: %v after %v (the given-up preheat's lock calls landed after the stall; its lock is held, never released)",
			err, time.Since(t1).Round(time.Millisecond))
	}
}
