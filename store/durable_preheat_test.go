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

// TestDurablePreheatWaitsForReplicas (red team chaosfo, docs/decisions.md
// §60): with durable winners, a preheat whose stock the replicas have not
// received is not reported done. Chaos seed 279 (cluster, durable, a
// master SIGSTOPped until its replica was promoted): B's preheat answered
// "created" while one shard's stock had gone to the stopped master, run
// when it was continued and lost when it turned replica; the new master
// had no shard 1, 15 of B's 30 units were gone from the sale, and a plain
// preheat answered "unchanged" (only --force, which wipes every
// reservation, would load it again). Here the replica is SIGSTOPped and
// its link cut, so nothing the master acknowledges reaches it: the
// preheat must fail (ErrNotDurable), and succeed once the replica is
// back, with every shard's stock and the ready meta on the replica.
func TestDurablePreheatWaitsForReplicas(t *testing.T) {
	m, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_dp", 10, 4, 1)

	cutReplica(t, m, r)
	out, err := s.Preheat(ctx(t), a, false, time.Now())
	if !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("preheat with the replica cut off = %v, %v; want ErrNotDurable", out, err)
	}
	relinkReplica(t, r)
	eventually(t, 10*time.Second, "a durable preheat", func() bool {
		out, err = s.Preheat(ctx(t), a, false, time.Now())
		return err == nil
	})
	// Acknowledged means received: the replica has it now, no waiting.
	k := s.SKUKeys(a.ID, a.SKUs[0].ID, a.Shards)
	for i, sk := range k.Shards {
		if v, err := r.Do("HGET", sk.Stock, "i"); err != nil || v == "" {
			t.Errorf("shard %d's stock is not on the replica after a durable preheat (%v): %q %v", i, out, v, err)
		}
	}
	if v, err := r.Do("HGET", s.MetaKey(a.ID), "ready"); err != nil || v != "1" {
		t.Errorf("the meta on the replica says ready %q (%v)", v, err)
	}
	// Again, unchanged: still checked against the replicas.
	if out, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil || out != store.PreheatUnchanged {
		t.Errorf("preheat again = %v, %v; want unchanged", out, err)
	}
	cutReplica(t, m, r)
	if out, err := s.Preheat(ctx(t), a, false, time.Now()); !errors.Is(err, store.ErrNotDurable) {
		t.Errorf("preheat again with the replica cut off = %v, %v; want ErrNotDurable", out, err)
	}
	r.Resume(t)
}

// TestDurablePauseWaitsForReplicas: with durable winners, the kill switch
// is not reported set until the replicas have it. A pause acknowledged by
// a master about to be failed over — its replica lagging, or the master
// itself stopped and answering once its replica had been promoted (chaos
// seed 325 saw a lease let-go answered so, decisions §63) — was lost with
// that master's writes: the sale went on after `pause` said "paused".
// Now the switch fails (ErrNotDurable; the CLI and admin API say "run it
// again") and lands once the replica is back.
func TestDurablePauseWaitsForReplicas(t *testing.T) {
	m, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_dpause", 10, 2, 1)
	if _, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	cutReplica(t, m, r)
	if err := s.SetPaused(ctx(t), a.ID, true); !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("pause with the replica cut off = %v; want ErrNotDurable", err)
	}
	relinkReplica(t, r)
	eventually(t, 10*time.Second, "a durable pause", func() bool {
		return s.SetPaused(ctx(t), a.ID, true) == nil
	})
	if v, err := r.Do("HGET", s.MetaKey(a.ID), "paused"); err != nil || v != "1" {
		t.Errorf("the replica's meta says paused %q (%v) after a durable pause", v, err)
	}
	if err := s.SetPaused(ctx(t), a.ID, false); err != nil {
		t.Errorf("resume: %v", err)
	}
	if v, err := r.Do("HGET", s.MetaKey(a.ID), "paused"); err != nil || v != "0" {
		t.Errorf("the replica's meta says paused %q (%v) after a durable resume", v, err)
	}
}

