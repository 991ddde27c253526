package e2e_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// fakeClock is admission's server clock in these tests: the window, the
// fair_start holds and their releases follow it, so a test places buys at
// exact moments of the window however slow the machine is.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time                   { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)                  { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) at(t0 time.Time, d time.Duration) { c.set(t0.Add(d)) }

// fairFixture is one proxy on a fake clock in front of a real Redis.
type fairFixture struct {
	shop  *e2e.Shop
	p     *e2e.Proxy
	clock *fakeClock
	c     *fasthttp.Client
}

// fairT0 is the first activity's start: an hour ahead of the real clock,
// so key TTLs (Redis's own clock) are never an issue.
var fairT0 = time.Now().Add(time.Hour).Truncate(time.Second)

func startFair(t *testing.T, o e2e.Options) *fairFixture {
	t.Helper()
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	o.Redis, o.ShopURL = r.Addrs, shop.URL
	// 500 buys arrive at once on an activity nothing has read yet: on a
	// shared 2-core machine their first flag reads may queue past the
	// default 200 ms (STORE_UNAVAILABLE, seen once); not what is tested.
	o.RedisTimeout = 2 * time.Second
	for i := range o.Activities {
		if o.Activities[i].End.IsZero() {
			o.Activities[i].End = o.Activities[i].Start.Add(time.Hour)
		}
	}
	cfg := o.Config(t)
	clock := &fakeClock{}
	clock.set(fairT0.Add(-time.Minute))
	p := e2e.StartProxyClock(t, cfg, clock.now)
	for _, a := range o.Activities {
		p.Preheat(t, a.ID)
	}
	return &fairFixture{shop: shop, p: p, clock: clock, c: &fasthttp.Client{MaxConnsPerHost: 4096}}
}

