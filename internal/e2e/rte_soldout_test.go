package e2e_test

// Red team rte: Redis work and memory a client can buy on a sold-out SKU.

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestRTESoldOutMadeUpUsersBuyNoRedisCalls: a sold-out SKU's clicks are
// answered before the rate limits (stage 2), from memory. A buyer who may
// hold a unit (their bit in the holders bitset) is not: the proxy read
// their users field (HGET through client-side caching) there, before any
// rate limit, to tell a real holder from another buyer whose hash shares
// the bit. With 64 bits per unit, about one made-up user id in 64 on a SKU
// sold out to per_user_limit-1 buyers shares a holder's bit: each cost a
// Redis call bought with no per_ip token, and left an entry in rueidis's
// client-side cache, which expires only when read again or when the
// connection's 128 MiB are full. Counted: 256 winners on one shard (their
// 256 tokens of a per_ip burst of 264), then 20,000 sold-out clicks of
// made-up users from the same address: the HGETs Redis served for them
// must be within the 8 tokens left.
func TestRTESoldOutMadeUpUsersBuyNoRedisCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 requests")
	}
	const act, stock, left = "so", 256, 8
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 0.001, burst: " + strconv.Itoa(stock+left) + " }, per_device: { rate: 1000, burst: 1000 }, per_user: { rate: 1000, burst: 1000 } }"
		o.Activities = []e2e.Activity{{ID: act, Stock: stock, Shards: 1}}
	})
	for i := 0; i < stock; i++ {
		wantWin(t, f.buy(act, "w"+strconv.Itoa(i)))
	}
	if r := f.buy(act, "late"); r.Code != "SOLD_OUT" && r.Code != "RATE_LIMITED" {
		t.Fatalf("after the sell-out: %d %s", r.Status, r.Body)
	}
	hgets := func() int64 {
		return redistest.ParseStat(f.redis.Node.Info("commandstats", "cmdstat_hget"), "calls")
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	h0 := hgets()
	c := &fasthttp.Client{MaxConnsPerHost: 4}
	codes := map[string]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		r := e2e.Do(c, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"X-User-Id", "madeup-" + strconv.Itoa(i)}}})
		codes[r.Code]++
		if r.Code != "SOLD_OUT" && r.Code != "RATE_LIMITED" {
			t.Fatalf("made-up buyer %d: %d %s", i, r.Status, r.Body)
		}
	}
	h1 := hgets()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("%d sold-out clicks of made-up users: %v; HGET calls %d; heap %+d KiB", n, codes, h1-h0, (int64(ms.HeapAlloc)-int64(heap0))>>10)
	if h1-h0 > left {
		t.Errorf("%d made-up users' sold-out clicks cost Redis %d HGETs (and as many client-side cache entries) with %d per_ip tokens left: "+
			"Redis work bought before any rate limit", n, h1-h0, left)
	}
}
