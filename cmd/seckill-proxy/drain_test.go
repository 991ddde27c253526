package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// slowShop takes every buy (200 with an order id) after a pause, so a
// SIGTERM finds winners at the shop.
type slowShop struct {
	mu       sync.Mutex
	orders   map[string]string // token -> user, buys answered 200
	inflight atomic.Int64
	srv      *httptest.Server
}

func newSlowShop(t *testing.T, pause time.Duration) *slowShop {
	s := &slowShop{orders: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, user := r.Header.Get("X-Seckill-Token"), r.Header.Get("X-Seckill-User")
		if tok == "" {
			w.WriteHeader(http.StatusOK)
			return
		}
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		time.Sleep(pause) // the shop at work, not synchronisation
		s.mu.Lock()
		s.orders[tok] = user
		s.mu.Unlock()
		fmt.Fprintf(w, `{"order_id":%q}`, "O-"+tok)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// drainAnswer is one buy of the drain test.
type drainAnswer struct {
	user       string
	sent       time.Time
	status     int
	code       string // "WIN" for the shop's 200
	retryAfter string
	err        error
}

// TestGracefulStop: serve under a spike against a slow shop (1.5 s a buy)
// gets SIGTERM while winners are at the shop. /readyz turns 503 "draining"; every buy
// sent after that is answered 503 BUSY with Retry-After (or, once the
// listener is closed, not connected at all); no buy sent before the signal
// is cut off; the process exits 0; and afterwards nothing is pending in
// Redis: every buy the shop answered 2xx is confirmed, the stock adds up.
func TestGracefulStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve")
	}
	const stock = 10000
	rs := redistest.Start(t)
	sh := newSlowShop(t, 1500*time.Millisecond)
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	adminAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: %q }
upstream: { url: %q, timeout: 3s, signing_secret_env: %s }
server: { drain_delay: 500ms, shutdown_timeout: 5s }
redis: { addrs: [%q], timeout: 1s }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: dact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: %d }]
`, redistest.FreePort(t), adminAddr, sh.srv.URL, lifeSecretEnv, rs.Addr,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), stock)
	cfgPath := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cliRun("preheat", "-c", cfgPath); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	bin := buildBinary(t)
	proc, addr := startServe(t, bin, cfgPath)
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Ready once the start-up warm-up is over (a balancer waits for it).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := readyz()
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz before the signal: %d %s", code, body)
		}
	}

	// The spike: 40 buyers at a time, each buy a new user on a new
	// connection, until the process has exited (at most 3000 buys).
	var (
		mu      sync.Mutex
		answers []drainAnswer
		next    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for w := 0; w < 40; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped.Load() {
				n := next.Add(1)
				if n > 3000 {
					return
				}
				a := drainAnswer{user: "d" + strconv.FormatInt(n, 10), sent: time.Now()}
				req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/dact/sku1/buy", strings.NewReader("{}"))
				req.Header.Set("X-User-Id", a.user)
				resp, err := hc.Do(req)
				if err != nil {
					a.err = err
					time.Sleep(5 * time.Millisecond) // refused: the listener is closed
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
					if resp.Header.Get("X-Seckill-Token") != "" && resp.StatusCode == 200 {
						a.code = "WIN"
					} else if i := strings.Index(string(b), `"code":"`); i >= 0 {
						a.code, _, _ = strings.Cut(string(b[i+8:]), `"`)
					}
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // a crowd, not a busy loop
			}
		}()
	}

	// SIGTERM while winners are at the shop: their answers take longer than
	// the drain delay, so the shutdown itself must wait for them.
	deadline := time.Now().Add(10 * time.Second)
	for sh.inflight.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the shop never had 20 buys at once (%d)", sh.inflight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	atShop := sh.inflight.Load()
	tSig := time.Now()
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var tDraining time.Time
	var readyBody string
	for tDraining.IsZero() && time.Since(tSig) < 5*time.Second {
		if code, body := readyz(); code == http.StatusServiceUnavailable {
			tDraining, readyBody = time.Now(), body
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Buys sent while draining (the spike's buyers are all at the shop).
	for i := 0; i < 20 && !tDraining.IsZero(); i++ {
		a := drainAnswer{user: "late" + strconv.Itoa(i), sent: time.Now()}
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/dact/sku1/buy", strings.NewReader("{}"))
		req.Header.Set("X-User-Id", a.user)
		if resp, err := hc.Do(req); err != nil {
			a.err = err
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			if i := strings.Index(string(b), `"code":"`); i >= 0 {
				a.code, _, _ = strings.Cut(string(b[i+8:]), `"`)
			}
		}
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
	}
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit within 20 s of SIGTERM")
	}
	tExit := time.Now()
	stopped.Store(true)
	wg.Wait()
	if exitErr != nil {
		t.Errorf("serve exited with %v", exitErr)
	}
	if tDraining.IsZero() {
		t.Fatal("/readyz never answered 503 after SIGTERM")
	}
	if !strings.Contains(readyBody, "draining") {
		t.Errorf("/readyz while draining = %q, want it to say draining", readyBody)
	}

	byCode := map[string]int{}
	busyAfter, refusedAfter := 0, 0
	for _, a := range answers {
		switch {
		case a.err != nil:
			byCode["transport error"]++
			if a.sent.Before(tSig) {
				t.Errorf("%s sent before SIGTERM: %v", a.user, a.err)
			} else {
				refusedAfter++
			}
		case a.sent.After(tDraining):
			// Readiness said draining: Drain had run; nobody new is admitted.
			byCode[a.code+" (after draining)"]++
			if a.status != 503 || a.code != "BUSY" || a.retryAfter == "" {
				t.Errorf("%s sent while draining: %d %s Retry-After %q, want 503 BUSY with Retry-After", a.user, a.status, a.code, a.retryAfter)
			} else {
				busyAfter++
			}
		default:
			byCode[a.code]++
			if a.code != "WIN" && a.code != "BUSY" {
				t.Errorf("%s: %d %s", a.user, a.status, a.code)
			}
		}
	}
	t.Logf("SIGTERM with %d buys at the shop; /readyz 503 after %v; exit after %v; answers %v",
		atShop, tDraining.Sub(tSig).Round(time.Millisecond), tExit.Sub(tSig).Round(time.Millisecond), byCode)
	if busyAfter == 0 {
		t.Errorf("no buy was answered 503 BUSY during the drain delay")
	}

	// Nothing left pending: every buy the shop took is confirmed.
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	s, err := st.Status(ctx, &cfg.Activities[0])
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
	t.Logf("after exit: %+v; shop orders %d", k, len(orders))
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(len(orders)) || k.Remaining+k.Confirmed != stock {
		t.Errorf("status %+v vs %d shop orders: want nothing pending and every order confirmed", k, len(orders))
	}
	for tok, u := range orders {
		pt, err := store.ParseToken(tok)
		if err != nil {
			t.Fatalf("shop order token %q: %v", tok, err)
		}
		r, ok, err := st.Lookup(ctx, pt, cfg.Activities[0].Shards)
		if err != nil || !ok || r.State != store.StateConfirmed || r.User != u || r.OrderID != "O-"+tok {
			t.Errorf("shop order %s (user %s): reservation %+v ok=%v err=%v", tok, u, r, ok, err)
		}
	}
}
