package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestRR14SIGHUPStormPauseResumeAndSIGTERM: the real binary under a spike
// (600 buyers, two tries each, a third with X-Request-Id) while its file
// is rewritten and SIGHUP sent every 5 ms (limits, messages, admission
// rate, per_user_limit 1/2, upstream timeout, and a broken file every
// fifth time), the activity paused and resumed by the CLI meanwhile, then
// SIGTERM with SIGHUPs still coming. serve must exit 0 with no panic; every
// answer a SPEC code (or a refused connection once the listener closed);
// afterwards `status` exits 0 with nothing pending, the shop's orders are
// exactly the confirmed units and the tokens the buyers were told won, and
// no buyer holds more than 2.
func TestRR14SIGHUPStormPauseResumeAndSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve")
	}
	const stock = 200
	rs := redistest.Start(t)
	sh := newSlowShop(t, 100*time.Millisecond)
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	listen := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	adminAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	file := func(i int) string {
		limit, msg, timeout, rate := 1, "sold out", "3s", 1000000
		switch i % 5 {
		case 1:
			limit = 2
		case 2:
			msg, timeout = "卖完了", "4s"
		case 3:
			rate = 900000 + i
		}
		y := fmt.Sprintf(`listen: %q
admin: { listen: %q }
upstream: { url: %q, timeout: %s, signing_secret_env: %s }
server: { drain_delay: 300ms, shutdown_timeout: 9s }
redis: { addrs: [%q], timeout: 1s }
limits:
  per_ip: { rate: %d, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: %d, burst: 1000000 }
messages: { SOLD_OUT: %q }
activities:
  - id: hact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: %d }]
    per_user_limit: %d
    max_qty: 1
    admission_rate: { rate: %d, burst: 1000000 }
`, listen, adminAddr, sh.srv.URL, timeout, lifeSecretEnv, rs.Addr, rate, rate, msg,
			now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), stock, limit, rate)
		if i%5 == 4 {
			y += "    unknown_key: 1\n" // refused; the old config stays
		}
		return y
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "seckill.yaml")
	write := func(i int) {
		tmp := filepath.Join(dir, "tmp.yaml")
		if err := os.WriteFile(tmp, []byte(file(i)), 0o600); err != nil {
			t.Error(err)
		}
		_ = os.Rename(tmp, cfgPath)
	}
	write(0)
	// The operator's CLI reads a copy that stays valid (the served file is
	// broken now and then on purpose).
	opsPath := filepath.Join(dir, "ops.yaml")
	if err := os.WriteFile(opsPath, []byte(file(0)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cliRun("preheat", "-c", opsPath); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", "-c", cfgPath)
	cmd.Env = os.Environ()
	var logs bytes.Buffer
	var logMu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return logs.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Buyers come once /readyz says ready, as a balancer sends them: not
	// while serve's start-up warm-up runs. Sent the moment the listener
	// answered, CI once had the very first buyer answered 503
	// STORE_UNAVAILABLE: on a loaded host the Redis replies of buys taken
	// during the warm-up wait behind it for the CPU, past redis.timeout
	// (TestRR14ReadyzWaitsForStartupWarmup).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + adminAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up (ready)")
		}
	}

	var stopHUP atomic.Bool
	var hups atomic.Int64
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		for i := 1; !stopHUP.Load(); i++ {
			// The last files written are valid (i%5 != 4 when we stop matters not:
			// a broken one is refused).
			write(i)
			if cmd.Process.Signal(syscall.SIGHUP) != nil {
				return
			}
			hups.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()

	type ans struct {
		user, code, token string
		status            int
		err               error
		took              time.Duration // from sent to answered
	}
	var mu sync.Mutex
	var answers []ans
	var next atomic.Int64
	var wg sync.WaitGroup
	const users = 600
	hc := &http.Client{Timeout: 20 * time.Second}
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1) - 1
				if n >= 2*users {
					return
				}
				u := int(n % users)
				user := "h" + strconv.Itoa(u)
				req, _ := http.NewRequest("POST", "http://"+listen+"/api/seckill/hact/sku1/buy", strings.NewReader("{}"))
				req.Header.Set("X-User-Id", user)
				if u%3 == 0 {
					req.Header.Set("X-Request-Id", "r-"+user)
				}
				a := ans{user: user}
				t0 := time.Now()
				resp, err := hc.Do(req)
				a.took = time.Since(t0)
				if err != nil {
					a.err = err
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status, a.token = resp.StatusCode, resp.Header.Get("X-Seckill-Token")
					if a.token != "" && resp.StatusCode == 200 {
						a.code = "WIN"
					} else {
						var body struct{ Code string }
						_ = json.Unmarshal(b, &body)
						a.code = body.Code
					}
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)
	if code, _, errs := cliRun("pause", "-c", opsPath, "hact"); code != 0 {
		t.Errorf("pause: %s", errs)
	}
	time.Sleep(300 * time.Millisecond)
	if code, _, errs := cliRun("resume", "-c", opsPath, "hact"); code != 0 {
		t.Errorf("resume: %s", errs)
	}
	time.Sleep(400 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(20 * time.Second):
		// Not Fatal: the buyers and the SIGHUP loop still run and report.
		t.Error("serve did not exit within 20 s of SIGTERM (a SIGTERM lost behind a pending SIGHUP?)")
		_ = cmd.Process.Kill()
		exitErr = <-exited
	}
	stopHUP.Store(true)
	<-hupDone
	wg.Wait()
	if t.Failed() {
		return
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if exitErr != nil {
		t.Errorf("SIGTERM, then SIGHUPs while serve stops: serve exited with %q, want exit 0 (README: the retry queue is drained, exit 0)", exitErr)
	}
	if strings.Contains(out, "panic") || strings.Contains(out, "DATA RACE") {
		t.Errorf("serve logged a panic or race:\n%s", out[max(0, len(out)-4000):])
	}
	t.Logf("SIGHUPs sent %d; reloads logged %d, refused %d", hups.Load(), strings.Count(out, "config reloaded"), strings.Count(out, "reload refused"))

	ok := map[string]bool{"WIN": true, "SOLD_OUT": true, "ALREADY_PURCHASED": true, "PENDING": true, "PAUSED": true, "BUSY": true, "RATE_LIMITED": true}
	byCode := map[string]int{}
	unexpected := false
	wins := map[string]map[string]bool{}
	for _, a := range answers {
		switch {
		case a.err != nil:
			byCode["conn-error"]++
			continue
		case a.code == "" && a.token != "" && a.status == 200:
			a.code = "WIN"
		case !ok[a.code]:
			// How long it took tells a Redis timeout (≥ redis.timeout, 1s)
			// from a fast failure.
			t.Errorf("%s: %d %q outside SPEC (answered after %v)", a.user, a.status, a.code, a.took.Round(time.Millisecond))
			unexpected = true
		}
		byCode[a.code]++
		if a.code == "WIN" {
			if wins[a.user] == nil {
				wins[a.user] = map[string]bool{}
			}
			wins[a.user][a.token] = true
		}
	}
	t.Logf("answers: %v", byCode)
	if unexpected { // what serve said about it
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
				t.Log(l)
			}
		}
	}
	won := map[string]bool{}
	for u, toks := range wins {
		if len(toks) > 2 {
			t.Errorf("user %s holds %d units (per_user_limit at most 2)", u, len(toks))
		}
		for tok := range toks {
			won[tok] = true
		}
	}
	code, stdout, errs := cliRun("status", "-c", opsPath, "--json")
	if code != 0 {
		t.Errorf("status exit %d: %s %s", code, stdout, errs)
	}
	var st struct {
		Activities []struct {
			SKUs []struct {
				Initial, Remaining, Pending, Confirmed int64
				OK                                     bool
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || len(st.Activities) != 1 {
		t.Fatalf("status: %v %s", err, stdout)
	}
	k := st.Activities[0].SKUs[0]
	sh.mu.Lock()
	orders := len(sh.orders)
	for tok := range sh.orders {
		if !won[tok] {
			t.Errorf("the shop holds order %s that no buyer was told won", tok)
		}
	}
	sh.mu.Unlock()
	t.Logf("status %+v, shop orders %d, tokens won %d", k, orders, len(won))
	if !k.OK || k.Pending != 0 || k.Initial != k.Remaining+k.Pending+k.Confirmed || int64(orders) != k.Confirmed || len(won) != orders {
		t.Errorf("after the stop: status %+v, shop orders %d, winning tokens %d; want nothing pending and orders == confirmed == winners", k, orders, len(won))
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRR14SIGTERMNotLostInSIGHUPStorm: SIGHUPs sent back to back (a
// config tool in a loop) must not swallow the SIGTERM that comes among
// them. With one signal channel of one slot, a SIGTERM arriving while a
// SIGHUP waited there (the loop busy reloading) was dropped by the
// runtime, and serve never stopped.
func TestRR14SIGTERMNotLostInSIGHUPStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve")
	}
	rs := redistest.Start(t)
	sh := newSlowShop(t, 0)
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	listen := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	adminAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	cfgPath := filepath.Join(t.TempDir(), "seckill.yaml")
	y := fmt.Sprintf(`listen: %q
admin: { listen: %q }
upstream: { url: %q, timeout: 3s, signing_secret_env: %s }
server: { drain_delay: 100ms, shutdown_timeout: 5s }
redis: { addrs: [%q], timeout: 1s }
activities:
  - id: sact
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 10 }]
`, listen, adminAddr, sh.srv.URL, lifeSecretEnv, rs.Addr,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	// A long file (an operator's commented blocklist, say) makes each
	// reload take milliseconds, so the loop is busy reloading whenever
	// the SIGTERM comes, with the next SIGHUP waiting.
	y += strings.Repeat("# a comment line, as long files have them, to make the reload take its time\n", 12000)
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	for round := 0; round < 2; round++ {
		cmd := exec.Command(bin, "serve", "-c", cfgPath)
		cmd.Env = os.Environ()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if resp, err := http.Get("http://" + listen + "/_seckill/time"); err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatalf("serve did not come up")
			}
		}
		var stop atomic.Bool
		stormDone := make(chan struct{})
		go func() {
			defer close(stormDone)
			for !stop.Load() {
				if cmd.Process.Signal(syscall.SIGHUP) != nil {
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("round %d: serve exited with %v, want 0", round, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("round %d: serve did not stop within 15 s of a SIGTERM sent among SIGHUPs", round)
			_ = cmd.Process.Kill()
			<-exited
		}
		stop.Store(true)
		<-stormDone
		if t.Failed() {
			return
		}
	}
}
