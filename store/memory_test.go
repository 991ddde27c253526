package store_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestMemoryPerReservation measures what one reservation costs Redis, on a
// default redis-server, over 100,000 reservations: pending, then
// confirmed, and what a refused buyer costs (sold out, and over the limit).
// Figures go to BENCHMARKS.md ("Reservation life"). Run:
//
//	go test -run TestMemoryPerReservation -v ./store/
func TestMemoryPerReservation(t *testing.T) {
	if testing.Short() {
		t.Skip("memory measurement: 100,000 reservations")
	}
	const n = 100_000
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("mem_act_1001", n, 8, 1)
	mustPreheat(t, s, a)
	used := func() int64 {
		_, _ = srv.Do("MEMORY", "PURGE")
		return redistest.ParseStat(srv.Info("memory", "used_memory"), "used_memory")
	}
	keysUsage := func() int64 {
		var sum int64
		for _, sk := range s.SKUKeys(a.ID, testSKU, a.Shards).Shards {
			for _, k := range []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves} {
				v, err := srv.Do("MEMORY", "USAGE", k, "SAMPLES", "0")
				if err == nil && v != "" {
					sum += atoi64(v)
				}
			}
		}
		return sum
	}
	parallel := func(f func(i int)) {
		var wg sync.WaitGroup
		const workers = 16
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += workers {
					f(i)
				}
			}(w)
		}
		wg.Wait()
	}
	user := func(i int) string { return "u" + strconv.Itoa(10_000_000+i) } // 9-byte ids
	base, baseKeys := used(), keysUsage()

	toks := make([]store.Token, n)
	parallel(func(i int) {
		r, err := s.Reserve(context.Background(), reserveReq(a, user(i), 1))
		if err != nil || r.Code != lua.OK {
			t.Errorf("reserve %d: %v %v", i, r.Code, err)
			return
		}
		toks[i] = r.Token
	})
	if t.Failed() {
		return
	}
	pend, pendKeys := used(), keysUsage()
	parallel(func(i int) {
		if code, err := s.Confirm(context.Background(), toks[i], a.Shards, strconv.Itoa(1_000_000+i)); err != nil || code != lua.OK {
			t.Errorf("confirm %d: %v %v", i, code, err)
		}
	})
	conf, confKeys := used(), keysUsage()
	// Refused buyers: sold out (new users), and over the limit (old users).
	parallel(func(i int) {
		r, err := s.Reserve(context.Background(), reserveReq(a, "late"+strconv.Itoa(i), 1))
		if err != nil || r.Code != lua.Empty {
			t.Errorf("late buyer %d: %v %v", i, r.Code, err)
		}
	})
	parallel(func(i int) {
		if i%10 != 0 {
			return
		}
		r, err := s.Reserve(context.Background(), reserveReq(a, user(i), 1))
		// Sold out everywhere: answered from the cached flags (EMPTY)
		// before the limit is even looked at; either way nothing is written.
		if err != nil || (r.Code != lua.Purchased && r.Code != lua.Empty) {
			t.Errorf("repeat buyer %d: %v %v", i, r.Code, err)
		}
	})
	refused := used()
	per := func(a, b int64) float64 { return float64(b-a) / n }
	t.Logf("redis %s, default config; %d reservations, 8 shards, 9-byte user ids, 7-digit order ids", redisVersion(srv), n)
	t.Logf("per pending reservation:   %.0f B (used_memory), %.0f B (MEMORY USAGE of the keys)", per(base, pend), per(baseKeys, pendKeys))
	t.Logf("per confirmed reservation: %.0f B (used_memory), %.0f B (MEMORY USAGE of the keys)", per(base, conf), per(baseKeys, confKeys))
	t.Logf("per refused buyer:         %.1f B (used_memory; %d sold-out + %d over-limit buyers)", float64(refused-conf)/(n+n/10), n, n/10)
	if c := per(base, conf); c > 300 {
		t.Errorf("a confirmed reservation costs %.0f B; target <= 300 B", c)
	}
	if r := float64(refused-conf) / (n + n/10); r > 1 {
		t.Errorf("a refused buyer costs %.1f B; target 0", r)
	}
}

func atoi64(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func redisVersion(srv *redistest.Server) string {
	return srv.Info("server", "redis_version")
}
