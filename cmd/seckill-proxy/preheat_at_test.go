package main

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// scheduleConfig is lifeConfig with the window and preheat_at given.
func scheduleConfig(t *testing.T, redisAddr, shopURL string, stock int64, start time.Time, preheatAt string) string {
	t.Helper()
	os.Setenv(lifeSecretEnv, "s3cret")
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: 1s }
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
    preheat_at: %s
`, redistest.FreePort(t), redistest.FreePort(t), shopURL, lifeSecretEnv, redisAddr,
		start.Format(time.RFC3339Nano), start.Add(time.Hour).Format(time.RFC3339Nano), stock, preheatAt)
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lockedBuffer collects a process's log while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// serveLogged is startServe that keeps the process's log.
func serveLogged(t *testing.T, bin, cfgPath string) (string, *lockedBuffer) {
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
			return cfg.Listen, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scheduledPreheats counts the "scheduled preheat" log lines by outcome.
func scheduledPreheats(t *testing.T, logs ...*lockedBuffer) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range logs {
		for _, line := range strings.Split(l.String(), "\n") {
			var e struct {
				Msg     string `json:"msg"`
				Outcome string `json:"outcome"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "scheduled preheat" {
				out[e.Outcome]++
			}
			if strings.Contains(line, "scheduled preheat failed") {
				out["error"]++
			}
		}
	}
	return out
}

func orderShop(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	n := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		id := n
		mu.Unlock()
		fmt.Fprintf(w, `{"order_id":"O-%d"}`, id)
	}))
	t.Cleanup(s.Close)
	return s
}

func buy(t *testing.T, addr, user string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/kact/sku1/buy", strings.NewReader("{}"))
	req.Header.Set("X-User-Id", user)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("buy %s: %v", user, err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Two serve instances, preheat_at a few hundred ms after they start: the
// stock is loaded exactly once, and buys at start win; a third instance
// started after the moment does nothing more. An instance started after
// the moment of an activity nobody preheated preheats it at once.
func TestServeScheduledPreheat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three serve processes")
	}
	srv := redistest.Start(t)
	shop := orderShop(t)
	bin := buildBinary(t)

	t.Run("two instances", func(t *testing.T) {
		// The instances are up within a few hundred ms (the binary is
		// built); the moment is after that, start 1.5 s later. (Were
		// they slower, each would preheat at once: still exactly once.)
		start := time.Now().Add(3 * time.Second)
		cfgA := scheduleConfig(t, srv.Addr, shop.URL, 6, start, "-1500ms")
		cfgB := scheduleConfig(t, srv.Addr, shop.URL, 6, start, "-1500ms")
		addrA, logA := serveLogged(t, bin, cfgA)
		addrB, logB := serveLogged(t, bin, cfgB)
		time.Sleep(time.Until(start))
		// At start: every buyer of the stock wins, at either instance.
		var wg sync.WaitGroup
		codes := make([]int, 8)
		for i := range codes {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				addr := addrA
				if i%2 == 1 {
					addr = addrB
				}
				codes[i] = buy(t, addr, fmt.Sprintf("u%d", i))
			}(i)
		}
		wg.Wait()
		won, soldOut := 0, 0
		for _, c := range codes {
			switch c {
			case http.StatusOK:
				won++
			case http.StatusGone:
				soldOut++
			default:
				t.Errorf("buy answered %d", c)
			}
		}
		if won != 6 || soldOut != 2 {
			t.Fatalf("won %d, sold out %d (codes %v)\nA:\n%s\nB:\n%s", won, soldOut, codes, logA, logB)
		}
		n := scheduledPreheats(t, logA, logB)
		if n["created"] != 1 || len(n) != 1 {
			t.Fatalf("scheduled preheats %v, want exactly one created\nA:\n%s\nB:\n%s", n, logA, logB)
		}
		out, _ := want(t, 0, "kact: preheated at ", "status", "-c", cfgA)
		if !strings.Contains(out, "by the scheduled preheat of ") {
			t.Fatalf("status: %s", out)
		}
		// A third instance, late: sees the stock loaded, loads nothing.
		_, logC := serveLogged(t, bin, scheduleConfig(t, srv.Addr, shop.URL, 6, start, "-1500ms"))
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logC.String(), "activity already preheated") {
			if time.Now().After(deadline) {
				t.Fatalf("late instance:\n%s", logC)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := scheduledPreheats(t, logA, logB, logC); n["created"] != 1 || len(n) != 1 {
			t.Fatalf("scheduled preheats %v after a late instance", n)
		}
	})

	t.Run("started after the moment", func(t *testing.T) {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		cfg := scheduleConfig(t, srv.Addr, shop.URL, 3, time.Now().Add(time.Hour), "-2h")
		want(t, 0, "kact: preheat due since ", "status", "-c", cfg)
		addr, logs := serveLogged(t, bin, cfg)
		deadline := time.Now().Add(10 * time.Second)
		for scheduledPreheats(t, logs)["created"] != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("not preheated at once:\n%s", logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		want(t, 0, "by the scheduled preheat of ", "status", "-c", cfg)
		_ = addr
	})
}

// status says when a scheduled preheat will happen, in text and JSON.
func TestStatusScheduledPreheat(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	cfg := scheduleConfig(t, srv.Addr, "http://127.0.0.1:1", 3, start, "-5m")
	out, _ := want(t, 0, "kact: preheat scheduled at "+start.Add(-5*time.Minute).UTC().Format(time.RFC3339)+" (preheat_at -5m0s), in 1h5", "status", "-c", cfg)
	if !strings.Contains(out, "not preheated") {
		t.Fatalf("status: %s", out)
	}
	code, js, errs := cliRun("status", "-c", cfg, "--json")
	var doc struct {
		Activities []struct {
			ID      string         `json:"id"`
			Preheat map[string]any `json:"preheat"`
		} `json:"activities"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || code != 0 || len(doc.Activities) != 1 {
		t.Fatalf("status --json: %d %v\n%s\n%s", code, err, js, errs)
	}
	p := doc.Activities[0].Preheat
	if p["state"] != "scheduled" || p["preheat_at"] != "-5m0s" || p["scheduled_at"] != start.Add(-5*time.Minute).UTC().Format(time.RFC3339) || p["preheated_at"] != nil {
		t.Fatalf("status --json preheat: %v", p)
	}
	// Preheated by hand before the moment: said so, and the schedule is moot.
	want(t, 0, "kact: created", "preheat", "-c", cfg)
	want(t, 0, "kact: preheated at ", "status", "-c", cfg)
	want(t, 0, " by hand", "status", "-c", cfg)
	_, js, _ = cliRun("status", "-c", cfg, "--json")
	if err := json.Unmarshal([]byte(js), &doc); err != nil || doc.Activities[0].Preheat["state"] != "preheated" || doc.Activities[0].Preheat["by"] != "hand" {
		t.Fatalf("status --json after preheat: %s", js)
	}
}
