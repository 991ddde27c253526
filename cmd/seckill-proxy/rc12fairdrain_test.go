package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 12, sale-day operations: SIGTERM while buys are held in
// a fair_start window.
//
// README (Graceful stop): "buys already held by fair_start are in flight
// and finish like the others"; (Fair start) each held buy goes on at its
// own random release moment in [start + fair_start, + spread). A held buy
// waits in admission's fair pen; gracefulStop gives in-flight handlers
// shutdown_timeout, which nothing relates to fair_start + spread (up to
// 20 s). When serve returns, its deferred pipe.Close() closes the pen, and
// fairPen.run "lets every held buy go: the instance is closing" — at once,
// seconds before their release moments and before the buys held on every
// other instance, while the store is still open: they reserve stock, and
// the process exits under them. The buyers get no answer; their units sit
// pending until the reconciler comes by.
//
// Fixed (sd12): on SIGTERM (admission's Drain, and at Close) every held
// buy is answered 503 BUSY with Retry-After at once, during drain_delay,
// nothing reserved; none is let on before its release moment.

// rc12Serve starts serve and returns its process and log.
func rc12Serve(t *testing.T, bin, cfgPath string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-c", cfgPath)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + cfg.Listen + "/_seckill/time")
		if err == nil {
			resp.Body.Close()
			return cmd, cfg.Listen, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRC12SigtermReleasesHeldFairStartBuysEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, waits for a sale's start")
	}
	const stock, buyers = 100, 60
	const fair = 6 * time.Second
	srv := redistest.Start(t)
	var orders sync.Map
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders.Store(r.Header.Get("X-Seckill-Token"), true)
		fmt.Fprintf(w, `{"order_id":"O-%s"}`, r.Header.Get("X-User-Id"))
	}))
	t.Cleanup(shop.Close)
	shopOrders := func() int {
		n := 0
		orders.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	bin := rc12Build(t)
	os.Setenv(lifeSecretEnv, "s3cret")
	start := time.Now().Add(2500 * time.Millisecond)
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: 1s }
server: { drain_delay: 200ms, shutdown_timeout: 1s }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: kact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: %d }]
    shards: 4
    pending_timeout: 3s
    fair_start: %s
    fair_start_spread: 1s
`, redistest.FreePort(t), redistest.FreePort(t), shop.URL, lifeSecretEnv, srv.Addr,
		start.Format(time.RFC3339Nano), start.Add(time.Hour).Format(time.RFC3339Nano), stock, fair)
	path := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cliRun("preheat", "-c", path); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	cmd, addr, logs := rc12Serve(t, bin, path)
	cfg, st := openStore(t, path)
	a := &cfg.Activities[0]

	time.Sleep(time.Until(start.Add(300 * time.Millisecond)))
	var mu sync.Mutex
	results := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/kact/sku1/buy", strings.NewReader("{}"))
			req.Header.Set("X-User-Id", fmt.Sprintf("held-%d", i))
			resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
			key := "no answer"
			if err == nil {
				var body struct {
					Code string `json:"code"`
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				_ = json.Unmarshal(b, &body)
				key = fmt.Sprintf("%d %s Retry-After=%q", resp.StatusCode, body.Code, resp.Header.Get("Retry-After"))
			}
			mu.Lock()
			results[key]++
			mu.Unlock()
		}(i)
	}
	time.Sleep(500 * time.Millisecond)
	if k := skuStatus(t, st, a); k.Remaining != stock {
		t.Fatalf("before SIGTERM, inside the fair_start window, something was reserved already: %+v", k)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	exited := time.Now()
	wg.Wait()
	k := skuStatus(t, st, a)
	t.Logf("serve exited %v after start (held buys' release moments: %v..%v after start); buyers: %v; stock: remaining %d pending %d confirmed %d; shop orders %d",
		exited.Sub(start).Round(time.Millisecond), fair, fair+time.Second, results, k.Remaining, k.Pending, k.Confirmed, shopOrders())
	if exited.After(start.Add(fair)) {
		t.Skip("serve exited after the release moments: no early release to see")
	}
	if k.Remaining != stock {
		t.Errorf("a stopping instance let its held fair_start buys reserve %d units at once, %v after start, before any of their release moments (%v after start) and before buys held on other instances: remaining %d, pending %d, confirmed %d of %d",
			stock-k.Remaining, exited.Sub(start).Round(time.Millisecond), fair, k.Remaining, k.Pending, k.Confirmed, stock)
	}
	if results["no answer"] > 0 {
		t.Errorf("%d of %d buyers held by the stopping instance got no answer at all (connection cut), not a SPEC code such as 503 BUSY", results["no answer"], buyers)
	}
	for key, n := range results {
		if key != "no answer" && !strings.HasPrefix(key, `503 BUSY Retry-After="`) || key == `503 BUSY Retry-After=""` {
			t.Errorf("%d of %d buyers held by the stopping instance got %s, want 503 BUSY with Retry-After (nothing reserved)", n, buyers, key)
		}
	}
	if t.Failed() {
		t.Logf("serve log tail:\n%s", rt10crashTail(logs.String(), 15))
	}
}
