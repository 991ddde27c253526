package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// serve exports the Redis node and per-SKU gauges, read by its collector
// in the background: many scrapes do not make Redis answer more INFO.
func TestServeRedisGauges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	srv := redistest.Start(t, "--maxmemory", "64mb")
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	if code, _, errs := cliRun("preheat", "-c", cfgPath); code != 0 {
		t.Fatalf("preheat: %d %s", code, errs)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	startServe(t, buildBinary(t), cfgPath)
	scrape := func() string {
		resp, err := http.Get("http://" + cfg.Admin.Listen + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wants := []string{
		`seckill_redis_up{node="` + srv.Addr + `",role="master"} 1`,
		`seckill_redis_memory_max_bytes{node="` + srv.Addr + `",role="master"} 6.7108864e+07`,
		`seckill_redis_connected_clients{node="` + srv.Addr + `",role="master"}`,
		`seckill_redis_evicted_keys{node="` + srv.Addr + `",role="master"} 0`,
		`seckill_redis_slowlog_length{node="` + srv.Addr + `",role="master"}`,
		`seckill_redis_ops_per_second{node="` + srv.Addr + `",role="master"}`,
		`seckill_stock_remaining{activity="kact",sku="sku1"} 5`,
		`seckill_stock_invariant_ok{activity="kact",sku="sku1"} 1`,
		`seckill_activity_ready{activity="kact"} 1`,
		`seckill_activity_open{activity="kact"} 1`,
	}
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		body = scrape()
		missing := ""
		for _, w := range wants {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %s:\n%s", missing, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// 50 scrapes: Redis sees at most one INFO per second of them (+2 for
	// rounds straddling the start and the end, +1 for this test's own
	// first INFO), not one per scrape.
	infos := func() int64 { return redistest.ParseStat(srv.Info("commandstats", "cmdstat_info"), "calls") }
	before, start := infos(), time.Now()
	for range 50 {
		scrape()
	}
	elapsed := time.Since(start)
	if got, most := infos()-before, int64(elapsed/time.Second)+3; got > most {
		t.Errorf("%d INFO calls during 50 scrapes in %v, want at most %d", got, elapsed, most)
	}
}
