package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// durableTimeout is the tests' redis.durable_winners.timeout: every
// refusal waits it out, and a healthy replica must never miss it, also
// on a loaded machine.
const durableTimeout = redistest.TimeoutScale * 200 * time.Millisecond

func durableConfig(addrs []string, cluster bool, onTimeout string) config.Redis {
	cfg := redisConfig(addrs, cluster)
	cfg.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: durableTimeout, OnTimeout: onTimeout}
	return cfg
}

// durablePair starts a master with one replica and opens a store on the
// master with durable winners (replicas: 1, on_timeout onTimeout).
func durablePair(t *testing.T, onTimeout string) (m, r *redistest.Server, s *store.Store) {
	t.Helper()
	m = redistest.Start(t)
	r = redistest.StartReplica(t, m)
	return m, r, openStore(t, durableConfig([]string{m.Addr}, false, onTimeout))
}

// replicaHas reports whether the replica holds the reservation record.
func replicaHas(t *testing.T, r *redistest.Server, s *store.Store, a *config.Activity, tok store.Token) bool {
	t.Helper()
	sk := s.SKUKeys(a.ID, tok.SKU, a.Shards).Shards[tok.Shard]
	v, err := r.Do("HGET", sk.Res, tok.Field())
	return err == nil && v != ""
}

// TestDurableWinnersReplicaStopped: with the replica SIGSTOPped, a winner
// is not acknowledged, its reservation is released at once (nothing
// stays held) and the buyer may try again; once the replica runs again,
// winners are durable and the replica holds their reservation.
func TestDurableWinnersReplicaStopped(t *testing.T) {
	_, r, s := durablePair(t, config.DurableRefuse)
	if !s.DurableWinners() || !s.DurableRefuses() {
		t.Fatal("durable winners not configured")
	}
	a := newActivity("act_dw", 5, 1, 1)
	mustPreheat(t, s, a)

	q := reserveReq(a, "u1", 1)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok}); d != store.DurableOK || err != nil {
		t.Fatalf("MakeDurable with the replica up = %v, %v; want durable", d, err)
	}
	// Acknowledged means received: the replica has the record now, no waiting.
	if !replicaHas(t, r, s, a, tok) {
		t.Fatal("a durable reservation is not on the replica")
	}

	r.Pause(t)
	for _, u := range []string{"u2", "u3"} {
		q := reserveReq(a, u, 1)
		tok := mustReserve(t, s, a, u, 1, lua.OK).Token
		d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok})
		if d != store.DurableRefused || !errors.Is(err, store.ErrNotDurable) {
			t.Fatalf("MakeDurable(%s) with the replica stopped = %v, %v; want refused, ErrNotDurable", u, d, err)
		}
		res, ok, err := s.Lookup(ctx(t), tok, a.Shards)
		if err != nil || !ok || res.State != store.StateReleased || res.Reason != "not_durable" {
			t.Fatalf("refused winner's reservation = %+v, %v, %v; want released, not_durable", res, ok, err)
		}
	}
	// Nothing the refused winners took is held: only u1's unit is pending.
	wantStatus(t, s, a, 4, 1, 0)

	r.Resume(t)
	eventually(t, 5*time.Second, "winners durable again", func() bool {
		q := reserveReq(a, "u2", 1) // refused before: holds nothing, may buy
		res, err := s.Reserve(ctx(t), q)
		if err != nil || res.Code != lua.OK {
			t.Fatalf("u2 buys again = %+v, %v", res, err)
		}
		d, _ := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: res.Token})
		return d == store.DurableOK
	})
	wantStatus(t, s, a, 3, 2, 0)
}

// TestDurableWinnersForward: on_timeout forward keeps the reservation.
func TestDurableWinnersForward(t *testing.T) {
	_, r, s := durablePair(t, config.DurableForward)
	a := newActivity("act_dwf", 5, 1, 1)
	mustPreheat(t, s, a)
	r.Pause(t)
	q := reserveReq(a, "u1", 1)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok}); d != store.DurableLate || !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("MakeDurable = %v, %v; want forwarded, ErrNotDurable", d, err)
	}
	wantStatus(t, s, a, 4, 1, 0)
}