// TestDurableOperatorReleaseWaitsForReplicas: with durable winners an
// operator's release (a refund) is reported only once the replicas have it,
// as the kill switch is (decisions §64): one a failover undid left the
// refunded unit confirmed. Not in time: ErrNotDurable with the code; run
// again with the replica back, it answers SAME and is on the replica.
func TestDurableOperatorReleaseWaitsForReplicas(t *testing.T) {
	m, r, s := durablePair(t, config.DurableRefuse)
	a := newActivity("act_drel", 10, 2, 1)
	if _, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	if code, err := s.Confirm(ctx(t), tok, a.Shards, "ord-1"); err != nil || code != lua.OK {
		t.Fatalf("confirm: %v %v", code, err)
	}
	cutReplica(t, m, r)
	code, _, err := s.OperatorRelease(ctx(t), tok, a.Shards, "refund", time.Second, false)
	if code != lua.OK || !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("refund with the replica cut off = %v, %v; want OK with ErrNotDurable", code, err)
	}
	relinkReplica(t, r)
	eventually(t, 10*time.Second, "the refund run again", func() bool {
		code, _, err = s.OperatorRelease(ctx(t), tok, a.Shards, "refund", time.Second, false)
		return err == nil
	})
	if code != lua.Same {
		t.Errorf("the refund run again: %v, want SAME", code)
	}
	sk := s.SKUKeys(a.ID, tok.SKU, a.Shards).Shards[tok.Shard]
	if v, err := r.Do("HGET", sk.Res, tok.Field()); err != nil || !strings.Contains(v, "|refund|") {
		t.Errorf("the replica's record after a durable refund: %q %v, want released", v, err)
	}
}

// TestDurableListsWaitForReplicas: with durable winners a block-list or
// eligibility-list change is reported once the replicas have it, as the
// kill switch is (decisions §64, §65): a block a failover undid let the
// blocked scalper buy again after `block` said blocked. Not in time:
// ErrNotDurable; run again with the replica back, the replica holds it.
func TestDurableListsWaitForReplicas(t *testing.T) {
	m, r, s := durablePair(t, config.DurableRefuse)
	cutReplica(t, m, r)
	changes := []struct {
		name  string
		apply func() error
	}{
		{"block", func() error { return s.BlockAdd(ctx(t), store.BlockUser, []string{"scalper"}, 0, time.Now()) }},
		{"unblock", func() error { return s.BlockRemove(ctx(t), store.BlockIP, []string{"203.0.113.9"}) }},
		{"eligible add", func() error { return s.EligibleAdd(ctx(t), "act_dlist", []string{"vip"}, 0, time.Now()) }},
		{"eligible remove", func() error { return s.EligibleRemove(ctx(t), "act_dlist", []string{"gone"}) }},
	}
	for _, c := range changes {
		if err := c.apply(); !errors.Is(err, store.ErrNotDurable) || !strings.Contains(err.Error(), "run it again") {
			t.Errorf("%s with the replica cut off = %v; want ErrNotDurable, saying to run it again", c.name, err)
		}
	}
	relinkReplica(t, r)
	for _, c := range changes {
		eventually(t, 10*time.Second, c.name+" run again", func() bool { return c.apply() == nil })
	}
	for key, member := range map[string]string{"seckill:{block}:user": "scalper", "seckill:{act_dlist}:elig": "vip"} {
		if v, err := r.Do("ZSCORE", key, member); err != nil || v != "inf" {
			t.Errorf("the replica's %s has %s at %q (%v); want it listed", key, member, v, err)
		}
	}
}

// cutReplica SIGSTOPs replica r and cuts its link from master m, so
// nothing m acknowledges from now on reaches it.
func cutReplica(t *testing.T, m, r *redistest.Server) {
	t.Helper()
	r.Pause(t)
	if _, err := m.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
}

// relinkReplica continues a cut replica and waits for its link.
func relinkReplica(t *testing.T, r *redistest.Server) {
	t.Helper()
	r.Resume(t)
	eventually(t, 10*time.Second, "replica linked again", func() bool {
		return r.Info("replication", "master_link_status") == "up"
	})
}
