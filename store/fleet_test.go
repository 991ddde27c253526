package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// The fleet roll call: beats count live instances, a clean leave takes one
// off at once, and the set is one key of its own slot (a cluster too).
func TestFleetRollCall(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cluster bool
	}{{"single", false}, {"cluster", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var addrs []string
			if tt.cluster {
				addrs = redistest.StartCluster(t, 3).Addrs()
			} else {
				addrs = []string{redistest.Start(t).Addr}
			}
			s := openStore(t, redisConfig(addrs, tt.cluster))
			beat := func(id string) int {
				t.Helper()
				n, err := s.FleetBeat(ctx(t), id, 2*time.Second)
				if err != nil {
					t.Fatalf("FleetBeat: %v", err)
				}
				return n
			}
			if n := beat("a"); n != 1 {
				t.Fatalf("alone: %d", n)
			}
			beat("b")
			if n := beat("c"); n != 3 {
				t.Fatalf("three: %d", n)
			}
			if err := s.FleetLeave(ctx(t), "b"); err != nil {
				t.Fatalf("FleetLeave: %v", err)
			}
			if n := beat("a"); n != 2 {
				t.Fatalf("after a leave: %d", n)
			}
		})
	}
}

func TestFleetBeatRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	if _, err := s.FleetBeat(ctx(t), "a", time.Second); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := s.FleetBeat(ctx(t), "a", time.Second); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("FleetBeat with Redis down: %v, want ErrUnavailable", err)
	}
}