// TestDurableWinnersQueue: a queued winner that is not acknowledged is
// released while still queued; one a worker claimed meanwhile is left to
// the worker (which checks the replicas itself before sending).
func TestDurableWinnersQueue(t *testing.T) {
	_, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_dwq", 5, 1, 1)
	a.Mode = config.ModeQueue
	mustPreheat(t, s, a)
	r.Pause(t)

	q := reserveReq(a, "u1", 1)
	q.Queue = true
	res, err := s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("queued reserve = %+v, %v", res, err)
	}
	if d, _ := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: res.Token}); d != store.DurableRefused {
		t.Fatalf("MakeDurable(queued) = %v, want refused", d)
	}
	if r, _, _ := s.Lookup(ctx(t), res.Token, a.Shards); r.State != store.StateReleased {
		t.Fatalf("queued, refused: state %s, want released", r.State)
	}

	q = reserveReq(a, "u2", 1)
	q.Queue = true
	res, err = s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("queued reserve = %+v, %v", res, err)
	}
	if c, err := s.Claim(ctx(t), res.Token, a.Shards, time.Now().UnixMilli(), q.ExpireAt); err != nil || c != lua.OK {
		t.Fatalf("claim = %v, %v", c, err)
	}
	if d, _ := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: res.Token}); d != store.DurableTaken {
		t.Fatalf("MakeDurable(claimed) = %v, want taken", d)
	}
	if r, _, _ := s.Lookup(ctx(t), res.Token, a.Shards); r.State != store.StatePending {
		t.Fatalf("claimed: state %s, want pending (the worker's)", r.State)
	}
	wantStatus(t, s, a, 4, 1, 0)
}

// TestDurableWinnersRequestID: a refused winner's request id is decided
// afresh when repeated, not answered by the released reservation.
func TestDurableWinnersRequestID(t *testing.T) {
	_, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_dwr", 5, 1, 1)
	mustPreheat(t, s, a)
	q := reserveReq(a, "u1", 1)
	q.RequestID, q.Stock = "rid-1", 5
	r.Pause(t)
	res, err := s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("reserve = %+v, %v", res, err)
	}
	if d, _ := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: res.Token}); d != store.DurableRefused {
		t.Fatalf("MakeDurable = %v, want refused", d)
	}
	r.Resume(t)
	again, err := s.Reserve(ctx(t), q)
	if err != nil || again.Code != lua.OK || again.Token == res.Token {
		t.Fatalf("repeat of the refused request id = %+v, %v; want a new reservation", again, err)
	}
}

// TestDurableWinnersNoReplica: a master with no replica never acknowledges.
func TestDurableWinnersNoReplica(t *testing.T) {
	m := redistest.Start(t)
	s := openStore(t, durableConfig([]string{m.Addr}, false, config.DurableRefuse))
	a := newActivity("act_dwn", 5, 1, 1)
	// With durable winners a preheat waits for the replicas too (§60):
	// refused here; loaded by a store without the block.
	if out, err := s.Preheat(ctx(t), a, false, time.Now()); !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("durable preheat with no replica = %v, %v; want ErrNotDurable", out, err)
	}
	mustPreheat(t, openStore(t, redisConfig([]string{m.Addr}, false)), a)
	q := reserveReq(a, "u1", 1)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	ok, acked, err := s.WaitReplicas(ctx(t), tok, a.Shards, q.ExpireAt)
	if ok || acked != 0 || !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("WaitReplicas with no replica = %v, %d, %v", ok, acked, err)
	}
	w := s.DurableWarnings(ctx(t))
	if len(w) != 1 || !strings.Contains(w[0], m.Addr+" has 0 connected replica(s), 1 wanted") {
		t.Fatalf("warnings without a replica: %q", w)
	}
	redistest.StartReplica(t, m)
	if w := s.DurableWarnings(ctx(t)); len(w) != 0 {
		t.Fatalf("warnings with a replica: %q", w)
	}
}

