package reservation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const secretEnv = "SECKILL_RESERVATION_TEST_SECRET"

// proxyConfig writes and loads a config for one activity "qact" (defaults
// and validation as `serve` gets them).
func proxyConfig(t testing.TB, redisAddrs []string, shopURL, mode string, stock int64, workers int, rate float64) *config.Config {
	t.Helper()
	os.Setenv(secretEnv, "s3cret")
	now := time.Now()
	addrs := `"` + strings.Join(redisAddrs, `","`) + `"`
	y := fmt.Sprintf(`listen: "127.0.0.1:0"
admin: { listen: "127.0.0.1:0" }
upstream: { url: %q, timeout: 2s, signing_secret_env: %s }
redis: { addrs: [%s], timeout: 1s }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: qact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: %d }]
    shards: 4
    admission_rate: { rate: 1000000, burst: 1000000 }
    mode: %s
    queue: { workers: %d, rate: %g }
    pending_timeout: 10m
    verify: { url: "%s/internal/orders?token={token}" }
`, shopURL, secretEnv, addrs, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339),
		stock, mode, workers, rate, shopURL)
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startProxy wires one proxy instance as serve does (without the workers).
func startProxy(t testing.TB, cfg *config.Config) (string, *store.Store) {
	t.Helper()
	log := zap.NewNop()
	st := openStore(t, cfg.Redis.Addrs...)
	m := metrics.New()
	pipe := admission.New(st, m, log, time.Now)
	pipe.Apply(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go pipe.Run(ctx)
	srv, err := proxy.New(cfg, pipe, st, m, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		cancel()
		sctx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer c2()
		_ = srv.Shutdown(sctx)
	})
	if _, err := st.Preheat(tctx(t), &cfg.Activities[0], false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), st
}

type answer struct {
	status int
	Code   string `json:"code"`
	Token  string `json:"token"`
	State  string `json:"state"`
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}

func buy(addr, user string) answer {
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/qact/sku1/buy", strings.NewReader("{}"))
	req.Header.Set("X-User-Id", user)
	resp, err := client.Do(req)
	if err != nil {
		return answer{Code: "ERROR: " + err.Error()}
	}
	defer resp.Body.Close()
	var a answer
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &a)
	a.status = resp.StatusCode
	if a.Token == "" {
		a.Token = resp.Header.Get("X-Seckill-Token")
	}
	return a
}

// allConfirmed is a condition for eventually: every token's reservation
// reads confirmed on the proxy's public endpoint.
func allConfirmed(addr string, tokens []string) func() bool {
	return func() bool {
		for _, tok := range tokens {
			if reservationState(addr, tok) != store.StateConfirmed {
				return false
			}
		}
		return true
	}
}

func reservationState(addr, tok string) string {
	resp, err := client.Get("http://" + addr + "/_seckill/reservations/" + tok)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var a answer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return a.State
}

// spike sends one buy per user, all at once, and tallies answers by code.
func spike(addr string, users int, prefix string) (map[string]int, []string) {
	var mu sync.Mutex
	codes := map[string]int{}
	var tokens []string
	var wg sync.WaitGroup
	for i := 0; i < users; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a := buy(addr, prefix+strconv.Itoa(i))
			code := a.Code
			if code == "" {
				code = strconv.Itoa(a.status)
			}
			mu.Lock()
			codes[code]++
			if code == "QUEUED" || (a.status >= 200 && a.status < 300) {
				tokens = append(tokens, a.Token)
			}
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return codes, tokens
}

// stuckTransport delivers the request to the shop, then never returns the
// answer: a worker that dies after the shop took the order.
type stuckTransport struct{}

func (stuckTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// Queue mode: 300 buyers for 20 units get 20 QUEUED at once; the workers
// forward the 20 to the shop at no more than queue.rate; every buyer sees
// "confirmed" by polling; a worker killed mid-drain loses nothing (its
// entries are taken over with XAUTOCLAIM, and verified before a resend).
func TestQueueMode(t *testing.T) {
	const rate = 10
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 20, 4, rate)
	addr, st := startProxy(t, cfg)

	codes, tokens := spike(addr, 300, "buyer-")
	if codes["QUEUED"] != 20 || codes["SOLD_OUT"] != 280 || len(tokens) != 20 {
		t.Fatalf("answers: %v", codes)
	}
	if sh.orderCount() != 0 {
		t.Fatal("the shop got orders before any worker ran")
	}

	// Worker A takes two entries, the shop takes their orders, and A dies
	// before it can confirm or acknowledge them.
	a := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{
		Consumer: "A", ClaimIdle: time.Second, Client: &http.Client{Transport: stuckTransport{}},
	})
	cfgA := *cfg
	cfgA.Activities = append([]config.Activity(nil), cfg.Activities...)
	cfgA.Activities[0].Queue.Workers = 2
	a.Start(&cfgA)
	eventually(t, 10*time.Second, "worker A reaches the shop", func() bool { return sh.orderCount() == 2 })
	a.Kill()

	// Worker B drains the rest and takes A's two over.
	b := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "B", ClaimIdle: time.Second})
	b.Start(cfg)
	t.Cleanup(b.Stop)
	eventually(t, 30*time.Second, "all 20 confirmed by polling", allConfirmed(addr, tokens))
	sh.mu.Lock()
	orders, requests, times := len(sh.orders), sh.requests, append([]time.Time(nil), sh.times...)
	sh.mu.Unlock()
	if orders != 20 || requests != 20 {
		t.Fatalf("shop: %d orders from %d requests, want 20 from 20", orders, requests)
	}
	for _, tok := range tokens {
		if _, ok := sh.order(tok); !ok {
			t.Fatalf("confirmed token %s has no order at the shop", tok)
		}
	}
	// No more than queue.rate per second (plus the bucket's capacity of
	// one tenth of a second, at least one token) in any one-second window,
	// as the bucket grants them; arrival times at the shop add dispatch
	// jitter on a busy machine, so allow a little slack — enough to stay
	// deterministic, far too little to pass a queue that does not pace.
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < time.Second; j++ {
			n++
		}
		if float64(n) > float64(rate)*1.3+2 {
			t.Fatalf("%d orders within one second at the shop; queue.rate is %d", n, rate)
		}
	}
	s := status(t, st, &cfg.Activities[0])
	if !s.OK || s.Confirmed != 20 || s.Pending != 0 || s.Remaining != 0 {
		t.Fatalf("status: %+v", s)
	}
	// Handled entries are deleted: the streams hold nothing, and expire.
	if n, err := st.QueueLength(tctx(t), "qact", "sku1", 4); err != nil || n != 0 {
		t.Fatalf("stream backlog %d, %v", n, err)
	}
	for i := 0; i < 4; i++ {
		key := fmt.Sprintf("seckill:{qact:%d}:log", i)
		if ttl, _ := srv.Do("PTTL", key); ttl == "-1" {
			t.Fatalf("%s has no expiry", key)
		}
	}
}
