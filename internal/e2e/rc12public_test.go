package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Red team round 12: what the public endpoints cost Redis.
//
// proxy/public.go's displayCache promises "a page refreshed by a million
// buyers costs Redis one status read per instance per TTL" (README:
// "cached for 500 ms per instance"). The cache is filled by whichever
// request finds it stale, and every request that finds it stale before
// that one is done runs its own Store.Status (an HGETALL of the meta, then
// one HMGET per shard per SKU, SKU after SKU): nothing collapsed them.
// Fixed (pd12): one read in flight per activity per instance, the old body
// served meanwhile while younger than 900 ms; the dashboard's reads are
// shared by every poll, at most one a second. The tests below count the
// HMGETs Redis served.

// rc12HMGETs is the number of HMGET calls Redis has served.
func rc12HMGETs(r *e2e.Redis) int64 {
	return redistest.ParseStat(r.Node.Info("commandstats", "cmdstat_hmget"), "calls")
}

// rc12Burst sends n GETs of uri at once, each on its own connection, and
// returns the answers' status codes.
func rc12Burst(t *testing.T, addr, uri string, n int) map[int]int {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	gate := make(chan struct{})
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			<-gate
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop\r\n\r\n", uri)
			code := 0
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}(c)
	}
	close(gate)
	wg.Wait()
	return codes
}

// TestRC12ActivityPageStampedesRedis: 300 buyers' countdown pages asking at
// the same moment, once the cached state has gone stale, cost Redis many
// status reads, not one.
func TestRC12ActivityPageStampedesRedis(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	var skus []config.SKU
	const nSKU, shards = 30, 8
	for i := 0; i < nSKU; i++ {
		skus = append(skus, config.SKU{ID: fmt.Sprintf("k%02d", i), Stock: 1000})
	}
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rc12pub", SKUs: skus, Shards: shards}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "rc12pub")
	const perStatus = nSKU * shards // HMGETs of one status read

	uri := "/_seckill/activities/rc12pub"
	if codes := rc12Burst(t, p.Addr, uri, 1); codes[200] != 1 {
		t.Fatalf("warm-up: %v", codes)
	}
	worst := int64(0)
	for round := 0; round < 3; round++ {
		time.Sleep(600 * time.Millisecond) // the cached state is stale now
		before := rc12HMGETs(r)
		codes := rc12Burst(t, p.Addr, uri, 300)
		got := rc12HMGETs(r) - before
		t.Logf("round %d: answers %v; %d HMGETs = %.1f status reads (one is %d)", round, codes, got, float64(got)/perStatus, perStatus)
		worst = max(worst, got)
	}
	if worst > 2*perStatus {
		t.Errorf("300 simultaneous GET %s after the 500 ms cache went stale cost Redis %d HMGETs, %.0f status reads of %d SKUs × %d shards (the cache promises one per instance per TTL): concurrent misses are not collapsed (proxy/public.go activity)",
			uri, worst, float64(worst)/perStatus, nSKU, shards)
	}
}

// rc12Ready is a readiness checker that is always ready.
type rc12Ready struct{}

func (rc12Ready) Ping(context.Context) error { return nil }

// TestRC12DashboardJSONReadsRedisPerRequest: the admin listener's
// /dashboard.json (no token needed, polled every second by each open
// dashboard) runs Store.Status of every activity per request. decisions
// §19 guarded /metrics against exactly this ("a curl loop: each one more
// INFO per node": the collector refreshes at most once a second); a loop
// on /dashboard.json has no such guard.
func TestRC12DashboardJSONReadsRedisPerRequest(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	var skus []config.SKU
	const nSKU, shards = 30, 8
	for i := 0; i < nSKU; i++ {
		skus = append(skus, config.SKU{ID: fmt.Sprintf("k%02d", i), Stock: 1000})
	}
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rc12dash", SKUs: skus, Shards: shards}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "rc12dash")
	adm := admin.New(p.Metrics, rc12Ready{}, "", zap.NewNop())
	admin.MountAll(adm, p.Store, reservation.NewReconciler(p.Store, p.Metrics, zap.NewNop()), p.Metrics, func() *config.Config { return cfg })
	hs := httptest.NewServer(adm)
	t.Cleanup(hs.Close)

	const perStatus = nSKU * shards
	const polls = 50
	before := rc12HMGETs(r)
	t0 := time.Now()
	for i := 0; i < polls; i++ {
		resp, err := http.Get(hs.URL + "/dashboard.json")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("dashboard.json: %d", resp.StatusCode)
		}
	}
	took := time.Since(t0)
	got := rc12HMGETs(r) - before
	t.Logf("%d polls of /dashboard.json in %v: %d HMGETs (%.0f status reads of %d)", polls, took.Round(time.Millisecond), got, float64(got)/perStatus, perStatus)
	if allowed := int64(took/time.Second+2) * perStatus; got > allowed {
		t.Errorf("%d unauthenticated polls of /dashboard.json in %v cost Redis %d HMGETs (%d status reads of %d SKUs × %d shards); at most one read a second, as /metrics' collector, would be %d",
			polls, took.Round(time.Millisecond), got, got/perStatus, nSKU, shards, allowed)
	}
}