// TestDurableWinnersOff: without the block nothing waits.
func TestDurableWinnersOff(t *testing.T) {
	m := redistest.Start(t)
	s := openStore(t, redisConfig([]string{m.Addr}, false))
	a := newActivity("act_dwo", 5, 1, 1)
	mustPreheat(t, s, a)
	q := reserveReq(a, "u1", 1)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if s.DurableWinners() {
		t.Fatal("durable winners on without config")
	}
	if d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok}); d != store.DurableOff || err != nil {
		t.Fatalf("MakeDurable off = %v, %v", d, err)
	}
}

// TestDurableWinnersFSyncFallback: fsync: true on a Redis without WAITAOF
// (before 7.2) waits with WAIT.
func TestDurableWinnersFSyncFallback(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	has, _ := m.Do("COMMAND", "INFO", "WAITAOF")
	cfg := durableConfig([]string{m.Addr}, false, config.DurableRefuse)
	cfg.DurableWinners.FSync = true
	s := openStore(t, cfg)
	a := newActivity("act_dwa", 5, 1, 1)
	mustPreheat(t, s, a)
	q := reserveReq(a, "u1", 1)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if has != "" {
		t.Skipf("this redis-server has WAITAOF; the fallback is not exercised (replicas here run without AOF)")
	}
	if d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok}); d != store.DurableOK || err != nil {
		t.Fatalf("MakeDurable = %v, %v", d, err)
	}
	if s.UsesWaitAOF() {
		t.Fatal("WAITAOF used on a server without it")
	}
	if !replicaHas(t, r, s, a, tok) {
		t.Fatal("not on the replica")
	}
}

// TestDurableWinnersCluster: the WAIT runs on the node holding the buyer's
// shard: with one master's replica stopped, winners homed on that master's
// shards are refused and every other winner is durable.
func TestDurableWinnersCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 6-node cluster")
	}
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	s := openStore(t, durableConfig(cl.Addrs(), true, config.DurableRefuse))
	a := newActivity("act_dwc", 60, b0Shards, 1)
	mustPreheat(t, s, a)
	// b (below) is preheated now, while every replica runs: with durable
	// winners a preheat waits for the replicas and fails while one is
	// stopped (§60, TestDurablePreheatWaitsForReplicas).
	b := newActivity("act_dwm", int64(b0Shards), b0Shards, 1) // one unit a shard
	mustPreheat(t, s, b)
	// Replicas stream from their first acknowledgement on (up to a
	// second after the sync): wait until they have the preheat.
	eventually(t, 10*time.Second, "preheat replicated", cl.Replicated)
	keys := s.SKUKeys(a.ID, testSKU, a.Shards)
	masterOf := make([]*redistest.Server, a.Shards)
	for i, sk := range keys.Shards {
		m, err := cl.MasterFor(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		masterOf[i] = m
	}
	victim := masterOf[0]
	stopped, err := cl.ReplicaOf(victim)
	if err != nil {
		t.Fatal(err)
	}
	if stopped == nil {
		t.Fatalf("no replica of %s", victim.Addr)
	}
	stopped.Pause(t)
	refused, durable := 0, 0
	for shard := 0; shard < a.Shards; shard++ {
		for n := 0; n < 2; n++ {
			u := userOn(shard, a.Shards, n)
			q := reserveReq(a, u, 1)
			tok := mustReserve(t, s, a, u, 1, lua.OK).Token
			d, _ := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: tok})
			want := store.DurableOK
			if masterOf[shard] == victim {
				want = store.DurableRefused
			}
			if d != want {
				t.Fatalf("shard %d (master %s, victim %s): %s = %v, want %v", shard, masterOf[shard].Addr, victim.Addr, u, d, want)
			}
			if d == store.DurableRefused {
				refused++
			} else {
				durable++
			}
		}
	}
	if refused == 0 || durable == 0 {
		t.Fatalf("refused %d, durable %d: the shards do not span masters", refused, durable)
	}
	wantStatus(t, s, a, 60-int64(durable), int64(durable), 0)

	// Stock moved from a donor shard: the donor's replicas must have the
	// steal before its units are used. Every shard off the victim's node
	// is bought out, so a buyer homed there can only get units from the
	// victim's shards: the steal runs, is not acknowledged, and its units
	// stay in transit (the buyer hears STORE_UNAVAILABLE); once the
	// replica runs, the moves settle and the buyer wins.
	bMaster := make([]*redistest.Server, b.Shards)
	for i, sk := range s.SKUKeys(b.ID, testSKU, b.Shards).Shards {
		if bMaster[i], err = cl.MasterFor(sk.Stock); err != nil {
			t.Fatal(err)
		}
	}
	if n := victimShards(bMaster, victim); n == 0 || n == b.Shards {
		t.Fatalf("%d of %d shards of %s on %s: the test needs some on and some off it", n, b.Shards, b.ID, victim.Addr)
	}
	home := -1
	for i := range bMaster {
		if bMaster[i] != victim {
			u := userOn(i, b.Shards, 0)
			q := reserveReq(b, u, 1)
			if d, _ := s.MakeDurable(ctx(t), q, mustReserve(t, s, b, u, 1, lua.OK)); d != store.DurableOK {
				t.Fatalf("winner on a healthy shard: %v", d)
			}
			home = i
		}
	}
	mover := userOn(home, b.Shards, 1)
	if res, err := s.Reserve(ctx(t), reserveReq(b, mover, 1)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a buyer who needs units from the stopped replica's node = %+v, %v; want ErrUnavailable", res, err)
	}
	// Every donor (one unit each, all on the victim's node) was tried.
	onVictim := int64(victimShards(bMaster, victim))
	if st := status(t, s, b); !st.OK || st.InTransit != onVictim || st.Pending != int64(b.Shards)-onVictim {
		t.Fatalf("after the unacknowledged steals: %+v, want %d units in transit", st, onVictim)
	}
	stopped.Resume(t)
	eventually(t, 10*time.Second, "the moves settled after SIGCONT", func() bool { return status(t, s, b).InTransit == 0 })
	q := reserveReq(b, mover, 1)
	res := mustReserve(t, s, b, mover, 1, lua.OK)
	if d, err := s.MakeDurable(ctx(t), q, res); d != store.DurableOK {
		t.Fatalf("the mover after SIGCONT: %v, %v", d, err)
	}
	if st := status(t, s, b); !st.OK || st.InTransit != 0 || st.Remaining+st.Pending != int64(b.Shards) {
		t.Fatalf("at the end: %+v", st)
	}
}

