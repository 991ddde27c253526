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

// A forced preheat that stops after wiping the old shards (here the
// Redis user may not SET: the first shard's epoch is refused; a crash or
// a timeout at the same point does the same) leaves the meta not ready,
// so buyers get NOT_READY, and the next plain preheat loads the stock
// instead of answering "unchanged" over wiped shards.
func TestPreheatHalfDoneIsFinishedByTheNext(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := srv.Do("ACL", "SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set"); err != nil {
		t.Fatalf("acl: %v", err)
	}
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("half", 10, 2, 1)
	a.Start = time.Now().Add(time.Hour)
	a.End = a.Start.Add(time.Hour)
	mustPreheat(t, s, a)
	if r, err := s.Reserve(ctx(t), store.ReserveRequest{Activity: a.ID, SKU: testSKU, User: "u1", Qty: 1, Limit: 1, Shards: 2,
		NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)}); err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %+v %v", r, err)
	}

	t.Setenv("STORE_TEST_NOSET_PW", "pw")
	lcfg := redisConfig([]string{srv.Addr}, false)
	lcfg.Username, lcfg.PasswordEnv = "noset", "STORE_TEST_NOSET_PW"
	limited := openStore(t, lcfg)
	if _, err := limited.PreheatLocked(ctx(t), a, true, time.Now()); err == nil {
		t.Fatal("a forced preheat by a user without SET succeeded")
	}
	// The reservation (u1's) went with the wipe and nothing wrote it back.
	// (The shards' writes go in one pipeline since red team cat16: the
	// refused SETs fail the preheat, the others of the batch still run.)
	k2 := s.SKUKeys(a.ID, testSKU, 2)
	if n, _ := srv.Do("EXISTS", k2.Shards[0].Res, k2.Shards[1].Res); n != "0" {
		t.Fatalf("the failed preheat did not wipe the old shards (EXISTS = %s): the test does not stop midway", n)
	}
	if ready, _ := srv.Do("HGET", s.MetaKey(a.ID), "ready"); ready != "0" {
		t.Errorf("after a preheat that stopped midway, meta ready = %q, want 0 (not preheated)", ready)
	}

	out, err := s.Preheat(ctx(t), a, false, time.Now())
	if err != nil || out != store.PreheatOverwritten {
		t.Fatalf("plain preheat after the half-done one: %v %v, want overwritten", out, err)
	}
	if k := status(t, s, a); !k.OK || k.Initial != 10 || k.Remaining != 10 || k.Pending != 0 {
		t.Errorf("status after the retry: %+v, want 10 units, nothing pending, ok", k)
	}
	if v, _ := srv.Do("HEXISTS", s.MetaKey(a.ID), "loading"); v != "0" {
		t.Errorf("meta still has its loading marker after the retry finished")
	}
	// And a first preheat that stopped midway is a first preheat again.
	b := newActivity("halffirst", 4, 2, 1)
	if _, err := limited.PreheatLocked(ctx(t), b, false, time.Now()); err == nil {
		t.Fatal("a preheat by a user without SET succeeded")
	}
	if out, err := s.Preheat(ctx(t), b, false, time.Now()); err != nil || out != store.PreheatCreated {
		t.Fatalf("preheat after a first one stopped midway: %v %v, want created", out, err)
	}
	if k := status(t, s, b); !k.OK || k.Remaining != 4 {
		t.Errorf("status: %+v", k)
	}
}

