package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const lifeSecretEnv = "SECKILL_LIFE_TEST_SECRET"

// lifeConfig writes a config for activity "kact" listening on free ports.
func lifeConfig(t *testing.T, redisAddr, shopURL string, stock int64, extra string) string {
	t.Helper()
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
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
    pending_timeout: 3s # the least allowed: 2 × upstream.timeout + 2s = 2.6s
%s`, redistest.FreePort(t), redistest.FreePort(t), shopURL, lifeSecretEnv, redisAddr,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), stock, extra)
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// cli runs one command in-process and returns its exit code and output.
func cliRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// The release command: a double release is harmless (exit 0 both times),
// an unknown token is exit 1 with a clear message, a malformed one exit 2,
// and stock never goes above initial.
func TestReleaseCommand(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	if code, _, errs := cliRun("preheat", "-c", cfgPath); code != 0 {
		t.Fatalf("preheat: %d %s", code, errs)
	}
	cfg, _ := config.Load(cfgPath)
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := &cfg.Activities[0]
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: "u1", Qty: 1, Limit: 1,
		Shards: 4, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	tok := r.Token.String()
	if c, _ := st.Confirm(context.Background(), r.Token, 4, "O-1"); c != lua.OK {
		t.Fatalf("confirm: %v", c)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantText string
	}{
		{"refund", []string{"release", "-c", cfgPath, tok, "--reason", "refund"}, 0, "released (refund)"},
		{"replay", []string{"release", "-c", cfgPath, tok, "--reason", "refund"}, 0, "already released"},
		{"unknown token", []string{"release", "-c", cfgPath, "kact.sku1.1.AAAAAAAAAAAAAAAAAAAAAA"}, 1, "no reservation kact.sku1.1.AAAAAAAAAAAAAAAAAAAAAA"},
		{"malformed token", []string{"release", "-c", cfgPath, "not-a-token"}, 2, "not a reservation token"},
		{"no token", []string{"release", "-c", cfgPath}, 2, "exactly one TOKEN"},
		{"status", []string{"status", "-c", cfgPath}, 0, "kact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := cliRun(tt.args...)
			if code != tt.wantCode || !strings.Contains(out+errs, tt.wantText) {
				t.Fatalf("exit %d (want %d), output %q %q (want %q)", code, tt.wantCode, out, errs, tt.wantText)
			}
		})
	}
	s, _ := st.Status(context.Background(), a)
	if k := s.SKUs[0]; !k.OK || k.Remaining != 5 || k.Released != 1 || k.Confirmed != 0 {
		t.Fatalf("status: %+v", k)
	}
	res, _, _ := st.Lookup(context.Background(), r.Token, 4)
	if res.Reason != "refund" || res.ReleasedMs == 0 {
		t.Fatalf("record: %+v", res)
	}
}

// killShop is the shop of the kill test: it refuses (500) some users,
// answers others only after the proxy's timeout (the order is taken
// first), and tells verify and count.
type killShop struct {
	mu       sync.Mutex
	orders   map[string]string // token -> user
	inflight atomic.Int64
	srv      *httptest.Server
}

func newKillShop(t *testing.T) *killShop {
	s := &killShop{orders: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/internal/orders":
			s.mu.Lock()
			_, ok := s.orders[r.URL.Query().Get("token")]
			s.mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			fmt.Fprintf(w, `{"order_id":%q}`, "O-"+r.URL.Query().Get("token"))
			return
		case "/internal/count":
			s.mu.Lock()
			n := len(s.orders)
			s.mu.Unlock()
			fmt.Fprintf(w, `{"count":%d}`, n)
			return
		}
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		tok, user := r.Header.Get("X-Seckill-Token"), r.Header.Get("X-Seckill-User")
		n, _ := strconv.Atoi(strings.TrimPrefix(user, "u"))
		if tok == "" || n%5 == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		s.mu.Lock()
		s.orders[tok] = user
		s.mu.Unlock()
		if n%5 == 2 {
			time.Sleep(time.Second) // beyond upstream.timeout: outcome unknown to the proxy
		}
		fmt.Fprintf(w, `{"order_id":%q}`, "O-"+tok)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "seckill-proxy")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func startServe(t *testing.T, bin, cfgPath string) (*exec.Cmd, string) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-c", cfgPath)
	cmd.Env = os.Environ()
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + cfg.Listen + "/_seckill/time")
		if err == nil {
			resp.Body.Close()
			return cmd, cfg.Listen
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The kill test: a spike through two serve processes, one SIGKILLed in the
// middle of it, the shop failing some buyers (500) and too slow for others
// (timeouts). After `reconcile --repair` every SKU keeps the invariant, the
// units confirmed are exactly the shop's tokened orders, no buyer holds
// more than the limit and no unit is confirmed twice.
func TestKillMidSpike(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two serve processes")
	}
	const stock, buyers = 60, 400
	srv := redistest.Start(t)
	sh := newKillShop(t)
	verify := fmt.Sprintf("    verify: { url: \"%s/internal/orders?token={token}\", count_url: \"%s/internal/count?sku={sku}\" }\n", sh.srv.URL, sh.srv.URL)
	cfgA := lifeConfig(t, srv.Addr, sh.srv.URL, stock, verify)
	cfgB := lifeConfig(t, srv.Addr, sh.srv.URL, stock, verify)
	bin := buildBinary(t)
	if code, _, errs := cliRun("preheat", "-c", cfgA); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	procA, addrA := startServe(t, bin, cfgA)
	_, addrB := startServe(t, bin, cfgB)

	hc := &http.Client{Timeout: 5 * time.Second}
	var sent atomic.Int64
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			addr := addrB
			if i%2 == 0 {
				addr = addrA
			}
			if sent.Add(1) == buyers/3 {
				// Mid-spike: requests in flight at A, some of them at the shop.
				go func() { time.Sleep(20 * time.Millisecond); _ = procA.Process.Kill(); close(killed) }()
			}
			req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/kact/sku1/buy", strings.NewReader("{}"))
			req.Header.Set("X-User-Id", "u"+strconv.Itoa(i))
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(i)
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond) // a spike with a shape, not one burst
		}
	}
	wg.Wait()
	<-killed
	// Let the shop finish what it took (late orders land), then let every
	// reservation pass pending_timeout.
	deadline := time.Now().Add(10 * time.Second)
	for sh.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3100 * time.Millisecond)

	code, out, errs := cliRun("reconcile", "-c", cfgB, "--repair", "--json")
	var rep reservation.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("reconcile output: %v\n%s\n%s", err, out, errs)
	}
	if code != 0 || rep.Alerting() {
		t.Fatalf("reconcile --repair: exit %d, alerts %v\n%s", code, rep.Activities[0].Alerts, errs)
	}
	if code, out, _ := cliRun("status", "-c", cfgB, "--json"); code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}

	cfg, _ := config.Load(cfgB)
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Status(context.Background(), &cfg.Activities[0])
	if err != nil {
		t.Fatal(err)
	}
	k := s.SKUs[0]
	sh.mu.Lock()
	orders := map[string]string{}
	for tok, u := range sh.orders {
		orders[tok] = u
	}
	sh.mu.Unlock()
	t.Logf("after repair: %+v; shop orders %d; settled %d stale reservations", k, len(orders), len(rep.Activities[0].Stale))
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(len(orders)) || k.Confirmed > stock {
		t.Fatalf("status %+v vs %d shop orders", k, len(orders))
	}
	perUser := map[string]int{}
	for tok, u := range orders {
		perUser[u]++
		if perUser[u] > 1 {
			t.Fatalf("user %s holds %d orders", u, perUser[u])
		}
		pt, err := store.ParseToken(tok)
		if err != nil {
			t.Fatalf("shop order token %q: %v", tok, err)
		}
		r, ok, err := st.Lookup(context.Background(), pt, 4)
		if err != nil || !ok || r.State != store.StateConfirmed || r.User != u {
			t.Fatalf("shop order %s (user %s): reservation %+v ok=%v err=%v", tok, u, r, ok, err)
		}
	}
	if len(rep.Activities[0].Stale) == 0 {
		t.Log("note: the kill left no stale reservation this time")
	}
}
