package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const rt10crashSecretEnv = "SECKILL_RT10CRASH_SECRET"

// rt10crashOrder is one order the chaos shop holds.
type rt10crashOrder struct {
	User string
	Qty  int64
	ID   string
}

// rt10crashShop is a shop with a real order table keyed by token (the
// idempotency key SPEC §5 names): a token seen twice gets its first order
// back. Per user it refuses (409), answers only after the proxy's timeout
// (the order is made first), answers 503 after making the order (a
// balancer), or takes its time (0–300 ms) and answers 200. The order is
// committed at the end of the handler, as a shop's transaction would be,
// whether or not the proxy is still there.
type rt10crashShop struct {
	mu       sync.Mutex
	orders   map[string]rt10crashOrder // token -> order
	dupToken atomic.Int64              // a token the shop saw twice
	inflight atomic.Int64
	srv      *httptest.Server
	next     atomic.Int64
}

func rt10crashNewShop(t *testing.T) *rt10crashShop {
	s := &rt10crashShop{orders: map[string]rt10crashOrder{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func rt10crashKind(user string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(user))
	return h.Sum32() % 8
}

func (s *rt10crashShop) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/internal/orders":
		s.mu.Lock()
		o, ok := s.orders[r.URL.Query().Get("token")]
		s.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"order_id":%q}`, o.ID)
		return
	case "/internal/count":
		var n int64
		s.mu.Lock()
		for _, o := range s.orders {
			n += o.Qty
		}
		s.mu.Unlock()
		fmt.Fprintf(w, `{"count":%d}`, n)
		return
	}
	tok, user := r.Header.Get("X-Seckill-Token"), r.Header.Get("X-Seckill-User")
	if tok == "" {
		w.WriteHeader(http.StatusOK)
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	qty, _ := strconv.ParseInt(r.Header.Get("X-Seckill-Qty"), 10, 64)
	commit := func() rt10crashOrder {
		s.mu.Lock()
		defer s.mu.Unlock()
		if o, ok := s.orders[tok]; ok {
			s.dupToken.Add(1)
			return o
		}
		o := rt10crashOrder{User: user, Qty: qty, ID: "O-" + strconv.FormatInt(s.next.Add(1), 10)}
		s.orders[tok] = o
		return o
	}
	switch rt10crashKind(user) {
	case 1:
		w.WriteHeader(http.StatusConflict)
		return
	case 2:
		time.Sleep(900 * time.Millisecond) // beyond upstream.timeout
		o := commit()
		fmt.Fprintf(w, `{"order_id":%q}`, o.ID)
		return
	case 3:
		time.Sleep(20 * time.Millisecond)
		commit()
		w.WriteHeader(http.StatusServiceUnavailable) // a balancer after the order
		return
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	o := commit()
	fmt.Fprintf(w, `{"order_id":%q}`, o.ID)
}

func (s *rt10crashShop) snapshot() map[string]rt10crashOrder {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]rt10crashOrder, len(s.orders))
	for k, v := range s.orders {
		out[k] = v
	}
	return out
}

// rt10crashConfig writes a config for activity "rtc" (4 shards, limit 2,
// qty from ?qty=) with the given listen ports.
func rt10crashConfig(t *testing.T, redisAddr, shopURL string, stock int64, listen, adminPort int, redisTimeout string) string {
	t.Helper()
	os.Setenv(rt10crashSecretEnv, "s3cret")
	now := time.Now()
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 500ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: %s }
server: { drain_delay: 0s, warm_workers: 0 }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: rtc
    route: { method: POST, path: "/api/seckill/{activity}/{sku}/buy", sku_from: path, qty_from: "query:qty" }
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: %d }]
    shards: 4
    per_user_limit: 2
    max_qty: 2
    pending_timeout: 3s
    verify: { url: "%s/internal/orders?token={token}", count_url: "%s/internal/count?sku={sku}" }
`, listen, adminPort, shopURL, rt10crashSecretEnv, redisAddr, redisTimeout,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), stock, shopURL, shopURL)
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rt10crashServe starts `seckill-proxy serve` and waits until it answers.
func rt10crashServe(t *testing.T, bin, cfgPath, addr string, logs *rt10crashLog) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-c", cfgPath)
	cmd.Env = os.Environ()
	cmd.Stderr = logs
	cmd.Stdout = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/_seckill/time")
		if err == nil {
			resp.Body.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var rt10crashBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// rt10crashBuild builds the binary once per test process.
func rt10crashBuild(t *testing.T) string {
	t.Helper()
	rt10crashBin.once.Do(func() {
		// One fixed path, overwritten by each run: shared by this
		// process's tests, never piling up in the temp dir.
		rt10crashBin.path = filepath.Join(os.TempDir(), "rt10crash-seckill-proxy")
		rt10crashBin.out, rt10crashBin.err = exec.Command("go", "build", "-o", rt10crashBin.path, ".").CombinedOutput()
	})
	if rt10crashBin.err != nil {
		t.Fatalf("go build: %v\n%s", rt10crashBin.err, rt10crashBin.out)
	}
	return rt10crashBin.path
}

// rt10crashCheck runs reconcile --repair with the binary, then checks, from
// Redis and the shop: status ok and nothing pending, shop units ==
// confirmed, every shop token confirmed in Redis (never released while
// the shop holds its order), no user above the limit, nothing oversold.
func rt10crashCheck(t *testing.T, bin, cfgPath string, shop *rt10crashShop, stock int64, limit int64) {
	t.Helper()
	out, err := exec.Command(bin, "reconcile", "-c", cfgPath, "--repair", "--json", "--log-format", "console").Output()
	var rep reservation.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("reconcile --repair: %v %v\n%s", err, jerr, out)
	}
	if err != nil || rep.Alerting() {
		t.Errorf("reconcile --repair: exit %v, alerts %v", err, rep.Activities[0].Alerts)
	}
	stOut, err := exec.Command(bin, "status", "-c", cfgPath, "--json").Output()
	if err != nil {
		t.Errorf("status: %v\n%s", err, stOut)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := st.Status(ctx, &cfg.Activities[0])
	if err != nil {
		t.Fatal(err)
	}
	k := s.SKUs[0]
	orders := shop.snapshot()
	var shopUnits int64
	perUser := map[string]int64{}
	for tok, o := range orders {
		shopUnits += o.Qty
		perUser[o.User] += o.Qty
		pt, err := store.ParseToken(tok)
		if err != nil {
			t.Errorf("shop order token %q: %v", tok, err)
			continue
		}
		r, ok, err := st.Lookup(ctx, pt, 4)
		if err != nil || !ok || r.State != store.StateConfirmed || r.User != o.User || r.Qty != o.Qty {
			t.Errorf("shop order %s (%s, user %s qty %d): reservation %+v ok=%v err=%v", o.ID, tok, o.User, o.Qty, r, ok, err)
		}
	}
	t.Logf("after repair: %+v; shop units %d in %d orders; stale settled %d, moves %d", k, shopUnits, len(orders), len(rep.Activities[0].Stale), rep.Activities[0].MovesSettled)
	if !k.OK || k.Pending != 0 {
		t.Errorf("status after repair: %+v (want ok, nothing pending)", k)
	}
	if k.Confirmed != shopUnits {
		t.Errorf("shop holds %d units, Redis confirmed %d", shopUnits, k.Confirmed)
	}
	if shopUnits > stock || k.Confirmed > stock {
		t.Errorf("oversold: shop %d, confirmed %d, stock %d", shopUnits, k.Confirmed, stock)
	}
	for u, n := range perUser {
		if n > limit {
			t.Errorf("user %s holds %d units at the shop, limit %d", u, n, limit)
		}
	}
	if n := shop.dupToken.Load(); n > 0 {
		t.Logf("note: the shop saw %d token(s) twice", n)
	}
}

// TestRT10CrashChaosSpike: two `serve` processes share one Redis; a spike
// of 300 buyers (qty 1–2, per_user_limit 2, some with X-Request-Id and
// repeats) for 80 units on 4 shards, so the last units move between
// shards. During it instance A is SIGKILLed and restarted three times (its
// winners at a shop taking 0–900 ms), Redis is SIGSTOPped for 300 ms,
// stalled by DEBUG SLEEP and paused with CLIENT PAUSE WRITE. Then, once
// every reservation is past pending_timeout, `reconcile --repair`
// (SPEC §6: a crash at any instant loses no reservation): status ok with
// nothing pending, shop units == confirmed, every shop token confirmed,
// nobody above the limit, nothing oversold.
func TestRT10CrashChaosSpike(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve processes")
	}
	const stock, buyers, limit = 80, 300, 2
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	shop := rt10crashNewShop(t)
	bin := rt10crashBuild(t)
	la, aa := redistest.FreePort(t), redistest.FreePort(t)
	lb, ab := redistest.FreePort(t), redistest.FreePort(t)
	cfgA := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, la, aa, "200ms")
	cfgB := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, lb, ab, "200ms")
	if code, _, errs := cliRun("preheat", "-c", cfgA); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", la), fmt.Sprintf("127.0.0.1:%d", lb)
	var logsA, logsB rt10crashLog
	var procMu sync.Mutex
	procA := rt10crashServe(t, bin, cfgA, addrA, &logsA)
	rt10crashServe(t, bin, cfgB, addrB, &logsB)

	stop := make(chan struct{})
	faults := make(chan struct{})
	var restartErr atomic.Value
	redisPid := rt10crashPid(srv)
	if redisPid <= 0 {
		t.Fatal("redis-server pid not found")
	}
	go func() {
		defer close(faults)
		step := 0
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(150+rand.IntN(200)) * time.Millisecond):
			}
			switch step % 6 {
			case 0, 2, 4:
				procMu.Lock()
				p := procA
				procMu.Unlock()
				_ = p.Process.Signal(syscall.SIGKILL)
				_ = p.Wait()
				time.Sleep(100 * time.Millisecond)
				cmd := exec.Command(bin, "serve", "-c", cfgA)
				cmd.Env = os.Environ()
				cmd.Stderr, cmd.Stdout = &logsA, &logsA
				if err := cmd.Start(); err != nil {
					restartErr.Store(err)
					return
				}
				procMu.Lock()
				procA = cmd
				procMu.Unlock()
			case 1:
				_ = syscall.Kill(redisPid, syscall.SIGSTOP)
				time.Sleep(300 * time.Millisecond)
				_ = syscall.Kill(redisPid, syscall.SIGCONT)
			case 3:
				_, _ = srv.Do("DEBUG", "SLEEP", "0.3")
			case 5:
				_, _ = srv.Do("CLIENT", "PAUSE", "300", "WRITE")
			}
			step++
		}
	}()
	t.Cleanup(func() {
		procMu.Lock()
		p := procA
		procMu.Unlock()
		_ = p.Process.Kill()
		_ = p.Wait()
	})

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	var codes sync.Map
	sem := make(chan struct{}, 48)
	for i := 0; i < buyers; i++ {
		u := "u" + strconv.Itoa(i)
		tries := 1 + i%3
		for j := 0; j < tries; j++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i, j int) {
				defer wg.Done()
				defer func() { <-sem }()
				addr := addrA
				if (i+j)%2 == 1 {
					addr = addrB
				}
				qty := 1 + (i+j)%2
				req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/rtc/sku1/buy?qty="+strconv.Itoa(qty), strings.NewReader("{}"))
				req.Header.Set("X-User-Id", u)
				if i%4 == 0 {
					req.Header.Set("X-Request-Id", u+"-r"+strconv.Itoa(j%2))
				}
				code := "err"
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = strconv.Itoa(resp.StatusCode)
				}
				v, _ := codes.LoadOrStore(code, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}(i, j)
		}
		time.Sleep(3 * time.Millisecond)
	}
	wg.Wait()
	close(stop)
	<-faults
	if err := restartErr.Load(); err != nil {
		t.Fatalf("restart A: %v", err)
	}
	summary := map[string]int64{}
	codes.Range(func(k, v any) bool { summary[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers by status: %v", summary)
	// Let the shop finish what it took, and every reservation pass
	// pending_timeout (3 s) plus the proxies' confirms.
	deadline := time.Now().Add(10 * time.Second)
	for shop.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3500 * time.Millisecond)
	rt10crashCheck(t, bin, cfgB, shop, stock, limit)
	if t.Failed() {
		t.Logf("logs of A (tail):\n%s", rt10crashTail(logsA.String(), 30))
	}
}

// rt10crashLog collects a process's output; several processes may write.
type rt10crashLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *rt10crashLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *rt10crashLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func rt10crashTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// rt10crashPid finds the redis-server process listening on srv's port.
func rt10crashPid(srv *redistest.Server) int {
	out, err := srv.Do("INFO", "server")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// rt10crashSlowShop takes every buy after pause and makes its order then,
// whether or not the proxy is still there (a shop's transaction commits).
func rt10crashSlowShop(t *testing.T, pause time.Duration) *rt10crashShop {
	s := &rt10crashShop{orders: map[string]rt10crashOrder{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("X-Seckill-Token")
		if r.URL.Path == "/internal/orders" || r.URL.Path == "/internal/count" || tok == "" {
			s.serve(w, r)
			return
		}
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		time.Sleep(pause)
		qty, _ := strconv.ParseInt(r.Header.Get("X-Seckill-Qty"), 10, 64)
		s.mu.Lock()
		o, ok := s.orders[tok]
		if !ok {
			o = rt10crashOrder{User: r.Header.Get("X-Seckill-User"), Qty: qty, ID: "O-" + strconv.FormatInt(s.next.Add(1), 10)}
			s.orders[tok] = o
		} else {
			s.dupToken.Add(1)
		}
		s.mu.Unlock()
		fmt.Fprintf(w, `{"order_id":%q}`, o.ID)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// rt10crashBuyRetry is rt10crashBuy retried, as a client would, while the
// answer is 503 STORE_UNAVAILABLE (a loaded machine's Redis round trip
// past redis.timeout; nothing held).
func rt10crashBuyRetry(hc *http.Client, addr, user, rid string) (int, string, string) {
	for i := 0; ; i++ {
		st, tok, body := rt10crashBuy(hc, addr, user, rid)
		if st != http.StatusServiceUnavailable || !strings.Contains(body, "STORE_UNAVAILABLE") || i == 20 {
			return st, tok, body
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rt10crashBuy sends one buy and returns its status, X-Seckill-Token (or
// the body's token) and body.
func rt10crashBuy(hc *http.Client, addr, user, rid string) (int, string, string) {
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/rtc/sku1/buy?qty=1", strings.NewReader("{}"))
	req.Header.Set("X-User-Id", user)
	if rid != "" {
		req.Header.Set("X-Request-Id", rid)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	tok := resp.Header.Get("X-Seckill-Token")
	if tok == "" {
		var v struct {
			Token string `json:"token"`
		}
		_ = json.Unmarshal(b, &v)
		tok = v.Token
	}
	return resp.StatusCode, tok, string(b)
}

// TestRT10CrashKillWhileWinnersAtShop: 16 winners with X-Request-Id are at
// a slow shop (600 ms, inside upstream.timeout) when their instance A is
// SIGKILLed; the shop completes every order. Before the reconciler: the
// same requests repeated on B never reserve again (202 PENDING), and
// nobody else gets the held units (410). After pending_timeout
// and `reconcile --repair`: every shop order confirmed, repeats answered
// 409 ALREADY_PURCHASED, stock adds up.
func TestRT10CrashKillWhileWinnersAtShop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve processes")
	}
	const stock = 16
	srv := redistest.Start(t)
	shop := rt10crashSlowShop(t, 600*time.Millisecond)
	bin := rt10crashBuild(t)
	la, aa := redistest.FreePort(t), redistest.FreePort(t)
	lb, ab := redistest.FreePort(t), redistest.FreePort(t)
	cfgA := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, la, aa, "200ms")
	cfgB := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, lb, ab, "200ms")
	if code, _, errs := cliRun("preheat", "-c", cfgA); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", la), fmt.Sprintf("127.0.0.1:%d", lb)
	var logsA, logsB rt10crashLog
	procA := rt10crashServe(t, bin, cfgA, addrA, &logsA)
	rt10crashServe(t, bin, cfgB, addrB, &logsB)
	hc := &http.Client{Timeout: 5 * time.Second}

	var wg sync.WaitGroup
	for i := 0; i < stock; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rt10crashBuy(hc, addrA, "w"+strconv.Itoa(i), "rid-"+strconv.Itoa(i))
		}(i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for shop.inflight.Load() < stock && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := shop.inflight.Load(); n < stock {
		t.Fatalf("only %d winners at the shop", n)
	}
	_ = procA.Process.Kill()
	_ = procA.Wait()
	wg.Wait()
	for shop.inflight.Load() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(shop.snapshot()); n != stock {
		t.Fatalf("shop made %d orders, want %d", n, stock)
	}
	byUser := map[string]string{}
	for tok, o := range shop.snapshot() {
		byUser[o.User] = tok
	}
	// Before the reconciler: the held units stay held.
	for i := 0; i < stock; i++ {
		u := "w" + strconv.Itoa(i)
		st, tok, body := rt10crashBuyRetry(hc, addrB, u, "rid-"+strconv.Itoa(i))
		// A header identity is not a verified buyer: no token in the body
		// (README, Identity); one shown must be the reservation's.
		if st != http.StatusAccepted || !strings.Contains(body, `"PENDING"`) || (tok != "" && tok != byUser[u]) {
			t.Errorf("repeat of %s on B before reconcile: %d %s (token %q), want 202 PENDING with %q", u, st, body, tok, byUser[u])
		}
	}
	for i := 0; i < 4; i++ {
		if st, _, body := rt10crashBuyRetry(hc, addrB, "other"+strconv.Itoa(i), ""); st != http.StatusGone {
			t.Errorf("another buyer while the units are held: %d %s, want 410", st, body)
		}
	}
	time.Sleep(3100 * time.Millisecond) // pending_timeout 3s
	rt10crashCheck(t, bin, cfgB, shop, stock, 2)
	for i := 0; i < stock; i++ {
		u := "w" + strconv.Itoa(i)
		st, tok, body := rt10crashBuyRetry(hc, addrB, u, "rid-"+strconv.Itoa(i))
		if st != http.StatusConflict || !strings.Contains(body, `"ALREADY_PURCHASED"`) || (tok != "" && tok != byUser[u]) {
			t.Errorf("repeat of %s after reconcile: %d %s (token %q), want 409 ALREADY_PURCHASED with %q", u, st, body, tok, byUser[u])
		}
	}
}

// TestRT10CrashKillDuringSteals: every buyer is homed on shard 0 of 4, so
// once shard 0 is dry nearly every winner's unit is stolen from another
// shard and deposited (two calls). Instance A is SIGKILLed and restarted
// every 150–300 ms, and Redis SIGSTOPped for 250 ms twice, while 300
// buyers arrive. Then: `reconcile --repair` after pending_timeout; every
// move left in transit settled (store.SettleMoves, the reconciler's own
// step, with its 30 s age lowered to 0); then a sweep of fresh buyers on
// B. Expected: no unit lost or doubled — confirmed == stock == shop units,
// nothing pending or in transit, every shop order confirmed.
func TestRT10CrashKillDuringSteals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve processes")
	}
	const stock, buyers = 80, 200
	srv := redistest.Start(t)
	shop := rt10crashSlowShop(t, 50*time.Millisecond)
	bin := rt10crashBuild(t)
	la, aa := redistest.FreePort(t), redistest.FreePort(t)
	lb, ab := redistest.FreePort(t), redistest.FreePort(t)
	cfgA := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, la, aa, "200ms")
	cfgB := rt10crashConfig(t, srv.Addr, shop.srv.URL, stock, lb, ab, "200ms")
	if code, _, errs := cliRun("preheat", "-c", cfgA); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	addrA, addrB := fmt.Sprintf("127.0.0.1:%d", la), fmt.Sprintf("127.0.0.1:%d", lb)
	var logsA, logsB rt10crashLog
	var procMu sync.Mutex
	procA := rt10crashServe(t, bin, cfgA, addrA, &logsA)
	rt10crashServe(t, bin, cfgB, addrB, &logsB)
	t.Cleanup(func() {
		procMu.Lock()
		defer procMu.Unlock()
		_ = procA.Process.Kill()
		_ = procA.Wait()
	})
	redisPid := rt10crashPid(srv)
	var users []string
	for i := 0; len(users) < buyers; i++ {
		if u := "s" + strconv.Itoa(i); store.HomeShard(u, 4) == 0 {
			users = append(users, u)
		}
	}
	stop := make(chan struct{})
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(150+rand.IntN(150)) * time.Millisecond):
			}
			if step == 2 || step == 5 {
				_ = syscall.Kill(redisPid, syscall.SIGSTOP)
				time.Sleep(250 * time.Millisecond)
				_ = syscall.Kill(redisPid, syscall.SIGCONT)
				continue
			}
			procMu.Lock()
			_ = procA.Process.Kill()
			_ = procA.Wait()
			cmd := exec.Command(bin, "serve", "-c", cfgA)
			cmd.Env = os.Environ()
			cmd.Stderr, cmd.Stdout = &logsA, &logsA
			if err := cmd.Start(); err == nil {
				procA = cmd
			}
			procMu.Unlock()
		}
	}()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	var sum sync.Map
	for i, u := range users {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			addr := addrA
			if i%3 == 2 {
				addr = addrB
			}
			st, _, _ := rt10crashBuy(hc, addr, u, "")
			v, _ := sum.LoadOrStore(st, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}()
		time.Sleep(4 * time.Millisecond)
	}
	wg.Wait()
	close(stop)
	<-faults
	codes := map[int]int64{}
	sum.Range(func(k, v any) bool { codes[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers by status: %v", codes)
	for shop.inflight.Load() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3200 * time.Millisecond)
	rt10crashCheck(t, bin, cfgB, shop, stock, 2)

	cfg, err := config.Load(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := &cfg.Activities[0]
	before, _ := st.Status(ctx, a)
	n, err := st.SettleMoves(ctx, a, 0, time.Now().Add(time.Second))
	if err != nil {
		t.Fatalf("settle moves: %v", err)
	}
	after, _ := st.Status(ctx, a)
	t.Logf("moves in transit %d settled %d; status %+v", before.SKUs[0].InTransit, n, after.SKUs[0])
	// The sweep: fresh buyers (any home shard) take whatever is left.
	for i := 0; i < 400; i++ {
		s2, _ := st.Status(ctx, a)
		if s2.SKUs[0].Remaining == 0 {
			break
		}
		rt10crashBuy(hc, addrB, "sweep"+strconv.Itoa(i), "")
	}
	for shop.inflight.Load() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	final, _ := st.Status(ctx, a)
	k := final.SKUs[0]
	var shopUnits int64
	for _, o := range shop.snapshot() {
		shopUnits += o.Qty
	}
	t.Logf("after the sweep: %+v; shop units %d", k, shopUnits)
	if !k.OK || k.Confirmed != stock || k.Pending != 0 || k.InTransit != 0 || shopUnits != stock {
		t.Errorf("after the sweep: %+v, shop units %d; want all %d units confirmed and at the shop", k, shopUnits, stock)
	}
}
