package lua_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

const (
	kInflight = "t:{a}:inflight"
	kLive     = "t:{a}:inflight:live"
)

// sync calls inflight.lua for inst: floor, want, demand, limit (set), ttl ms.
func (f *fx) syncInflight(inst string, floor, want, demand, limit int, set bool, ttlMs int) []string {
	f.t.Helper()
	s := "0"
	if set {
		s = "1"
	}
	return f.run(lua.Inflight, []string{kInflight, kLive}, []string{inst, strconv.Itoa(floor), strconv.Itoa(want),
		strconv.Itoa(demand), strconv.Itoa(limit), s, strconv.Itoa(ttlMs), "3600000"})
}

func TestInflightScript(t *testing.T) {
	f := newFx(t)
	t.Run("grants within the limit and shares it", func(t *testing.T) {
		f.reset(nil)
		// {held, fair, total, limit}
		wantReply(t, f.syncInflight("A", 0, 3, 3, 4, true, 5000), []string{"3", "3", "3", "4"})
		// B wants 3 too: one is free; its fair share with A's demand is 2.
		wantReply(t, f.syncInflight("B", 0, 3, 3, 4, true, 5000), []string{"1", "2", "4", "4"})
		// A over its share (3 > 2) is told so; it keeps what it uses (floor).
		wantReply(t, f.syncInflight("A", 3, 3, 3, 4, true, 5000), []string{"3", "2", "4", "4"})
		// A gives one back (in use 2): B may take it.
		wantReply(t, f.syncInflight("A", 2, 2, 3, 4, true, 5000), []string{"2", "2", "3", "4"})
		wantReply(t, f.syncInflight("B", 1, 3, 3, 4, true, 5000), []string{"2", "2", "4", "4"})
		// Nothing more for anyone while the limit is held.
		wantReply(t, f.syncInflight("C", 0, 1, 1, 4, true, 5000), []string{"0", "1", "4", "4"})
	})
	t.Run("floor survives a lower limit", func(t *testing.T) {
		f.reset(nil)
		wantReply(t, f.syncInflight("A", 0, 4, 4, 4, true, 5000), []string{"4", "4", "4", "4"})
		// The limit drops to 2 with 4 in flight: none is taken back.
		wantReply(t, f.syncInflight("A", 4, 4, 4, 2, true, 5000), []string{"4", "2", "4", "2"})
		wantReply(t, f.syncInflight("B", 0, 1, 1, 2, true, 5000), []string{"0", "1", "4", "2"})
	})
	t.Run("an idle instance leaves no trace", func(t *testing.T) {
		f.reset(nil)
		wantReply(t, f.syncInflight("A", 0, 2, 2, 4, true, 5000), []string{"2", "2", "2", "4"})
		wantReply(t, f.syncInflight("A", 0, 0, 0, 4, true, 5000), []string{"0", "0", "0", "4"})
		if h := f.hash(kInflight); len(h) != 1 || h["lim"] != "4" {
			t.Fatalf("hash after give-back: %v, want only lim", h)
		}
		if f.exists(kLive) {
			t.Fatal("live set kept an idle instance")
		}
		f.wantTTL(kInflight)
	})
	t.Run("an expired lease gives its slots back", func(t *testing.T) {
		f.reset(nil)
		wantReply(t, f.syncInflight("dead", 0, 4, 4, 4, true, 50), []string{"4", "4", "4", "4"})
		wantReply(t, f.syncInflight("B", 0, 4, 4, 4, true, 5000), []string{"0", "2", "4", "4"})
		time.Sleep(80 * time.Millisecond)
		wantReply(t, f.syncInflight("B", 0, 4, 4, 4, true, 5000), []string{"4", "4", "4", "4"})
		if _, ok := f.hash(kInflight)["h:dead"]; ok {
			t.Fatal("an expired instance is still counted")
		}
	})
	t.Run("stored limit is kept unless set", func(t *testing.T) {
		f.reset(nil)
		wantReply(t, f.syncInflight("A", 0, 1, 1, 7, true, 5000), []string{"1", "1", "1", "7"})
		wantReply(t, f.syncInflight("B", 0, 9, 9, 3, false, 5000), []string{"6", "6", "7", "7"})
	})
}

func TestSpillScript(t *testing.T) {
	f := newFx(t)
	keys := []string{kRes, kPending, kLog}
	args := func(id string, backlog int) []string {
		return []string{id, "a.s.0." + id, "5000", strconv.Itoa(backlog), strconv.FormatInt(f.exp, 10)}
	}
	f.reset([][]string{
		{"HSET", kRes, "s:p1", "p|u1|1|1000||", "s:p2", "p|u2|2|1000||", "s:c", "c|u3|1|1000|o9|", "s:x", "x|u4|1|1000||r|2000", "s:q", "q|u5|1|1000||0-1"},
		{"ZADD", kPending, "1000", "s:p1", "1000", "s:p2"},
	})
	wantReply(t, f.run(lua.Spill, keys, args("s:p1", 10)), []string{"1"})
	rec, _ := f.do("HGET", kRes, "s:p1").ToString()
	if rec != "q|u1|1|5000||0-1" {
		t.Fatalf("record %q, want queued since 5000 with entry 0-1", rec)
	}
	if n := f.int("ZCARD", kPending); n != 1 {
		t.Fatalf("a queued reservation is still in the pending index")
	}
	f.wantTTL(kLog)
	// The stream's share of the backlog is full: nothing changes.
	wantReply(t, f.run(lua.Spill, keys, args("s:p2", 1)), []string{"12", "1"})
	if rec, _ := f.do("HGET", kRes, "s:p2").ToString(); rec != "p|u2|2|1000||" {
		t.Fatalf("record %q changed on BACKLOG", rec)
	}
	wantReply(t, f.run(lua.Spill, keys, args("s:p1", 10)), []string{"6"})
	wantReply(t, f.run(lua.Spill, keys, args("s:c", 10)), []string{"9"})
	wantReply(t, f.run(lua.Spill, keys, args("s:x", 10)), []string{"7"})
	wantReply(t, f.run(lua.Spill, keys, args("s:none", 10)), []string{"8"})
	// claim.lua takes the spilled reservation as it takes a queued one.
	wantReply(t, f.run(lua.Claim, []string{kRes, kPending}, []string{"s:p1", "6000", strconv.FormatInt(f.exp, 10)}), []string{"1"})
}
