package e2e_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRepeatBuyersFromMemory (issue 10): the repeat clicks of winners are
// answered 409 ALREADY_PURCHASED from the buyer memo, with no script run
// after each buyer's first repeat; a refund by the operator (release on
// another client) reaches the instance through Redis's invalidation, and
// the refunded buyer buys again.
func TestRepeatBuyersFromMemory(t *testing.T) {
	f := newFixture(t)
	const n = 20
	var first string
	for i := range n {
		won := f.buy(actOpen, "rm"+strconv.Itoa(i))
		wantWin(t, won)
		if i == 0 {
			first = won.Token()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.p.Server.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wantCode(t, f.buy(actOpen, "rm"+strconv.Itoa(i)), "ALREADY_PURCHASED", 409)
	}
	scripts := func() int64 {
		return redistest.ParseStat(f.redis.Node.Info("commandstats", "cmdstat_evalsha"), "calls")
	}
	before, saved := scripts(), f.p.Counter(f.p.Metrics.RedisSaved, "buyer_memo")
	for range 5 {
		for i := range n {
			wantCode(t, f.buy(actOpen, "rm"+strconv.Itoa(i)), "ALREADY_PURCHASED", 409)
		}
	}
	if d := scripts() - before; d != 0 {
		t.Errorf("%d remembered repeats ran %d scripts, want 0", 5*n, d)
	}
	if d := f.p.Counter(f.p.Metrics.RedisSaved, "buyer_memo") - saved; d != 5*n {
		t.Errorf("seckill_redis_calls_saved_total{reason=buyer_memo} rose by %v, want %d", d, 5*n)
	}
	f.p.WantStock(t, actOpen, 100-n, 0, n)

	// The operator refunds rm0 through the admin listener's own client (the
	// release command): the proxy hears of it only from Redis.
	st, err := store.OpenNow(f.p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tok, err := store.ParseToken(first)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := st.Release(ctx, tok, f.act(t, actOpen).Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := f.buy(actOpen, "rm0")
		if r.Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a refunded buyer still refused after 5 s: %d %s", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
