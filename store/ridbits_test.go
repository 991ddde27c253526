package store_test

import (
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
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
	fromMemory := 0
	for i := 0; i < 500; i++ {
		q := reserveReq(a, "late-"+strconv.Itoa(i), 1)
		q.RequestID = "r-" + strconv.Itoa(i)
		res, err := s.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if res.Code != lua.Empty {
			t.Fatalf("late buyer %d: %v", i, res.Code)
		}
		if res.FromMemory {
			fromMemory++
		}
	}
	if fromMemory < 490 {
		t.Errorf("%d of 500 sold-out buys with a fresh request id answered from memory, want nearly all", fromMemory)
	}
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
