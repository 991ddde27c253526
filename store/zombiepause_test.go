package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestDurablePauseAnsweredByAStoppedMaster is decisions §64's case with a
// real failover: the master is SIGSTOPped while `pause` is on its way,
// Sentinel promotes the replica, and the stopped master, continued, answers
// the pause queued on it before it is turned into a replica, dropping it.
// With durable winners the pause must not be reported set then; run again
// once the old master serves the new one, it lands on the new master.
func TestDurablePauseAnsweredByAStoppedMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover (~15 s)")
	}
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	sg := redistest.StartSentinels(t, "zp", m, 3, 1)
	cfg := durableConfig(nil, false, config.DurableRefuse)
	cfg.Sentinel = config.Sentinel{MasterSet: "zp", Addrs: sg.Addrs()}
	cfg.Timeout = 15 * time.Second // the pause waits through the failover
	s := openStore(t, cfg)
	a := newActivity("act_zp", 10, 1, 1)
	if _, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}

	m.Pause(t)
	done := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- s.SetPaused(c, a.ID, true)
	}()
	eventually(t, 20*time.Second, "the replica promoted", func() bool {
		addr, err := sg.MasterAddr()
		return err == nil && addr == r.Addr
	})
	m.Resume(t) // a zombie until Sentinel turns it into a replica
	err := <-done
	t.Logf("pause across the failover: %v", err)
	if err == nil {
		v, _ := r.Do("HGET", s.MetaKey(a.ID), "paused")
		t.Errorf("pause answered by the stopped master reported set; the new master says paused=%q", v)
	}
	eventually(t, 30*time.Second, "the old master a replica", func() bool {
		return m.Info("replication", "role") == "slave" && m.Info("replication", "master_link_status") == "up"
	})
	eventually(t, 10*time.Second, "the pause run again lands", func() bool {
		return s.SetPaused(ctx(t), a.ID, true) == nil
	})
	if v, err := r.Do("HGET", s.MetaKey(a.ID), "paused"); err != nil || v != "1" {
		t.Errorf("the new master says paused=%q (%v) after the pause landed", v, err)
	}
	if errors.Is(err, store.ErrNotDurable) {
		t.Logf("first pause refused as not durable, as it should be")
	}
}
