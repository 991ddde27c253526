package store_test

import (
	"errors"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// shardsPerMaster counts a's shards by the master the cluster itself (CLUSTER
// KEYSLOT, CLUSTER NODES) says holds each one's stock key, zero included.
func shardsPerMaster(t *testing.T, cl *redistest.Cluster, s *store.Store, a *config.Activity) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range cl.Nodes {
		out[n.Addr] = 0
	}
	for _, sk := range s.SKUKeys(a.ID, a.SKUs[0].ID, a.Shards).Shards {
		m, err := cl.MasterFor(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		out[m.Addr]++
	}
	return out
}

func counts(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	sort.Ints(out)
	return out
}

// wantPlacement checks a's shards sit on the masters as want (sorted
// counts) by the cluster's own account, and that PlacementCheck agrees.
func wantPlacement(t *testing.T, cl *redistest.Cluster, s *store.Store, a *config.Activity, want []int, even bool) {
	t.Helper()
	real := shardsPerMaster(t, cl, s, a)
	if got := counts(real); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: %d shards per master %v (%v), want %v", a.ID, a.Shards, got, real, want)
	}
	per, ev, err := s.PlacementCheck(ctx(t), a.ID)
	if err != nil || ev != even || !reflect.DeepEqual(per, real) {
		t.Fatalf("PlacementCheck(%s) = %v, %v, %v; the cluster says %v, even %v", a.ID, per, ev, err, real, even)
	}
}

func evalshaCalls(cl *redistest.Cluster) map[string]int64 {
	out := map[string]int64{}
	for _, n := range cl.Nodes {
		out[n.Addr] = redistest.ParseStat(n.Info("commandstats", "cmdstat_evalsha"), "calls")
	}
	return out
}