// A preheat rewrites only the meta fields it owns: "paused" stays as it
// is now (not as it was when the preheat began), the fields of SKUs no
// longer configured and the scheduler's mark go.
func TestPreheatRewritesOnlyItsMetaFields(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("fields", 10, 2, 1)
	a.SKUs = append(a.SKUs, config.SKU{ID: "old", Stock: 3})
	mustPreheat(t, s, a)
	for _, cmd := range [][]string{{"HSET", s.MetaKey(a.ID), "paused", "1", "scheduled_by", "host/1"}} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	b := *a
	b.SKUs = b.SKUs[:1]
	if out, err := s.Preheat(ctx(t), &b, true, time.Now()); err != nil || out != store.PreheatOverwritten {
		t.Fatalf("forced preheat: %v %v", out, err)
	}
	m, err := srv.Do("HGETALL", s.MetaKey(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"sku:old", "scheduled_by", "loading"} {
		if v, _ := srv.Do("HEXISTS", s.MetaKey(a.ID), gone); v != "0" {
			t.Errorf("meta field %s kept after the preheat: %s", gone, m)
		}
	}
	f, err := s.Flags(ctx(t), a.ID)
	if err != nil || !f.Ready || !f.Paused {
		t.Errorf("flags after the forced preheat: %+v %v, want ready and still paused", f, err)
	}
	if ttl, _ := srv.Do("PTTL", s.MetaKey(a.ID)); strings.HasPrefix(ttl, "-") {
		t.Errorf("meta PTTL = %s, want an expiry", ttl)
	}
}

// An activity whose keys would be written already expired (end +
// key_ttl_after_end past) is refused, as a refusal (ErrRunning too), and
// nothing is written.
func TestPreheatOfEndedActivityRefused(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("over", 10, 2, 1)
	a.Start, a.End = time.Now().Add(-30*24*time.Hour), time.Now().Add(-29*24*time.Hour)
	_, err := s.Preheat(ctx(t), a, true, time.Now())
	if !errors.Is(err, store.ErrEnded) || !errors.Is(err, store.ErrRunning) || !strings.Contains(err.Error(), "over ended at") {
		t.Fatalf("preheat of an activity over a month ago: %v, want ErrEnded (a refusal) naming it", err)
	}
	if n, _ := srv.Do("DBSIZE"); n != "0" {
		keys, _ := srv.Do("KEYS", "*")
		t.Errorf("a refused preheat wrote %s keys: %s", n, keys)
	}
}

// SKUs dropped from the config after preheat are still in Status (marked
// NotInConfig) and in WithHeldSKUs; StockDrift names every difference;
// DroppedActivities finds activities the config no longer names.
func TestDroppedSKUsAndActivities(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("drop", 10, 2, 1)
	a.SKUs = append(a.SKUs, config.SKU{ID: "gone", Stock: 4})
	mustPreheat(t, s, a)
	other := newActivity("other", 2, 1, 1)
	mustPreheat(t, s, other)

	b := *a
	b.SKUs = []config.SKU{{ID: testSKU, Stock: 12}, {ID: "new", Stock: 1}}
	st, err := s.Status(ctx(t), &b)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.SKUs) != 3 || st.SKUs[2].ID != "gone" || !st.SKUs[2].NotInConfig || !st.SKUs[2].Preheated || st.SKUs[2].Remaining != 4 ||
		st.SKUs[0].NotInConfig || st.SKUs[1].Preheated {
		t.Errorf("status with SKU gone dropped and new added: %+v", st.SKUs)
	}
	held, dropped, err := s.WithHeldSKUs(ctx(t), &b)
	if err != nil || len(dropped) != 1 || dropped[0] != "gone" || len(held.SKUs) != 3 || len(b.SKUs) != 2 {
		t.Errorf("WithHeldSKUs: %+v %v %v", held.SKUs, dropped, err)
	}
	diffs, err := s.StockDrift(ctx(t), &b)
	want := "sku sku1: stock 12 in the config, 10 preheated; sku new: in the config (stock 1), not preheated; sku gone: preheated (stock 4), not in the config"
	if err != nil || strings.Join(diffs, "; ") != want {
		t.Errorf("StockDrift = %q, %v\nwant %q", strings.Join(diffs, "; "), err, want)
	}
	if diffs, err := s.StockDrift(ctx(t), a); err != nil || len(diffs) != 0 {
		t.Errorf("StockDrift of the config as preheated = %v, %v", diffs, err)
	}

	drops, err := s.DroppedActivities(ctx(t), []string{a.ID}, time.Now())
	if err != nil || len(drops) != 1 || drops[0].ID != "other" || drops[0].Shards != 1 || len(drops[0].SKUs) != 1 || drops[0].SKUs[0].Stock != 2 {
		t.Fatalf("DroppedActivities(known drop) = %+v, %v; want other", drops, err)
	}
	if drops, err := s.DroppedActivities(ctx(t), []string{a.ID, config.ShadowID(other.ID)}, time.Now()); err != nil || len(drops) != 0 {
		t.Errorf("DroppedActivities with other's shadow copy known = %+v, %v; want none", drops, err)
	}
	if drops, err := s.DroppedActivities(ctx(t), nil, time.Now().Add(3*time.Hour)); err != nil || len(drops) != 0 {
		t.Errorf("DroppedActivities after every key expired = %+v, %v; want none", drops, err)
	}
}
