package reservation_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// After a whole reservation life — buys with stock moves between shards,
// the pending index emptied and refilled, queue workers, releases, a
// repairing reconcile with its lease and fences — every key Redis holds
// expires, and every activity key expires exactly key_ttl_after_end after
// the end (never before).
func TestEveryKeyExpires(t *testing.T) {
	rs := redistest.Start(t)
	st, sh := openStore(t, rs.Addr), newShop(t)
	cfg := proxyConfig(t, []string{rs.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 1000)
	a := &cfg.Activities[0]
	if _, err := st.Preheat(tctx(t), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	var toks []store.Token
	// 8 buyers homed on shard 0, which holds 3 of the 10 units: moves happen.
	var users []string
	for i := 0; len(users) < 8; i++ {
		if u := "u" + strconv.Itoa(i); store.HomeShard(u, a.Shards) == 0 {
			users = append(users, u)
		}
	}
	for _, u := range users {
		toks = append(toks, reserve(t, st, a, u, now, true))
	}
	// Empty one shard's pending index, then fill it again.
	for _, tok := range toks[:4] {
		if _, err := st.Confirm(tctx(t), tok, a.Shards, "O"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Release(tctx(t), tok, a.Shards, "refund", now, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range users[:4] { // released buyers may buy again
		reserve(t, st, a, u, now-time.Hour.Milliseconds(), true)
	}
	// Queued reservations join the pending index when a worker claims them
	// (this one as by a worker that died right after).
	if code, err := st.Claim(tctx(t), toks[4], a.Shards, now, store.ExpireAt(a)); err != nil || code != lua.OK {
		t.Fatalf("claim: %v %v", code, err)
	}
	seen := checkExpiry(t, rs, store.ExpireAt(a))
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "t"})
	q.Start(cfg)
	eventually(t, 20*time.Second, "queue drained", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, "sku1", a.Shards)
		return err == nil && n == 0
	})
	q.Stop()
	rec, _ := newReconciler(st)
	if _, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, checkExpiry(t, rs, store.ExpireAt(a))...)
	for _, kind := range []string{":stock:", ":out:", ":users", ":res", ":pending", ":log", ":moves", ":movesin", ":fence", ":meta", ":qbucket"} {
		found := false
		for _, k := range seen {
			// Per-SKU keys end in ":stock:<sku>", ":out:<sku>"; shared ones in the kind.
			found = found || strings.HasSuffix(k, kind) || (strings.HasSuffix(kind, ":") && strings.Contains(k, kind))
		}
		if !found && kind != ":qbucket" {
			t.Errorf("no %s key was created: the test does not cover it", kind)
		}
	}
}

// checkExpiry checks every key expires, activity keys exactly at want, and
// returns the keys seen.
func checkExpiry(t *testing.T, rs *redistest.Server, want int64) []string {
	t.Helper()
	keys, err := rs.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, k := range strings.Split(keys, "\n") {
		pt, _ := rs.Do("PEXPIRETIME", k)
		at, _ := strconv.ParseInt(pt, 10, 64)
		seen = append(seen, k)
		switch {
		case at < 0:
			t.Errorf("%s never expires", k)
		case strings.Contains(k, "{lease}") || strings.HasSuffix(k, ":qbucket"):
			// the lease, its fencing counter and the bucket have their own lifetimes
		case at != want:
			t.Errorf("%s expires at %d, want %d (key_ttl_after_end after the end)", k, at, want)
		}
	}
	return seen
}
