package store_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestTransitIsNotSoldOut (decisions §54): on a 3-master cluster, a SKU's
// last unit is stolen from its donor shard (shard 0 of 4) by a buyer whose
// home shard's master stops right after the steal replied, before the
// reserve that deposits the unit is written: the unit is on no shard (in
// transit, then in the late reservation its abort gives back), and every
// shard's sold-out flag is set. Either master may be the stopped one: the
// donor's (the home shard shares it, §51's "in-transit window lasts the
// whole stall") or another. The instance whose call timed out holds the
// move's settle in its retrier: while it does, it answers that SKU's other
// buyers STORE_UNAVAILABLE, not SOLD_OUT (the unit comes back on sale
// once the master wakes), and writes no new steal to a donor whose settle
// is pending. Once the settles are answered it answers from the flags
// again, and the unit sells. What another instance, holding nothing for
// the SKU, answers is logged here and asserted by
// TestTransitIsNotSoldOutFleetWide (§58).
func TestTransitIsNotSoldOut(t *testing.T) {
	for _, tc := range []struct {
		name         string
		donorsMaster bool // the home shard, whose master stops, shares the donor's master
	}{
		{"home on the donor's master", true},
		{"home on another master", false},
	} {
		t.Run(tc.name, func(t *testing.T) { transitWave(t, tc.donorsMaster, false) })
	}
}

// TestTransitIsNotSoldOutFleetWide (decisions §58): the same stall, seen
// from the other instance, which holds no settle of the SKU. Before §58 it
// answered its buyers SOLD_OUT from memory for the whole stall, and for
// the few ms after it that its memory lags Redis, while the unit sat in
// transit and then in the late reservation whose abort gives it back. The
// instance whose call timed out marks the SKU in transit on every shard
// tag (store/fleetmark.go): during the stall the other instance answers
// STORE_UNAVAILABLE, and from the master's wake until one of its buyers
// wins the unit that came back it never answers SOLD_OUT; once the marks
// have lapsed (bounded) it answers SOLD_OUT from memory again.
func TestTransitIsNotSoldOutFleetWide(t *testing.T) {
	for _, tc := range []struct {
		name         string
		donorsMaster bool
	}{
		{"home on the donor's master", true},
		{"home on another master", false},
	} {
		t.Run(tc.name, func(t *testing.T) { transitWave(t, tc.donorsMaster, true) })
	}
}

