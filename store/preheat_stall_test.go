package store_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// An operator's preheat sent while Redis is stalled for longer than
// redis.timeout (a busy Redis, a fork, a GC pause on the proxy) waits the
// stall out instead of failing on its first lock call (it failed CI once:
// "preheat qs: redis unavailable: context deadline exceeded").
func TestPreheatOutlastsAStallLongerThanRedisTimeout(t *testing.T) {
	for _, st := range stalls {
		t.Run(st.name, func(t *testing.T) {
			srv, s := stallStore(t)
			a := newActivity("ps", 10, 2, 1)
			// Load the lease script before the stall (EVALSHA sent during a
			// stall would find NOSCRIPT afterwards; rueidis retries it with
			// EVAL, but the first call must not be the one under test).
			mustPreheat(t, s, a)
			if _, err := s.Preheat(ctx(t), newActivity("other", 1, 1, 1), false, time.Now()); err != nil {
				t.Fatal(err)
			}
			wait := st.start(t, srv)
			if _, err := s.Preheat(ctx(t), newActivity("ps2", 10, 2, 1), false, time.Now()); err != nil {
				t.Fatalf("preheat during a %s of %s (redis.timeout 100ms): %v", st.name, stallFor, err)
			}
			wait()
			mustReserve(t, s, newActivity("ps2", 10, 2, 1), "u1", 1, lua.OK)
		})
	}
}
