package preheat

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// A preheat by hand that stopped midway over the stock (its meta says
// ready=0, loading) seen at start by an instance that saw the stock
// ready is not lost stock: it is a preheat to finish, and the scheduler
// finishes it under the lease instead of giving up on the activity.
func TestScheduledPreheatFinishesAHalfDoneOne(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	start := now.Add(time.Minute)
	cfg := testConfig(t, srv.Addr, start, now.Add(time.Hour), "-5m")
	a := &cfg.Activities[0]
	check := openStore(t, cfg)
	ctx := context.Background()
	if _, err := check.Preheat(ctx, a, false, now); err != nil {
		t.Fatal(err)
	}
	c := &clock{t: now}
	s := instance(t, cfg, c, "watch")
	ss := []*Scheduler{s}
	s.pass(ctx)
	// The half-done forced preheat: not ready, loading, a shard wiped.
	if _, err := srv.Do("HSET", check.MetaKey(a.ID), "ready", "0", "loading", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("DEL", check.SKUKeys(a.ID, "sku1", a.Shards).Shards[0].Stock); err != nil {
		t.Fatal(err)
	}
	if r := record(t, check); r.Ready || !r.Loading {
		t.Fatalf("record of a half-done preheat: %+v, want loading", r)
	}
	c.Set(start)
	s.pass(ctx)
	if count(ss, OutcomeLost) != 0 || count(ss, "overwritten") != 1 || !record(t, check).Ready {
		t.Fatalf("at start: lost %d overwritten %d ready %v", count(ss, OutcomeLost), count(ss, "overwritten"), record(t, check).Ready)
	}
	st, err := check.Status(ctx, a)
	if err != nil || !st.OK() || st.SKUs[0].Remaining != 10 {
		t.Fatalf("status after the scheduler finished it: %+v %v", st, err)
	}
}