// b0Shards is the shard count of the cluster test's activities.
const b0Shards = 6

func victimShards(masterOf []*redistest.Server, victim *redistest.Server) int {
	n := 0
	for _, m := range masterOf {
		if m == victim {
			n++
		}
	}
	return n
}

// TestDurableStealRefused: with the replica stopped, a buyer whose home
// shard is dry moves a unit from the other shard, but the donor's replica
// cannot have that move either: the buy is refused (ErrUnavailable) and
// the unit stays in transit — counted as remaining, sold to nobody — until
// the replica has the move; then the retrier settles it and it is on sale
// again. (The e2e TestDurableWinnersReplicaStopped meets this when one of
// its burst's buyers finds its home shard held by would-be winners.)
func TestDurableStealRefused(t *testing.T) {
	_, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_ds", 2, 2, 1) // one unit per shard
	mustPreheat(t, s, a)
	r.Pause(t)
	// Shard 0's unit is held (a would-be winner not yet refused).
	mustReserve(t, s, a, userOn(0, 2, 0), 1, lua.OK)
	eventually(t, 2*time.Second, "shard 0 seen dry", func() bool {
		_, err := s.Reserve(ctx(t), reserveReq(a, userOn(0, 2, 1), 1))
		return errors.Is(err, store.ErrUnavailable)
	})
	st := wantStatus(t, s, a, 1, 1, 0)
	if st.InTransit != 1 {
		t.Fatalf("in transit = %d after a refused steal, want 1", st.InTransit)
	}
	r.Resume(t)
	eventually(t, 20*time.Second, "the move settled once the replica has it", func() bool {
		return status(t, s, a).InTransit == 0
	})
	wantStatus(t, s, a, 1, 1, 0)
	mustReserve(t, s, a, userOn(1, 2, 0), 1, lua.OK) // the unit is on sale again
	wantStatus(t, s, a, 0, 2, 0)
}
