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
