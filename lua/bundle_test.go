package lua_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Keys of a second SKU on the same shard (same hash tag).
const (
	kStockB = "t:{a:s:0}:stock:b"
	kOutB   = "t:{a:s:0}:out:b"
)

// bundle.lua takes every item or none; bundlerelease.lua and
// bundleconfirm.lua act on every item and refuse (BROKEN, nothing changed)
// items that are not the record's; abort mode leaves a tombstone that
// makes a late bundle.lua take nothing.
func TestBundleScripts(t *testing.T) {
	f := newFx(t)
	exp := strconv.FormatInt(f.exp, 10)
	seed := [][]string{
		{"HSET", kStock, "r", "5", "i", "5", "p", "0", "c", "0", "x", "0"},
		{"HSET", kStockB, "r", "1", "i", "1", "p", "0", "c", "0", "x", "0"},
	}
	keys := []string{kUsers, kRes, kPending, kMovesIn, kStock, kOut, kStockB, kOutB}
	args := func(user, field string, qa, qb string) []string {
		return []string{user, "3", field, "1000", exp, "a:" + qa + ",b:" + qb, "2", qa, "0", "", "0", qb, "0", "", "0"}
	}
	relKeys := []string{kUsers, kRes, kPending, kEpoch, kStock, kOut, kStockB, kOutB}
	f.reset(seed)

	// b is short: EMPTY names item 2, nothing of a is taken.
	if got := f.run(lua.Bundle, keys, args("u1", "*:x1", "1", "2")); strings.Join(got, ",") != "2,2,1" {
		t.Fatalf("short bundle = %v, want 2,2,1", got)
	}
	if r := f.do("HGET", kStock, "r"); mustInt(t, r) != 5 {
		t.Fatal("a short bundle took units of a")
	}
	if got := f.run(lua.Bundle, keys, args("u1", "*:x1", "1", "1")); got[0] != "1" {
		t.Fatalf("bundle = %v, want OK", got)
	}
	if v, _ := f.do("HGET", kRes, "*:x1:i").ToString(); v != "a:1,b:1" {
		t.Fatalf("items field = %q", v)
	}
	// Items other than the record's: nothing changes.
	if got := f.run(lua.BundleRelease, relKeys[:6], []string{"*:x1", "r", "2000", "0", "a:1", "0", "", "0"}); got[0] != "10" {
		t.Fatalf("release with other items = %v, want BROKEN", got)
	}
	if got := f.run(lua.BundleConfirm, []string{kRes, kPending, kStock}, []string{"*:x1", "o", "a:1"}); got[0] != "10" {
		t.Fatalf("confirm with other items = %v, want BROKEN", got)
	}
	if mustInt(t, f.do("HGET", kStock, "p")) != 1 || mustInt(t, f.do("HGET", kStockB, "p")) != 1 {
		t.Fatal("a refused transition changed counters")
	}
	// Confirm, then a pending-only release is refused, an operator's is not.
	if got := f.run(lua.BundleConfirm, []string{kRes, kPending, kStock, kStockB}, []string{"*:x1", "o1", "a:1,b:1"}); got[0] != "1" {
		t.Fatalf("confirm = %v", got)
	}
	if got := f.run(lua.BundleRelease, relKeys, []string{"*:x1", "r", "2000", "1", "a:1,b:1", "0", "", "0"}); got[0] != "9" {
		t.Fatalf("pending-only release of a confirmed bundle = %v, want CONFIRMED", got)
	}
	if got := f.run(lua.BundleRelease, relKeys, []string{"*:x1", "refund", "2000", "0", "a:1,b:1", "0", "", "0"}); got[0] != "1" {
		t.Fatalf("release = %v", got)
	}
	for _, k := range []string{kStock, kStockB} {
		if mustInt(t, f.do("HGET", k, "c")) != 0 || mustInt(t, f.do("HGET", k, "x")) != 1 {
			t.Fatalf("%s after the release: not every item came back", k)
		}
	}
	if f.do("HGET", kUsers, "u1").Error() == nil {
		t.Fatal("the buyer still holds units after the release")
	}
	// Abort before the bundle ran: a tombstone; the late bundle takes nothing.
	if got := f.run(lua.BundleRelease, relKeys, []string{"*:x2", "store_timeout", "3000", "0", "a:1,b:1", "1", "u2", exp}); got[0] != "14" {
		t.Fatalf("abort before the run = %v, want ABORTED", got)
	}
	if got := f.run(lua.Bundle, keys, args("u2", "*:x2", "1", "1")); got[0] != "14" {
		t.Fatalf("bundle after its abort = %v, want ABORTED", got)
	}
	if mustInt(t, f.do("HGET", kStock, "p")) != 0 || mustInt(t, f.do("HGET", kStockB, "p")) != 0 {
		t.Fatal("an aborted bundle took units")
	}
}

func mustInt(t *testing.T, r interface{ AsInt64() (int64, error) }) int64 {
	t.Helper()
	n, err := r.AsInt64()
	if err != nil {
		t.Fatalf("not an integer: %v", err)
	}
	return n
}
