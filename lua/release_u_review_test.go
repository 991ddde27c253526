package lua_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// release.lua counts u down for a queued record without a stream entry
// before its BROKEN check (return {10}): a refused release leaves the record
// queued (later enqueued by the retrier, or released by reconcile --repair,
// either of which counts u down again) with u already lowered. abort.lua checks first.
func TestReviewReleaseBrokenKeepsU(t *testing.T) {
	f := newFx(t)
	f.do("HSET", kStock, "r", "1", "i", "1", "p", "0", "c", "0", "x", "0", "u", "1")
	f.do("HSET", kUsers, "u1", "1|T1")
	f.do("HSET", kRes, "T1", "q|u1|1|900||")
	got := f.run(lua.Release, releaseKeys, []string{"T1", "operator", "1000", "0"})
	if len(got) == 0 || got[0] != "10" {
		t.Fatalf("release = %v, want BROKEN {10}", got)
	}
	f.wantHash(kRes, map[string]string{"T1": "q|u1|1|900||"})
	if u := f.int("HGET", kStock, "u"); u != 1 {
		t.Errorf("u = %d after a refused (BROKEN) release that changed nothing, want 1", u)
	}
}
