package store_test

// Red-team tests of the cluster paths: failover, lagging replicas, stock
// moves between shards on different masters, durable winners. Real
// redis-server processes only (internal/redistest).

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rcMasters returns the master of every shard of a's SKU.
func rcMasters(t *testing.T, cl *redistest.Cluster, s *store.Store, a *config.Activity) []*redistest.Server {
	t.Helper()
	var out []*redistest.Server
	for _, sk := range s.SKUKeys(a.ID, testSKU, a.Shards).Shards {
		m, err := cl.MasterFor(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// rcWaitHealthy waits until a killed master's replica serves its slots.
func rcWaitHealthy(t *testing.T, cl *redistest.Cluster, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cl.Healthy()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy within %v: %s", within, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedTeamClusterDurableLateStealNotDoubled: durable winners on
// (README "Durable winners": with them, units moved between shards "are
// used only once the donor's replicas have the steal … or, if the donor's
// master died first, finds no steal and deposits nothing, so no unit
// exists twice"). A steal whose reply comes late (the donor's master is
// busy: CLIENT PAUSE WRITE) is settled by settlemove.lua once the donor
// answers; its units must not be deposited on the home shard before the
// donor's replicas have the steal. Sequence: 2 shards on two masters, 2
// units each; home shard bought out; the donor's replica stops (SIGSTOP,
// link cut); the donor pauses writes 600 ms; a buyer homed on the dry
// shard steals (times out: STORE_UNAVAILABLE); the donor runs the steal
// and the retrier settles it; the donor's master is killed before its
// replica ever saw the steal; the replica is promoted. Afterwards Redis
// must hold no more than the initial stock, and no more than 4 units may
// be sold.
func TestRedTeamClusterDurableLateStealNotDoubled(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster failover run: in the plain pass (make test), not under -race")
	}
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	s := openStore(t, durableConfig(cl.Addrs(), true, config.DurableRefuse))
	a := newActivity("rc_late", 4, 2, 1)
	mustPreheat(t, s, a)
	eventually(t, 10*time.Second, "preheat replicated", cl.Replicated)
	masters := rcMasters(t, cl, s, a)
	if masters[0] == masters[1] {
		t.Fatalf("both shards on %s: placement should spread 2 shards over 2 masters", masters[0].Addr)
	}
	home, donor := 0, 1
	D := masters[donor]
	// The home shard is bought out (durable winners).
	for n := 0; n < 2; n++ {
		u := userOn(home, 2, n)
		res := mustReserve(t, s, a, u, 1, lua.OK)
		if d, err := s.MakeDurable(ctx(t), reserveReq(a, u, 1), res); d != store.DurableOK {
			t.Fatalf("winner %s: %v %v", u, d, err)
		}
	}
	wantStatus(t, s, a, 2, 2, 0)
	eventually(t, 5*time.Second, "home seen dry", func() bool {
		out, err := s.ReadOutFlagsAs(ctx(t), a.ID, testSKU, a.Shards)
		return err == nil && out[home]
	})

	// The donor's replica lags from now on.
	rep, err := cl.ReplicaOf(D)
	if err != nil || rep == nil {
		t.Fatalf("replica of the donor %s: %v %v", D.Addr, rep, err)
	}
	rep.Pause(t)
	if _, err := D.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatalf("cut the replica link: %v", err)
	}
	tLag := time.Now()
	// The donor is busy: the steal's reply misses redis.timeout.
	if _, err := D.Do("CLIENT", "PAUSE", "600", "WRITE"); err != nil {
		t.Fatalf("client pause: %v", err)
	}
	mover := userOn(home, 2, 2)
	res, err := s.Reserve(ctx(t), reserveReq(a, mover, 1))
	if err == nil {
		t.Logf("mover's reserve answered %+v (no timeout)", res)
	} else {
		t.Logf("mover's reserve: %v", err)
	}
	// Wait for the late steal to run on the donor and be settled (or not).
	time.Sleep(900 * time.Millisecond)
	st := status(t, s, a)
	homeStock := s.SKUKeys(a.ID, testSKU, a.Shards).Shards[home].Stock
	hi, _ := masters[home].Do("HGET", homeStock, "i")
	t.Logf("before the kill (%v after the replica stopped): %+v, home i=%s", time.Since(tLag).Round(time.Millisecond), st, hi)

	D.Kill()
	rep.Resume(t)
	rcWaitHealthy(t, cl, 20*time.Second)
	after := status(t, s, a)
	t.Logf("after the failover: %+v", after)
	if !after.OK || after.InTransit < 0 {
		t.Errorf("durable winners, after the donor's failover: %+v; the shards hold %d units for an initial %d (a unit exists twice)",
			after, after.Initial-after.InTransit, a.SKUs[0].Stock)
	}

	// Sell what Redis says is left: the killed master back as the new
	// master's replica (durable winners need one), then buyers on both shards.
	D.Restart(t)
	eventually(t, 30*time.Second, "old donor back as a replica", func() bool {
		return D.Info("replication", "master_link_status") == "up" && cl.Replicated()
	})
	won := 2
	for shard := 0; shard < 2; shard++ {
		for n := 3; n < 9; n++ {
			u := userOn(shard, 2, n)
			var r store.ReserveResult
			var err error
			for try := 0; try < 50; try++ {
				r, err = s.Reserve(ctx(t), reserveReq(a, u, 1))
				if err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("reserve %s after the failover: %v", u, err)
			}
			if r.Code == lua.OK {
				if d, err := s.MakeDurable(ctx(t), reserveReq(a, u, 1), r); d == store.DurableOK {
					won++
				} else {
					t.Logf("winner %s not durable: %v %v", u, d, err)
				}
			}
		}
	}
	final := status(t, s, a)
	t.Logf("sold %d units in all (stock %d); final status %+v", won, a.SKUs[0].Stock, final)
	if won > int(a.SKUs[0].Stock) {
		t.Errorf("oversold with durable winners: %d durable winners for %d units", won, a.SKUs[0].Stock)
	}
}