// TestPlacementCluster (issue 11 §3) on a real 3-master cluster.
func TestPlacementCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := openStore(t, redisConfig(cl.Addrs(), true))

	t.Run("6 shards 2/2/2, 8 shards 3/3/2, every key of a shard in its slot", func(t *testing.T) {
		a6 := newActivity("act_p6", 60, 6, 1)
		a8 := newActivity("act_1001", 80, 8, 1)
		mustPreheat(t, s, a6)
		mustPreheat(t, s, a8)
		wantPlacement(t, cl, s, a6, []int{2, 2, 2}, true)
		wantPlacement(t, cl, s, a8, []int{2, 3, 3}, true)
		for _, sk := range s.SKUKeys(a8.ID, testSKU, 8).Shards {
			want, _ := cl.Slot(sk.Stock)
			for _, key := range []string{sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Fence, sk.RidBits, sk.Epoch} {
				if got, _ := cl.Slot(key); got != want {
					t.Fatalf("%s is in slot %d, its shard's stock %s in %d", key, got, sk.Stock, want)
				}
			}
		}
		meta, err := cl.Do("HGET", s.MetaKey(a8.ID), "place")
		if err != nil {
			m, _ := cl.MasterFor(s.MetaKey(a8.ID))
			meta, err = m.Do("HGET", s.MetaKey(a8.ID), "place")
		}
		if err != nil || len(meta) == 0 {
			t.Fatalf("meta place = %q, %v", meta, err)
		}
		p, ok, err := s.PlacementOf(ctx(t), a8.ID)
		if err != nil || !ok || !p.Placed || p.Shards != 8 || p.Spread() != "3/3/2" {
			t.Fatalf("PlacementOf = %+v, %v, %v", p, ok, err)
		}
	})

	t.Run("every instance uses the placement; a spike runs scripts on every master; stock adds up", func(t *testing.T) {
		a := newActivity("act_two", 40, 6, 1)
		a.SKUs = append(a.SKUs, config.SKU{ID: "sku2", Stock: 6})
		mustPreheat(t, s, a)
		s2 := openStore(t, redisConfig(cl.Addrs(), true)) // another instance: learns the placement from the meta
		// The per-user limit is activity-wide: the buyer's units of every
		// SKU are on their home shard, under its placed tag.
		q := reserveReq(a, "buyer", 1)
		q.SKU, q.RequestID, q.Stock = "sku2", "rid-1", 6
		if r, err := s2.Reserve(ctx(t), q); err != nil || r.Code != lua.OK {
			t.Fatalf("reserve with a request id = %+v, %v", r, err)
		}
		mustReserve(t, s, a, "buyer", 1, lua.Pending)
		one := newActivity(a.ID, 40, 6, 1) // the spike's SKU only
		before := evalshaCalls(cl)
		jobs := spike(t, s2, one, 600, 2, 60)
		after := evalshaCalls(cl)
		for addr, n := range after {
			if n <= before[addr] {
				t.Errorf("master %s ran no script during the spike (evalsha calls %d -> %d)", addr, before[addr], n)
			}
		}
		tokens := checkSpike(t, s, one, jobs) // stock read by the first instance
		half := len(tokens) / 2
		confirmAll(t, s, one, tokens[:half])
		// Batched confirms, by a third instance that never saw the activity.
		s3 := openStore(t, redisConfig(cl.Addrs(), true))
		var items []store.ConfirmItem
		for i, tok := range tokens[half:] {
			items = append(items, store.ConfirmItem{Token: tok, Shards: 6, OrderID: "B-" + strconv.Itoa(i)})
		}
		codes, errs := s3.ConfirmMany(ctx(t), items)
		for i := range items {
			if errs[i] != nil || codes[i] != lua.OK {
				t.Fatalf("ConfirmMany %v = %v, %v", items[i].Token, codes[i], errs[i])
			}
		}
		wantStatus(t, s2, one, 0, 0, 40)
	})

	t.Run("an activity preheated before placement keeps its tags until a forced preheat", func(t *testing.T) {
		a := newActivity("act_old", 12, 6, 1)
		ver := time.Now().UnixMilli()
		put := func(key string, args ...string) {
			t.Helper()
			m, err := cl.MasterFor(key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Do(append([]string{"HSET", key}, args...)...); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Do("PEXPIREAT", key, strconv.FormatInt(store.ExpireAt(a), 10)); err != nil {
				t.Fatal(err)
			}
		}
		// What a preheat before this change wrote: the original tags, no "place".
		legacy := func(i int) string { return "seckill:{act_old:" + strconv.Itoa(i) + "}:stock:" + testSKU }
		for i := 0; i < 6; i++ {
			put(legacy(i), "r", "2", "i", "2", "p", "0", "c", "0", "x", "0", "g", strconv.FormatInt(ver, 10))
		}
		put(s.MetaKey(a.ID), "shards", "6", "ver", strconv.FormatInt(ver, 10), "ready", "1", "paused", "", "sku:"+testSKU, "12")

		s3 := openStore(t, redisConfig(cl.Addrs(), true))
		for i, sk := range s3.SKUKeys(a.ID, testSKU, 6).Shards {
			if sk.Stock != legacy(i) {
				t.Fatalf("shard %d: key %s, want the original %s", i, sk.Stock, legacy(i))
			}
		}
		tok := mustReserve(t, s3, a, "old-1", 1, lua.OK).Token
		mustReserve(t, s, a, "old-1", 1, lua.Pending)
		wantStatus(t, s, a, 11, 1, 0)
		if m, _ := cl.MasterFor(legacy(tok.Shard)); m != nil {
			if r, _ := m.Do("HGET", legacy(tok.Shard), "r"); r != "1" {
				t.Fatalf("the home shard's original key holds r=%s, want 1", r)
			}
		}
		if p, ok, err := s.PlacementOf(ctx(t), a.ID); err != nil || !ok || p.Placed || p.Shards != 6 {
			t.Fatalf("PlacementOf(old) = %+v, %v, %v", p, ok, err)
		}
		if out, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil || out != store.PreheatUnchanged {
			t.Fatalf("Preheat unchanged = %v, %v", out, err)
		}
		if s.SKUKeys(a.ID, testSKU, 6).Shards[0].Stock != legacy(0) {
			t.Fatal("an unchanged preheat re-placed the shards")
		}
		// The reconciler's fence survives the move to placed tags.
		fence := store.Fence{Token: 50, ExpireAt: store.ExpireAt(a)}
		if err := s3.FenceShards(ctx(t), a, 6, fence); err != nil {
			t.Fatal(err)
		}

		if out, err := s.Preheat(ctx(t), a, true, time.Now()); err != nil || out != store.PreheatOverwritten {
			t.Fatalf("Preheat --force = %v, %v", out, err)
		}
		wantPlacement(t, cl, s, a, []int{2, 2, 2}, true)
		for i := 0; i < 6; i++ {
			m, _ := cl.MasterFor(legacy(i))
			if n, _ := m.Do("EXISTS", legacy(i), "seckill:{act_old:"+strconv.Itoa(i)+"}:fence"); n != "0" {
				t.Fatalf("original keys of shard %d still exist after re-placement", i)
			}
		}
		// s3 learned the original tags; like every instance it re-reads
		// the flags when the meta changes, and then uses the new ones.
		if _, err := s3.Flags(ctx(t), a.ID); err != nil {
			t.Fatal(err)
		}
		if s3.SKUKeys(a.ID, testSKU, 6).Shards[0].Stock == legacy(0) {
			t.Fatal("the other instance still uses the original tags")
		}
		mustReserve(t, s3, a, "old-1", 1, lua.OK)
		mustReserve(t, s, a, "old-2", 1, lua.OK)
		wantStatus(t, s3, a, 10, 2, 0)
		if err := s3.FenceShards(ctx(t), a, 6, store.Fence{Token: 49, ExpireAt: fence.ExpireAt}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("an older fencing token after re-placement: %v, want ErrFenced", err)
		}
	})

	t.Run("a reshard that makes it uneven is reported; preheat --force re-places", func(t *testing.T) {
		a := newActivity("act_rs", 30, 6, 1)
		mustPreheat(t, s, a)
		wantPlacement(t, cl, s, a, []int{2, 2, 2}, true)
		mustReserve(t, s, a, "rs-0", 1, lua.OK)
		// Move shard 0's slot to a master that already holds 2 shards.
		k0 := s.SKUKeys(a.ID, testSKU, 6).Shards[0]
		from, _ := cl.MasterFor(k0.Stock)
		var to *redistest.Server
		for _, n := range cl.Nodes {
			if n != from {
				to = n
				break
			}
		}
		slot, _ := cl.Slot(k0.Stock)
		if err := cl.MoveSlot(slot, to); err != nil {
			t.Fatal(err)
		}
		wantPlacement(t, cl, s, a, []int{1, 2, 3}, false)
		p, _, _ := s.PlacementOf(ctx(t), a.ID)
		if w := store.PlacementWarning(a.ID, p); p.Spread() != "3/2/1" || w == "" {
			t.Fatalf("spread %s, warning %q", p.Spread(), w)
		}
		// Still selling, where the shards now are.
		for i := 1; i < 12; i++ {
			mustReserve(t, s, a, "rs-"+strconv.Itoa(i), 1, lua.OK)
		}
		wantStatus(t, s, a, 18, 12, 0)
		if _, err := s.Preheat(ctx(t), a, true, time.Now()); err != nil {
			t.Fatal(err)
		}
		wantPlacement(t, cl, s, a, []int{2, 2, 2}, true)
		wantStatus(t, s, a, 30, 0, 0)
		mustReserve(t, s, a, "rs-0", 1, lua.OK)
	})
}

// TestPlacementSingleNode: a single node keeps the original tags, writes
// no placement and reports none.
func TestPlacementSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_one", 10, 4, 1)
	mustPreheat(t, s, a)
	if k := s.SKUKeys(a.ID, testSKU, 4).Shards[3]; k.Stock != "seckill:{act_one:3}:stock:sku1" {
		t.Fatalf("single-node key %s", k.Stock)
	}
	if v, err := srv.Do("HEXISTS", s.MetaKey(a.ID), "place"); err != nil || v != "0" {
		t.Fatalf("meta place on a single node: %v, %v", v, err)
	}
	per, even, err := s.PlacementCheck(ctx(t), a.ID)
	if per != nil || !even || err != nil {
		t.Fatalf("PlacementCheck on a single node = %v, %v, %v", per, even, err)
	}
	mustReserve(t, s, a, "u1", 1, lua.OK)
	wantStatus(t, s, a, 9, 1, 0)
}