func (f *fairFixture) buy(act, user string) e2e.Resp {
	return e2e.Do(f.c, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", user}}, Timeout: 60 * time.Second})
}

func (f *fairFixture) held() int { return int(f.p.Gauge(f.p.Metrics.FairHeld)) }

// fire sends one buy per user at once and returns at once; each answer is
// handed to got.
func (f *fairFixture) fire(wg *sync.WaitGroup, act string, users []string, got func(user string, r e2e.Resp)) {
	for _, u := range users {
		wg.Add(1)
		go func() { defer wg.Done(); got(u, f.buy(act, u)) }()
	}
}

func users(prefix string, n int) []string {
	us := make([]string, n)
	for i := range us {
		us[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return us
}

// race runs the measurement on activity act (start t0, 100 units):
// 500 "fast" buyers send at start+5ms (the first 10 ms of the window), 500
// "slow" ones at start+305ms. With fair_start the buys are held: the test
// waits until the pen holds each group, then walks the clock over the
// release spread in 5 ms steps and lets every buy released in a step be
// answered before the next (so the order Redis sees is the drawn order,
// not the order this machine's scheduler happens to pick). Without
// fair_start each group is answered as it arrives. It returns the wins of
// each group.
func (f *fairFixture) race(t *testing.T, act string, t0 time.Time, fair bool, spreadEnd time.Duration) (fast, slow int) {
	t.Helper()
	var mu sync.Mutex
	var answered int
	wins := map[string]int{}
	got := func(group string) func(string, e2e.Resp) {
		return func(u string, r e2e.Resp) {
			mu.Lock()
			defer mu.Unlock()
			answered++
			switch r.Code {
			case "WIN":
				wins[group]++
			case "SOLD_OUT":
			default:
				t.Errorf("%s: %d %s (err %v) at clock %s, held %d", u, r.Status, r.Body, r.Err, f.clock.now().Sub(t0), f.held())
			}
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return answered }
	var wg sync.WaitGroup
	f.clock.at(t0, 5*time.Millisecond)
	f.fire(&wg, act, users(act+"-fast", 500), got("fast"))
	if fair {
		e2e.Eventually(t, 30*time.Second, "fast group held", func() bool { return f.held() == 500 })
	} else {
		e2e.Eventually(t, 30*time.Second, "fast group answered", func() bool { return count() == 500 })
	}
	f.clock.at(t0, 305*time.Millisecond)
	f.fire(&wg, act, users(act+"-slow", 500), got("slow"))
	if fair {
		e2e.Eventually(t, 30*time.Second, "both groups held", func() bool { return f.held() == 1000 })
		if count() != 0 {
			t.Fatalf("%d buys answered inside the window, want 0 (all held)", count())
		}
		for d := 500 * time.Millisecond; d <= spreadEnd; d += 5 * time.Millisecond {
			f.clock.at(t0, d)
			e2e.Eventually(t, 30*time.Second, "released buys answered", func() bool { return count() == 1000-f.held() })
		}
	}
	wg.Wait()
	if f.held() != 0 {
		t.Fatalf("%d buys still held after the spread", f.held())
	}
	if wins["fast"]+wins["slow"] != 100 {
		t.Fatalf("%d winners, want 100 (%v)", wins["fast"]+wins["slow"], wins)
	}
	return wins["fast"], wins["slow"]
}

// Issue 13 §1, as measured: two groups of 500 buyers for 100 units, fast
// in the first 10 ms of a 500 ms fair_start window, slow 300 ms later.
//
// With a fair random order a group's wins are hypergeometric (1000 buys,
// 500 of the group, 100 drawn): mean 50, sd ≈ 4.7, so one run falls
// outside 40–60 about 3% of the time even when fair. The test therefore
// runs five independent races (fresh activities, the production random
// draws, nothing seeded) and asserts the 40–60 on the mean of the
// five (sd ≈ 2.1: outside only if biased), and 25–75 on every single race
// (> 5 sd: a gross bias, e.g. arrival order leaking through, fails it
// every time; fast winning all 100, as without fair start, is 0).
func TestFairStartGroupsWinAlike(t *testing.T) {
	const trials = 5
	var acts []e2e.Activity
	for i := range trials + 1 {
		a := e2e.Activity{ID: fmt.Sprintf("fair%d", i), Stock: 100, Start: fairT0.Add(time.Duration(i) * 10 * time.Second),
			FairStart: 500 * time.Millisecond, FairStartSpread: 500 * time.Millisecond}
		if i == trials {
			a.ID, a.FairStart, a.FairStartSpread = "plain", 0, 0
		}
		acts = append(acts, a)
	}
	f := startFair(t, e2e.Options{Activities: acts})

	var sumFast, sumSlow int
	for i := range trials {
		a := acts[i]
		fast, slow := f.race(t, a.ID, a.Start, true, time.Second)
		t.Logf("fair_start 500ms, race %d: fast %d, slow %d", i+1, fast, slow)
		if fast < 25 || fast > 75 {
			t.Errorf("race %d: fast won %d of 100, slow %d: not a fair order", i+1, fast, slow)
		}
		sumFast += fast
		sumSlow += slow
		f.p.WantStock(t, a.ID, 0, 0, 100)
	}
	meanFast, meanSlow := float64(sumFast)/trials, float64(sumSlow)/trials
	t.Logf("fair_start 500ms, mean of %d races: fast %.1f, slow %.1f", trials, meanFast, meanSlow)
	if meanFast < 40 || meanFast > 60 || meanSlow < 40 || meanSlow > 60 {
		t.Errorf("mean wins fast %.1f slow %.1f, want each 40–60", meanFast, meanSlow)
	}
	if got := f.p.Counter(f.p.Metrics.FairReleases, "released"); got != trials*1000 {
		t.Errorf("released counter %v, want %d", got, trials*1000)
	}

	// Without fair_start: first come, first served; fast takes everything.
	plain := acts[trials]
	fast, slow := f.race(t, plain.ID, plain.Start, false, 0)
	t.Logf("no fair_start: fast %d, slow %d", fast, slow)
	if fast != 100 || slow != 0 {
		t.Errorf("without fair_start fast won %d, slow %d; want 100 and 0", fast, slow)
	}
	f.p.WantStock(t, plain.ID, 0, 0, 100)
	if n := len(f.shop.Orders()); n != (trials+1)*100 {
		t.Errorf("shop holds %d orders, want %d", n, (trials+1)*100)
	}
}

// Beyond server.fair_start_max_held a buy is answered 503 BUSY at once
// (while the others are still held); the held ones win after the window.
func TestFairStartMaxHeldBusy(t *testing.T) {
	f := startFair(t, e2e.Options{Server: "{ fair_start_max_held: 5 }", Activities: []e2e.Activity{
		{ID: "pen", Stock: 10, Start: fairT0, FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond}}})
	f.clock.at(fairT0, 10*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	f.fire(&wg, "pen", users("held", 5), func(_ string, r e2e.Resp) { mu.Lock(); codes[r.Code]++; mu.Unlock() })
	e2e.Eventually(t, 10*time.Second, "5 held", func() bool { return f.held() == 5 })
	r := f.buy("pen", "one-more")
	if r.Status != http.StatusServiceUnavailable || r.Code != "BUSY" {
		t.Fatalf("6th buy in the window: %d %s, want 503 BUSY", r.Status, r.Body)
	}
	if f.held() != 5 {
		t.Fatalf("held %d after the refusal, want 5", f.held())
	}
	f.clock.at(fairT0, 700*time.Millisecond)
	wg.Wait()
	if codes["WIN"] != 5 {
		t.Errorf("held buys answered %v, want 5 WIN", codes)
	}
	if got := f.p.Counter(f.p.Metrics.Rejections, "fair_start", "BUSY"); got != 1 {
		t.Errorf("rejections{fair_start,BUSY} = %v, want 1", got)
	}
	f.p.WantStock(t, "pen", 5, 0, 5)
	// After the window: decided at once, as without fair_start.
	wantWin(t, f.buy("pen", "late"))
}

// A buyer who disconnects while held reserves nothing; one who stays wins.
// max_conns_per_ip makes fasthttp wrap each connection (perIPConn): the
// socket check must see through it.
func TestFairStartDisconnectReservesNothing(t *testing.T) {
	f := startFair(t, e2e.Options{Server: "{ max_conns_per_ip: 1000 }", Activities: []e2e.Activity{
		{ID: "gone", Stock: 10, Start: fairT0, FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond}}})
	f.clock.at(fairT0, 10*time.Millisecond)
	raw := func(user string) net.Conn {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /api/seckill/gone/%s/buy HTTP/1.1\r\nHost: x\r\nX-User-Id: %s\r\nContent-Length: 0\r\n\r\n", e2e.SKU, user)
		return c
	}
	leaver := raw("leaver")
	stayer := raw("stayer")
	defer stayer.Close()
	e2e.Eventually(t, 10*time.Second, "2 held", func() bool { return f.held() == 2 })
	_ = leaver.Close()
	f.clock.at(fairT0, 700*time.Millisecond)
	_ = stayer.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(stayer), nil)
	if err != nil {
		t.Fatalf("stayer: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Seckill-Token") == "" {
		t.Fatalf("stayer: %d, want the shop's 200 with a token", resp.StatusCode)
	}
	e2e.Eventually(t, 10*time.Second, "both released", func() bool {
		return f.p.Counter(f.p.Metrics.FairReleases, "gone")+f.p.Counter(f.p.Metrics.FairReleases, "released") == 2
	})
	if g := f.p.Counter(f.p.Metrics.FairReleases, "gone"); g != 1 {
		t.Errorf("releases{gone} = %v, want 1", g)
	}
	f.p.WantStock(t, "gone", 9, 0, 1)
	if f.shop.SeenBuy("leaver") {
		t.Errorf("the shop saw the leaver's buy")
	}
	if !f.shop.SeenBuy("stayer") {
		t.Errorf("the shop never saw the stayer's buy")
	}
}

// Refusals that need no stock are answered inside the window, while a
// held buy still waits: the clock never moves during them.
func TestFairStartRefusalsAnsweredAtOnce(t *testing.T) {
	f := startFair(t, e2e.Options{
		Limits: "{ per_ip: { rate: 1000000, burst: 1000000 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 0.001, burst: 1 } }",
		Activities: []e2e.Activity{
			{ID: "now", Stock: 10, Start: fairT0, FairStart: 500 * time.Millisecond},
			{ID: "later", Stock: 10, Start: fairT0.Add(time.Hour), FairStart: 500 * time.Millisecond},
		}})
	f.clock.at(fairT0, 10*time.Millisecond)
	var wg sync.WaitGroup
	var first e2e.Resp
	f.fire(&wg, "now", []string{"alice"}, func(_ string, r e2e.Resp) { first = r })
	e2e.Eventually(t, 10*time.Second, "alice held", func() bool { return f.held() == 1 })
	for _, c := range []struct {
		name string
		req  e2e.Req
		want string
	}{
		{"no user", e2e.Req{URI: "/api/seckill/now/" + e2e.SKU + "/buy"}, "BAD_REQUEST"},
		{"unknown sku", e2e.Req{URI: "/api/seckill/now/nope/buy", Header: [][2]string{{"X-User-Id", "bob"}}}, "UNKNOWN_ITEM"},
		{"rate limited", e2e.Req{URI: "/api/seckill/now/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "alice"}}}, "RATE_LIMITED"},
		{"not started", e2e.Req{URI: "/api/seckill/later/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "carol"}}}, "NOT_STARTED"},
	} {
		c.req.Timeout = 10 * time.Second
		if r := e2e.Do(f.c, f.p.Addr, c.req); r.Code != c.want {
			t.Errorf("%s in the window: %d %s (err %v), want %s", c.name, r.Status, r.Body, r.Err, c.want)
		}
		if f.held() != 1 {
			t.Fatalf("%s: held %d, want only alice's buy", c.name, f.held())
		}
	}
	f.clock.at(fairT0, 2*time.Second)
	wg.Wait()
	wantWin(t, first)
	f.p.WantStock(t, "now", 9, 0, 1)
}

// The same measurement on the real clock, for BENCHMARKS.md: the real
// sleeper and timers, buyers sent at the real moments (fast at start+1ms,
// slow at start+300ms), nothing stepped. Opt-in (SECKILL_FAIR_REAL=1): it
// waits through real windows and its arrival times depend on the machine.
func TestFairStartRealClock(t *testing.T) {
	if os.Getenv("SECKILL_FAIR_REAL") == "" {
		t.Skip("set SECKILL_FAIR_REAL=1 to run (BENCHMARKS.md, fair start)")
	}
	const races = 10
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	t0 := time.Now().Add(2 * time.Second).Truncate(100 * time.Millisecond)
	var acts []e2e.Activity
	for i := range races + 1 {
		a := e2e.Activity{ID: fmt.Sprintf("real%d", i), Stock: 100, Start: t0.Add(time.Duration(i) * 2 * time.Second),
			FairStart: 500 * time.Millisecond, FairStartSpread: 500 * time.Millisecond}
		if i == races {
			a.ID, a.FairStart, a.FairStartSpread = "realplain", 0, 0
		}
		a.End = a.Start.Add(time.Hour)
		acts = append(acts, a)
	}
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second, Activities: acts}.Config(t)
	p := e2e.StartProxy(t, cfg)
	c := &fasthttp.Client{MaxConnsPerHost: 4096}
	for _, a := range acts {
		p.Preheat(t, a.ID)
	}
	var sum int
	for i, a := range acts {
		var mu sync.Mutex
		wins := map[string]int{}
		var late atomic.Int64 // buys that reached the proxy after the window
		var wg sync.WaitGroup
		send := func(group string, at time.Time) {
			for j := range 500 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Until(at))
					res := e2e.Do(c, p.Addr, e2e.Req{URI: "/api/seckill/" + a.ID + "/" + e2e.SKU + "/buy",
						Header: [][2]string{{"X-User-Id", fmt.Sprintf("%s-%s-%d", a.ID, group, j)}}, Timeout: 30 * time.Second})
					mu.Lock()
					defer mu.Unlock()
					switch res.Code {
					case "WIN":
						wins[group]++
					case "SOLD_OUT":
					default:
						t.Errorf("%s: %d %s (err %v)", group, res.Status, res.Body, res.Err)
					}
				}()
			}
		}
		send("fast", a.Start.Add(time.Millisecond))
		send("slow", a.Start.Add(300*time.Millisecond))
		if a.FairStart > 0 {
			time.Sleep(time.Until(a.Start.Add(a.FairStart - 20*time.Millisecond)))
			late.Store(1000 - int64(p.Gauge(p.Metrics.FairHeld)))
		}
		wg.Wait()
		t.Logf("%s (fair_start %s): fast %d, slow %d; not held at window end: %d", a.ID, a.FairStart, wins["fast"], wins["slow"], late.Load())
		if i < races {
			sum += wins["fast"]
		}
	}
	t.Logf("fair_start 500ms, mean of %d races: fast %.1f", races, float64(sum)/races)
}
