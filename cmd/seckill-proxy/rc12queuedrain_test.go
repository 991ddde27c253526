package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 12, sale-day operations: SIGTERM with queued buyers and
// the shop's in-flight budget full.
//
// README (Graceful stop, Kubernetes): give the pod
// terminationGracePeriodSeconds above drain_delay + shutdown_timeout. serve
// stops the queue workers first (serve.go: queue.Stop() before
// gracefulStop), and Stop waits for every worker to finish the entry it
// holds. A worker waiting for a slot of upstream.max_inflight waits in
// budget.Acquire(ctx, slotWait) with the kill context, not the stop one
// (reservation/queue.go handle), for up to claimIdle/2 (≥ 15 s); when it
// gets the slot it claims and sends — after the stop. So the workers
// holding entries send them one slot at a time, and only then does the
// drain (listener close, shutdown_timeout) begin: the stop takes
// workers × shop latency on top of the documented bound, and an
// orchestrator's SIGKILL at that bound cuts winners mid-flight.
//
// Fixed (sd12): a stopping worker claims nothing more (the slot wait ends
// with the stop, and the stop is looked at before the claim); the entries
// it held stay in the streams for a takeover (another instance, or the
// next start, after ClaimIdle: reservation's TestSD12QueueStopLeaves…
// shows the takeover sends every one); serve stops the workers alongside
// the drain, within shutdown_timeout.
func TestRC12SigtermWaitsForQueueWorkersBeyondShutdownTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; a stop of ~10 s")
	}
	const buyers = 16
	const shopDelay = 700 * time.Millisecond
	srv := redistest.Start(t)
	var sent, afterTerm atomic.Int64
	var termAt atomic.Int64
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/buy") {
			w.WriteHeader(404)
			return
		}
		sent.Add(1)
		if at := termAt.Load(); at != 0 && time.Now().UnixNano() > at {
			afterTerm.Add(1)
		}
		time.Sleep(shopDelay)
		fmt.Fprintf(w, `{"order_id":"O-%s"}`, r.Header.Get("X-User-Id"))
	}))
	t.Cleanup(shop.Close)
	bin := rc12Build(t)
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 1s, signing_secret_env: %s, max_inflight: 1 }
redis: { addrs: [%q], timeout: 1s }
server: { drain_delay: 200ms }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: kact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 100 }]
    shards: 2
    pending_timeout: 10s
    mode: queue
    queue: { workers: 16, rate: 1000 }
`, redistest.FreePort(t), redistest.FreePort(t), shop.URL, lifeSecretEnv, srv.Addr,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	path := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cliRun("preheat", "-c", path); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	cmd, addr, logs := rc12Serve(t, bin, path)
	for i := 0; i < buyers; i++ {
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/kact/sku1/buy", strings.NewReader("{}"))
		req.Header.Set("X-User-Id", fmt.Sprintf("q-%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("buyer %d: %d, want 202 QUEUED", i, resp.StatusCode)
		}
	}
	time.Sleep(300 * time.Millisecond) // the workers hold their entries
	// shutdown_timeout defaults to 2 × upstream.timeout + 5 s.
	bound := 200*time.Millisecond + 2*time.Second + 5*time.Second
	t0 := time.Now()
	termAt.Store(t0.UnixNano())
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("serve did not exit 40 s after SIGTERM")
	}
	took := time.Since(t0)
	t.Logf("SIGTERM → exit: %v (drain_delay + shutdown_timeout = %v); shop got %d requests, %d of them after SIGTERM", took.Round(time.Millisecond), bound, sent.Load(), afterTerm.Load())
	// At most max_inflight (1) sends claimed just before the signal may
	// reach the shop after it; nothing is claimed after it.
	if n := afterTerm.Load(); n > 1 {
		t.Errorf("the shop got %d queued buyers' requests after SIGTERM: stopping workers went on claiming and sending", n)
	}
	// Nothing lost: every unit adds up, and every buyer not confirmed is
	// still queued, its entry in the stream for a takeover.
	cfg, st := openStore(t, path)
	a := &cfg.Activities[0]
	k := skuStatus(t, st, a)
	left, err := st.QueueLength(context.Background(), a.ID, a.SKUs[0].ID, a.Shards)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after exit: remaining %d pending %d confirmed %d; stream entries %d", k.Remaining, k.Pending, k.Confirmed, left)
	if !k.OK || k.Remaining != 100-buyers || k.Pending+k.Confirmed != buyers || k.Confirmed != sent.Load() || left != k.Pending {
		t.Errorf("after the stop, stock or stream do not add up: remaining %d pending %d confirmed %d (shop took %d), %d stream entries for the %d not confirmed (%s)",
			k.Remaining, k.Pending, k.Confirmed, sent.Load(), left, buyers-k.Confirmed, k.Problem)
	}
	if took > bound+time.Second {
		t.Errorf("serve took %v from SIGTERM to exit, above drain_delay + shutdown_timeout (%v) that README tells operators to size terminationGracePeriodSeconds by; the queue workers kept claiming slots and sending %d queued buyers after SIGTERM before the drain began",
			took.Round(time.Millisecond), bound, afterTerm.Load())
		t.Logf("serve log tail:\n%s", rt10crashTail(logs.String(), 8))
	}
}
