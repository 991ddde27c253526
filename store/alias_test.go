package store_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestHolderAliasesOfSessionWinners (decisions §62): 200 session buyers
// win every unit of a 4-shard SKU on one instance, 64 at a time (so the
// reserve batches carry their aliases too), one of them a bundle-free
// long call with a request id. The other instance, which knows none of
// their users, tells from the holders bitsets that each one's session may
// hold a unit, and of 10,000 sessions that never bought, only about the
// bitsets' false positives (three bits each of 4 a winner, on 4 shards;
// expected ~5).
func TestHolderAliasesOfSessionWinners(t *testing.T) {
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act := newActivity("alias", 200, 4, 1)
	mustPreheat(t, b, act)
	sku := act.SKUs[0].ID
	cred := func(i int) string { return "session-cookie-" + strconv.Itoa(i) }
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	sem := make(chan struct{}, 64)
	for i := range 200 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			q := reserveReq(act, "user-"+strconv.Itoa(i), 1)
			q.Alias = store.HolderAlias(cred(i))
			if i == 7 {
				q.RequestID = "rid-7" // the long call, with a request id
			}
			res, err := b.Reserve(ctx(t), q)
			if err != nil || res.Code != lua.OK {
				errs <- "user-" + strconv.Itoa(i) + ": " + res.Code.String() + " " + errString(err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	calls, buyers := b.ReserveBatchStats()
	t.Logf("reserve batches: %d calls carried %d buyers", calls, buyers)
	if r := mustReserve(t, b, act, "late", 1, lua.Empty); !r.FromMemory {
		t.Log("the sell-out answered by the script")
	}
	c := context.Background()
	for i := range 200 {
		held, err := a.MayHoldAlias(c, act.ID, sku, act.Shards, store.HolderAlias(cred(i)))
		if err != nil || !held {
			t.Fatalf("winner %d's session: may hold %v, %v; want true", i, held, err)
		}
	}
	fp := 0
	for i := range 10000 {
		held, err := a.MayHoldAlias(c, act.ID, sku, act.Shards, store.HolderAlias("stranger-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if held {
			fp++
		}
	}
	t.Logf("strangers' sessions that may hold: %d of 10,000", fp)
	if fp > 50 {
		t.Errorf("%d of 10,000 sessions that never bought may hold, want about 5 (each is a look-up at the shop)", fp)
	}
	if held, _ := a.MayHoldAlias(c, act.ID, sku, act.Shards, ""); held {
		t.Error("an empty alias may hold")
	}
	// Redis gone: once the client knows (its cached copies dropped with
	// the connection), not readable is an error, never "holds nothing".
	defer store.SetOutSnapTTL(0)() // no snapshot current
	srv.Kill()
	eventually(t, 5*time.Second, "MayHoldAlias to fail with Redis killed", func() bool {
		_, err := a.MayHoldAlias(c, act.ID, sku, act.Shards, store.HolderAlias("stranger-1"))
		return err != nil
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// BenchmarkMayHoldAliasSoldOut: the check a sold-out buy of a session this
// instance never looked up makes before SOLD_OUT from memory (the cookie's
// digest, then three bits of every shard's snapshot), for strangers, the
// common case, on a 4-shard SKU.
func BenchmarkMayHoldAliasSoldOut(b *testing.B) {
	srv := redistest.Start(b)
	s := openStore(b, redisConfig([]string{srv.Addr}, false))
	act := newActivity("aliasb", 8, 4, 1)
	mustPreheat(b, s, act)
	for i := range 8 {
		q := reserveReq(act, "w"+strconv.Itoa(i), 1)
		q.Alias = store.HolderAlias("winner-cookie-" + strconv.Itoa(i))
		if r, err := s.Reserve(ctx(b), q); err != nil || r.Code != lua.OK {
			b.Fatalf("winner %d: %v %v", i, r.Code, err)
		}
	}
	cookies := make([]string, 1024)
	for i := range cookies {
		cookies[i] = "d41d8cd98f00b204e9800998ecf8427e-stranger-" + strconv.Itoa(i)
	}
	c := context.Background()
	sku := act.SKUs[0].ID
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		held, err := s.MayHoldAlias(c, act.ID, sku, act.Shards, store.HolderAlias(cookies[i%len(cookies)]))
		if err != nil || held {
			b.Fatalf("a stranger may hold: %v %v", held, err)
		}
	}
}