// transitWave runs the stall; fleet asserts what the other instance, b,
// answers (else it is logged).
func transitWave(t *testing.T, donorsMaster, fleet bool) {
	const shards = 4
	cl := redistest.StartCluster(t, 3)
	cfg := redisConfig(cl.Addrs(), true)
	cfg.Timeout = 100 * time.Millisecond
	a, b := openStore(t, cfg), openStore(t, cfg)
	act := newActivity("act_transit", 1, shards, 1) // the unit on shard 0
	mustPreheat(t, a, act)
	k := a.SKUKeys(act.ID, testSKU, shards)
	masterOf := func(s int) *redistest.Server {
		m, err := cl.MasterFor(k.Shards[s].Stock)
		if err != nil {
			t.Fatalf("master of shard %d: %v", s, err)
		}
		return m
	}
	donor := masterOf(0)
	home, other := -1, -1
	for s := 1; s < shards; s++ {
		if (masterOf(s) == donor) == donorsMaster && home < 0 {
			home = s
		}
	}
	if home < 0 {
		t.Skipf("no shard of %d shares the donor's master == %v", shards, donorsMaster)
	}
	stopped := masterOf(home)
	for s := 1; s < shards; s++ {
		if masterOf(s) != stopped {
			other = s
		}
	}
	if other < 0 {
		t.Fatal("every shard on one master")
	}
	// Every script a stalled call sends is loaded on every master: one
	// first sent during a stall would find NOSCRIPT on waking and never run.
	for _, n := range cl.Nodes {
		for _, src := range []string{lua.Reserve, lua.Steal, lua.Abort, lua.SettleMove, lua.Deposit} {
			if _, err := n.Do("SCRIPT", "LOAD", src); err != nil {
				t.Fatalf("SCRIPT LOAD: %v", err)
			}
		}
	}
	for _, s := range []*store.Store{a, b} {
		if out, err := s.SoldOut(ctx(t), act.ID, testSKU, shards); err != nil || out {
			t.Fatalf("SoldOut before = %v, %v", out, err)
		}
	}
	u, v, w := userOn(home, shards, 0), userOn(other, shards, 0), userOn(other, shards, 1)
	var once sync.Once
	restore := store.SetAfterSteal(func() {
		once.Do(func() {
			// Every flag is set, in both instances' memory, before the
			// stop: the donor's by the steal just answered (read again
			// after its invalidation), the others' from the start.
			eventually(t, time.Second, "the SKU looks sold out", func() bool {
				oa, _ := a.SoldOut(ctx(t), act.ID, testSKU, shards)
				ob, _ := b.SoldOut(ctx(t), act.ID, testSKU, shards)
				return oa && ob
			})
			stopped.Pause(t)
			time.Sleep(20 * time.Millisecond) // stopped before the deposit is written
		})
	})
	_, err := a.Reserve(ctx(t), reserveReq(act, u, 1))
	restore()
	stoppedAt := time.Now()
	if !errors.Is(err, store.ErrUnavailable) {
		stopped.Resume(t)
		t.Fatalf("Reserve of the buyer whose deposit stalled = %v, want ErrUnavailable", err)
	}
	res, err := a.Reserve(ctx(t), reserveReq(act, v, 1))
	if !a.InTransit(ctx(t), act.ID, testSKU, shards) {
		t.Error("during the stall, InTransit is false on the instance holding the settle")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("during the stall, the instance holding the move's settle answered another buyer %v (from memory %v), %v; want ErrUnavailable (the unit comes back)", res.Code, res.FromMemory, err)
	}
	res, err = b.Reserve(ctx(t), reserveReq(act, w, 1))
	switch {
	case fleet && !errors.Is(err, store.ErrUnavailable):
		t.Errorf("during the stall, the other instance (nothing held for the SKU) answered %v (from memory %v), %v; want ErrUnavailable (the unit comes back): the fleet gap", res.Code, res.FromMemory, err)
	case err == nil:
		t.Logf("during the stall, the other instance (nothing held for the SKU) answered %v (from memory %v)", res.Code, res.FromMemory)
	}
	if d := time.Since(stoppedAt); d > 900*time.Millisecond {
		t.Fatalf("the stall's checks took %v: the cached flags may have expired", d)
	}
	stopped.Resume(t)
	if fleet {
		// From the wake until one of b's buyers wins the unit that comes
		// back, b never says SOLD_OUT (its memory may lag the abort that
		// reopens a shard: §54's "a few ms after the stall").
		woke := time.Now()
		for n := 2; ; n++ {
			res, err := b.Reserve(ctx(t), reserveReq(act, userOn(other, shards, n), 1))
			if err == nil && res.Code == lua.OK {
				t.Logf("b's buyer won the unit %v after the wake", time.Since(woke))
				break
			}
			if err == nil && res.Code == lua.Empty {
				stopped.Resume(t)
				t.Fatalf("%v after the wake, the other instance answered SOLD_OUT (from memory %v) with the unit still to come back (retrier jobs of a: %d)", time.Since(woke), res.FromMemory, a.Retrier().Len())
			}
			if time.Since(woke) > 5*time.Second {
				t.Fatalf("the unit did not come back within 5 s (last answer %v, %v)", res.Code, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		settled := time.Now()
		eventually(t, 5*time.Second, "the instance's settles answered", func() bool { return a.Retrier().Len() == 0 })
		// The marks lapse: b answers SOLD_OUT from memory again, soon.
		eventually(t, 2*time.Second, "SOLD_OUT on b once the marks lapsed", func() bool {
			res, err := b.Reserve(ctx(t), reserveReq(act, w, 1))
			return err == nil && res.Code == lua.Empty
		})
		t.Logf("b answered SOLD_OUT again %v after its buyer won", time.Since(settled))
		return
	}
	eventually(t, 5*time.Second, "the instance's settles answered", func() bool { return a.Retrier().Len() == 0 })
	// The unit is back on sale (the late reservation released, or the move
	// deposited): v, told to come back, gets it.
	eventually(t, 3*time.Second, "v wins the unit that came back", func() bool {
		res, err := a.Reserve(ctx(t), reserveReq(act, v, 1))
		return err == nil && res.Code == lua.OK
	})
	if !a.InTransit(ctx(t), act.ID, testSKU, shards) {
		t.Log("in transit no more by the time v won")
	}
	// transitGrace after the last settle, SOLD_OUT from memory again.
	eventually(t, time.Second, "SOLD_OUT once the settles are past", func() bool {
		res, err := a.Reserve(ctx(t), reserveReq(act, w, 1))
		return err == nil && res.Code == lua.Empty && !a.InTransit(ctx(t), act.ID, testSKU, shards)
	})
}

// TestNoStealToAnUnsettledDonor (decisions §54): the master of a SKU's
// only donor shard stops; a buyer's steal from it times out and its
// settle waits in the retrier. Another buyer of the same instance is then
// answered STORE_UNAVAILABLE without a steal written to the stopped node
// (§51 found hundreds piled on its sockets, run when it woke); once the
// node wakes and the settle is answered, steals go to it again and the
// second buyer wins.
func TestNoStealToAnUnsettledDonor(t *testing.T) {
	const shards = 4
	cl := redistest.StartCluster(t, 3)
	cfg := redisConfig(cl.Addrs(), true)
	cfg.Timeout = 100 * time.Millisecond
	a := openStore(t, cfg)
	act := newActivity("act_pile", 1, shards, 1) // the unit on shard 0
	mustPreheat(t, a, act)
	k := a.SKUKeys(act.ID, testSKU, shards)
	donor, err := cl.MasterFor(k.Shards[0].Stock)
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for s := 1; s < shards; s++ {
		if m, err := cl.MasterFor(k.Shards[s].Stock); err == nil && m != donor {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		t.Skip("every shard on the donor's master")
	}
	for _, n := range cl.Nodes {
		for _, src := range []string{lua.Reserve, lua.Steal, lua.SettleMove, lua.Deposit} {
			if _, err := n.Do("SCRIPT", "LOAD", src); err != nil {
				t.Fatalf("SCRIPT LOAD: %v", err)
			}
		}
	}
	if out, err := a.SoldOut(ctx(t), act.ID, testSKU, shards); err != nil || out {
		t.Fatalf("SoldOut before = %v, %v", out, err)
	}
	u, v := userOn(live[0], shards, 0), userOn(live[0], shards, 1)
	donor.Pause(t)
	if _, err := a.Reserve(ctx(t), reserveReq(act, u, 1)); !errors.Is(err, store.ErrUnavailable) {
		donor.Resume(t)
		t.Fatalf("Reserve of the buyer whose steal stalled = %v, want ErrUnavailable", err)
	}
	queued := a.Retrier().Len()
	t0 := time.Now()
	_, err = a.Reserve(ctx(t), reserveReq(act, v, 1))
	took := time.Since(t0)
	after := a.Retrier().Len()
	donor.Resume(t)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a second buyer during the stall got %v, want ErrUnavailable", err)
	}
	if after != queued || took >= 100*time.Millisecond {
		t.Errorf("a second buyer's steal was written to the stopped donor: settles queued %d -> %d, the call took %v", queued, after, took)
	}
	eventually(t, 5*time.Second, "the settle answered", func() bool { return a.Retrier().Len() == 0 })
	raw, err := donor.Do("HLEN", k.Shards[0].Moves)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("steals written to the donor: %s", raw)
	eventually(t, 3*time.Second, "the second buyer wins", func() bool {
		res, err := a.Reserve(ctx(t), reserveReq(act, v, 1))
		return err == nil && res.Code == lua.OK
	})
}
