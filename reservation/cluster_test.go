package reservation_test

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Every script of the reservation life on a 3-master cluster: queue
// workers (consumer groups, XAUTOCLAIM, the bucket), the lease, fenced
// repairs, deposits. A cross-slot key would fail here, not on one node.
func TestClusterReservationLife(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	c := redistest.StartCluster(t, 3)
	st := openStore(t, c.Addrs()...)
	sh := newShop(t)
	cfg := proxyConfig(t, c.Addrs(), sh.srv.URL, config.ModeQueue, 12, 4, 1000)
	a := &cfg.Activities[0]
	if _, err := st.Preheat(tctx(t), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	var toks []store.Token
	for i := 0; i < 8; i++ {
		toks = append(toks, reserve(t, st, a, "cu"+strconv.Itoa(i), time.Now().UnixMilli(), true))
	}
	// Two stale sync-style reservations for the reconciler: one the shop has.
	staleHas := reserve(t, st, a, "stale-1", old, false)
	staleNot := reserve(t, st, a, "stale-2", old, false)
	sh.orders[staleHas.String()] = "O-S"

	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "c1", ClaimIdle: time.Second})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 20*time.Second, "queue drained", func() bool {
		for _, tok := range toks {
			r, ok, err := st.Lookup(tctx(t), tok, a.Shards)
			if err != nil || !ok || r.State != store.StateConfirmed {
				return false
			}
		}
		return true
	})
	rec, _ := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rep); got[staleHas.String()] != "confirmed" || got[staleNot.String()] != "released" {
		t.Fatalf("repairs: %v", got)
	}
	s := status(t, st, a)
	if !s.OK || s.Confirmed != 9 || s.Pending != 0 || s.Released != 1 {
		t.Fatalf("status: %+v", s)
	}
	// A stale fence is refused on a cluster too.
	tok := reserve(t, st, a, "late", time.Now().UnixMilli(), false)
	if code, err := st.ReleaseFenced(tctx(t), tok, a.Shards, "x", 0, true, 0, store.Fence{Token: 1, ExpireAt: store.ExpireAt(a)}); err != nil || code != lua.Fenced {
		t.Fatalf("stale fence on cluster: %v %v", code, err)
	}
}
