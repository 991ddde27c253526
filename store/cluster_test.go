package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// TestCluster runs every script on a real 3-master cluster: a script that
// touched keys of two slots would fail here (a single node lets EVAL do it).
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := openStore(t, redisConfig(cl.Addrs(), true))
	a := newActivity("act_cl", 50, 8, 1)
	mustPreheat(t, s, a)
	wantStatus(t, s, a, 50, 0, 0)

	holding := 0
	for _, n := range cl.Nodes {
		if v, _ := n.Do("DBSIZE"); v != "0" {
			holding++
		}
	}
	if holding < 2 {
		t.Errorf("stock keys sit on %d node(s); shards should spread over the cluster", holding)
	}
	// redis-server's default full-coverage mode is flagged on every master.
	if w := s.SettingsWarnings(ctx(t)); len(w) != 3 {
		t.Errorf("settings warnings on a default 3-master cluster: %q, want one per master", w)
	}

	jobs := spike(t, s, a, 500, 1, 100)
	tokens := checkSpike(t, s, a, jobs)

	// Confirm, release and settle run on their shard's node too.
	if code, err := s.Release(ctx(t), tokens[0], a.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	confirmAll(t, s, a, tokens[1:len(tokens)-1])
	last := tokens[len(tokens)-1]
	if code, err := s.Release(ctx(t), last, a.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	wantStatus(t, s, a, 2, 0, 48)
	// Both units sell again, whichever shards hold them.
	for i := 0; i < 2; i++ {
		mustReserve(t, s, a, "again-"+strconv.Itoa(i), 1, lua.OK)
	}
	mustReserve(t, s, a, "again-2", 1, lua.Empty)
	if _, err := s.SettleMoves(ctx(t), a, 0, time.Now()); err != nil {
		t.Fatalf("SettleMoves: %v", err)
	}
	wantStatus(t, s, a, 0, 2, 48)

	if err := s.SetPaused(ctx(t), a.ID, true); err != nil {
		t.Fatalf("SetPaused: %v", err)
	}
	eventually(t, time.Second, "pause visible", func() bool {
		f, err := s.Flags(ctx(t), a.ID)
		return err == nil && f.Paused && f.Ready && f.Shards == 8
	})
}

// TestClusterSoldOutRequestIDs: a SKU of 4 shards sells out on another
// instance of a 3-master cluster. The flips of its shards' flags reach this
// instance, and the first flags read by a buyer with a request id brings
// every shard's request-id bitset with it (keys of several slots, fanned
// out by the client): later buyers with fresh ids are answered SOLD_OUT from
// memory, and each winner's repeat still gets its reservation's state.
func TestClusterSoldOutRequestIDs(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	a := openStore(t, redisConfig(cl.Addrs(), true))
	b := openStore(t, redisConfig(cl.Addrs(), true))
	act := newActivity("act_clrid", 12, 4, 1)
	mustPreheat(t, b, act)
	sku := act.SKUs[0].ID
	if out, err := a.ReadOutFlagsAs(ctx(t), act.ID, sku, 4); err != nil || allOut(out) {
		t.Fatalf("flags before the sale: %v, %v", out, err)
	}
	winners := map[string]string{}
	for i := 0; len(winners) < 12; i++ {
		if i > 500 {
			t.Fatalf("%d winners for 12 units after 500 buyers", len(winners))
		}
		u := "w" + strconv.Itoa(i)
		q := reserveReq(act, u, 1)
		q.RequestID = "rid-" + u
		res, err := b.Reserve(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if res.Code == lua.OK {
			winners[u] = q.RequestID
		}
	}
	eventually(t, 3*time.Second, "every shard's flip seen here", func() bool {
		for shard := 0; shard < 4; shard++ {
			if !a.OutInvalidated(ctx(t), act.ID, sku, 4, shard) {
				return false
			}
		}
		return true
	})
	first := reserveReq(act, "late-0", 1)
	first.RequestID = "r-late-0"
	if res, err := a.Reserve(ctx(t), first); err != nil || res.Code != lua.Empty {
		t.Fatalf("first late buyer: %v, %v", res.Code, err)
	}
	for shard := 0; shard < 4; shard++ {
		if !a.BitsInMemory(ctx(t), act.ID, sku, 4, shard) {
			t.Errorf("shard %d's bitset did not come with the flags", shard)
		}
	}
	fromMemory := soldOutFromMemory(t, a, act, 200,
		func(i int) string { return "late-" + strconv.Itoa(i+1) },
		func(i int) string { return "r-late-" + strconv.Itoa(i+1) })
	if fromMemory < 195 {
		t.Errorf("%d of 200 late buyers with fresh request ids answered from memory", fromMemory)
	}
	wantRepeatsAnswered(t, a, act, winners)
}

func allOut(out []bool) bool {
	for _, o := range out {
		if !o {
			return false
		}
	}
	return len(out) > 0
}
