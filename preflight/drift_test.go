package preflight

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/store"
)

// The config edited after preheat (stock 1000 → 2000): before start with
// nothing sold, the preheat check fails and names the difference; once
// the sale has reservations it warns (preheat --force would delete them).
func TestPreflightStockDrift(t *testing.T) {
	srv := goodRedis(t)
	e := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404)}
	cfg := e.config(t)
	st := openStore(t, cfg)
	a := &cfg.Activities[0]
	if _, err := st.Preheat(context.Background(), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.stock = 2000
	edited := e.config(t)
	want(t, run1(t, edited), "preheat pfact", Fail, "the config differs from what was preheated: sku sku1: stock 2000 in the config, 1000 preheated")

	if r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: a.ID, SKU: "sku2", User: "u1", Qty: 1, Limit: 1,
		Shards: a.Shards, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)}); err != nil || r.Code != 1 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	c := want(t, run1(t, edited), "preheat pfact", Warn, "the sale has 1 units reserved or sold")
	if c.Fix == "" {
		t.Errorf("no fix")
	}
	want(t, run1(t, cfg), "preheat pfact", Pass, "preheated at")
}

// A preheat that stopped midway (meta not ready, loading) fails the
// preheat check, saying so, even before start.
func TestPreflightHalfDonePreheat(t *testing.T) {
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t)
	st := openStore(t, cfg)
	if _, err := st.Preheat(context.Background(), &cfg.Activities[0], false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("HSET", st.MetaKey("pfact"), "ready", "0", "loading", "1"); err != nil {
		t.Fatal(err)
	}
	want(t, run1(t, cfg), "preheat pfact", Fail, "stopped midway")
}
