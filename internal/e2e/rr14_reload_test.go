package e2e_test

// Red team round 14: configuration reloads under fire. Many reloads while
// thousands of buys are in flight; reloads interleaved with the
// reconciler; reloads that should keep what they do not change.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// rr14Variant is one reloadable shape of the rr14 config: every field is
// one a reload may change during a running sale.
type rr14Variant struct {
	PerIP, PerUser    string // limits as YAML flow
	Message           string // messages.SOLD_OUT
	Admission         string // admission_rate of the running sale
	PerUserLimit      int    // of the running sale
	UpstreamTimeout   string
	PendingTimeout    string // of the running sale ("" default)
	MaxInflight       int    // 0: no bound
	Extra             bool   // a second activity, never preheated, with fair_start before its start
	ExtraFairStart    string
	ExtraStartIn      time.Duration
	Shadow            bool // a third activity in mode: shadow (never preheated)
	ShadowHeaders     bool
	Stock             int64 // of the running sale's SKU in the file (preheated stock stays)
	Invalid           bool  // a broken file (refused)
	RunningStartShift time.Duration
}

type rr14Env struct {
	listen, admin, redis, shop string
	start, end                 time.Time
	act                        string
	shards                     int
}

func (e rr14Env) yaml(v rr14Variant) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	w("listen: %q", e.listen)
	w("admin: { listen: %q }", e.admin)
	w("upstream:")
	w("  url: %q", e.shop)
	w("  timeout: %s", v.UpstreamTimeout)
	w("  signing_secret_env: %s", e2e.SecretEnv)
	if v.MaxInflight > 0 {
		w("  max_inflight: %d", v.MaxInflight)
		w("  overflow: wait")
		w("  overflow_wait: 2s")
	}
	w("redis:")
	w("  addrs: [%q]", e.redis)
	w("  timeout: %s", redistest.TimeoutScale*time.Second)
	w("identity: { user: { header: X-User-Id } }")
	w("limits:")
	w("  per_ip: %s", v.PerIP)
	w("  per_device: { rate: 1000000, burst: 1000000 }")
	w("  per_user: %s", v.PerUser)
	w("messages: { SOLD_OUT: %q }", v.Message)
	w("activities:")
	w("  - id: %s", e.act)
	w("    start: %s", e.start.Add(v.RunningStartShift).Format(time.RFC3339Nano))
	w("    end: %s", e.end.Format(time.RFC3339Nano))
	stock := v.Stock
	w("    skus: [{ id: %q, stock: %d }]", e2e.SKU, stock)
	w("    per_user_limit: %d", v.PerUserLimit)
	w("    max_qty: 1")
	w("    shards: %d", e.shards)
	w("    admission_rate: %s", v.Admission)
	if v.PendingTimeout != "" {
		w("    pending_timeout: %s", v.PendingTimeout)
	}
	w("    verify: { url: %q }", e.shop+"/internal/orders?token={token}")
	if v.Extra {
		w("  - id: rr14new")
		w("    route: { path: \"/flash/{activity}/{sku}\" }")
		w("    start: %s", time.Now().Add(v.ExtraStartIn).Format(time.RFC3339Nano))
		w("    end: %s", e.end.Format(time.RFC3339Nano))
		w("    skus: [{ id: x, stock: 10 }]")
		w("    fair_start: %s", v.ExtraFairStart)
	}
	if v.Shadow {
		w("  - id: rr14shadow")
		w("    route: { path: \"/shadow/{activity}/{sku}\" }")
		w("    mode: shadow")
		if v.ShadowHeaders {
			w("    shadow_headers: true")
		}
		w("    start: %s", e.start.Format(time.RFC3339Nano))
		w("    end: %s", e.end.Format(time.RFC3339Nano))
		w("    skus: [{ id: s, stock: 5 }]")
	}
	if v.Invalid {
		w("    bogus_key: [")
	}
	return b.String()
}

func rr14Parse(t testing.TB, y string) (*config.Config, error) {
	t.Helper()
	_ = os.Setenv(e2e.SecretEnv, e2e.Secret)
	return config.Parse("rr14.yaml", []byte(y))
}

// rr14Reload is serve's reload: the proxy first (refusals), then admission.
func rr14Reload(p *e2e.Proxy, next *config.Config) error {
	if err := p.Server.Apply(next); err != nil {
		return err
	}
	p.Pipeline.Apply(next)
	return nil
}

func rr14Env0(t testing.TB, r *e2e.Redis, shop *e2e.Shop) rr14Env {
	return rr14Env{
		listen: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		admin:  "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		redis:  r.Addrs[0], shop: shop.URL,
		start: time.Now().Add(-time.Minute), end: time.Now().Add(time.Hour),
		act: "rr14", shards: 4,
	}
}

func rr14Base() rr14Variant {
	return rr14Variant{
		PerIP: "{ rate: 1000000, burst: 1000000 }", PerUser: "{ rate: 1000000, burst: 1000000 }",
		Message: "sold out", Admission: "{ rate: 1000000, burst: 1000000 }", PerUserLimit: 1,
		UpstreamTimeout: "3s", Stock: 1000,
	}
}

// specCodes are the codes SPEC lets a buy of the running sale end in.
var rr14Codes = map[string]bool{"WIN": true, "SOLD_OUT": true, "ALREADY_PURCHASED": true, "PENDING": true,
	"RATE_LIMITED": true, "BUSY": true}

// TestRR14SpikeUnderReloadChurn: 2,500 distinct buyers paced over 2.5 s (two tries each, a
// third of them with X-Request-Id, repeated with the same id) against 1,000
// units while the config is reloaded every 3 ms, cycling through the
// changes a reload may make during a sale (limits, messages, admission
// rate, per_user_limit 1→2, upstream timeout, max_inflight on/off, a new
// activity with fair_start before its start, a shadow activity's fields,
// the file's stock raised without a preheat) and a broken file now and
// then. Afterwards: exactly 1,000 units won, no buyer above 2, only SPEC codes,
// Redis's counters add up, the shop's orders equal confirmed, every order
// signed with a token the proxy handed out.
func TestRR14SpikeUnderReloadChurn(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	env := rr14Env0(t, r, shop)
	base := rr14Base()
	cfg, err := rr14Parse(t, env.yaml(base))
	if err != nil {
		t.Fatal(err)
	}
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, env.act)

	variants := []rr14Variant{}
	for i := 0; i < 12; i++ {
		v := base
		switch i {
		case 1:
			v.PerIP, v.PerUser = "{ rate: 900000, burst: 900000 }", "{ rate: 800000, burst: 800000 }"
		case 2:
			v.Message = "卖完了"
		case 3:
			v.Admission = "{ rate: 500000, burst: 600000 }"
		case 4:
			v.PerUserLimit = 2
		case 5:
			v.UpstreamTimeout = "4s"
		case 6:
			v.MaxInflight = 40
		case 7:
			v.Extra, v.ExtraFairStart, v.ExtraStartIn = true, "500ms", 20*time.Minute
		case 8:
			v.Extra, v.ExtraFairStart, v.ExtraStartIn = true, "1s", 30*time.Minute
		case 9:
			v.Shadow, v.ShadowHeaders = true, i%2 == 1
		case 10:
			v.Stock = 2000 // raised in the file; the preheated 1000 stay (a running sale is never re-preheated)
		case 11:
			v.Invalid = true
		}
		variants = append(variants, v)
	}
	cfgs := make([]*config.Config, len(variants))
	for i, v := range variants {
		c, err := rr14Parse(t, env.yaml(v))
		if v.Invalid {
			if err == nil {
				t.Fatalf("variant %d should be invalid", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		cfgs[i] = c
	}

	stop := make(chan struct{})
	var reloads, refused, invalid atomic.Int64
	var refusals sync.Map
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				_ = rr14Reload(p, cfgs[0])
				return
			case <-time.After(3 * time.Millisecond):
			}
			c := cfgs[i%len(cfgs)]
			if c == nil {
				invalid.Add(1) // serve logs and keeps the old config
				continue
			}
			if err := rr14Reload(p, c); err != nil {
				refused.Add(1)
				refusals.Store(err.Error(), true)
				continue
			}
			reloads.Add(1)
		}
	}()

	const users, stock = 2500, 1000
	client := &fasthttp.Client{MaxConnsPerHost: 256, ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second}
	type job struct{ user, try int }
	jobs := make(chan job)
	var mu sync.Mutex
	byCode := map[string]int{}
	wins := map[string][]string{}
	var odd []string
	var wg sync.WaitGroup
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				user := "u" + strconv.Itoa(j.user)
				h := [][2]string{{"X-User-Id", user}}
				if j.user%3 == 0 {
					h = append(h, [2]string{"X-Request-Id", "rid-" + user})
				}
				resp := e2e.Do(client, p.Addr, e2e.Req{URI: "/api/seckill/" + env.act + "/" + e2e.SKU + "/buy", Header: h, Timeout: 15 * time.Second})
				mu.Lock()
				switch {
				case resp.Err != nil:
					odd = append(odd, fmt.Sprintf("%s: %v", user, resp.Err))
				case resp.Code == "WIN":
					byCode["WIN"]++
					wins[user] = append(wins[user], resp.Token())
				case resp.Status == 200 && resp.Header["X-Seckill-Token"] != "" && j.user%3 == 0:
					// A replay of a won request id: the shop's answer and token again.
					byCode["REPLAY"]++
					wins[user] = append(wins[user], resp.Token())
				case rr14Codes[resp.Code]:
					byCode[resp.Code]++
				default:
					odd = append(odd, fmt.Sprintf("%s: %d %s", user, resp.Status, resp.Body))
				}
				mu.Unlock()
			}
		}()
	}
	// Paced over ~2.5 s so the reloads land among the winners.
	tick := time.NewTicker(time.Millisecond)
	// Each buyer's repeat 100 buyers later, while stock is left.
	for n := 0; n < users+100; n++ {
		if n%2 == 0 {
			<-tick.C
		}
		if n < users {
			jobs <- job{n, 0}
		}
		if n >= 100 {
			jobs <- job{n - 100, 1}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	close(stop)
	<-reloaded
	t.Logf("reloads applied %d, refused %d, invalid files %d; answers %v", reloads.Load(), refused.Load(), invalid.Load(), byCode)
	refusals.Range(func(k, _ any) bool { t.Errorf("a reload of an allowed change was refused: %s", k); return true })

	if len(odd) > 0 {
		t.Errorf("%d answers outside SPEC, first: %v", len(odd), odd[:min(5, len(odd))])
	}
	distinct := map[string]string{}
	for u, toks := range wins {
		for _, tok := range toks {
			if o, dup := distinct[tok]; dup && o != u {
				t.Errorf("token %s won by %s and %s", tok, o, u)
			}
			distinct[tok] = u
		}
	}
	// A replay of a winner's request id carries the same token: distinct
	// tokens are the units won. A buyer's tokens under per_user_limit 2.
	for u, toks := range wins {
		d := map[string]bool{}
		for _, tok := range toks {
			d[tok] = true
		}
		if len(d) > 2 {
			t.Errorf("user %s holds %d units", u, len(d))
		}
	}
	if len(distinct) != stock {
		t.Errorf("%d distinct winning tokens, want exactly %d (answers %v)", len(distinct), stock, byCode)
	}
	orders := shop.Orders()
	for tok, o := range orders {
		if !o.SigOK {
			t.Errorf("order %s: bad signature: %v", tok, o.SigErr)
		}
		if _, ok := distinct[tok]; !ok {
			t.Errorf("order %s of %s: no buyer was told this token won", tok, o.User)
		}
	}
	if len(orders) != stock || len(shop.Buys()) != stock {
		t.Errorf("shop: %d orders from %d buy requests, want %d", len(orders), len(shop.Buys()), stock)
	}
	p.WantStock(t, env.act, 0, 0, stock)
	// Nothing of the buy route passed unadmitted.
	for _, rq := range shop.Requests() {
		if strings.Contains(rq.Path, "/buy") && rq.Header.Get("X-Seckill-Token") == "" {
			t.Errorf("a buy reached the shop without a token: %s %s", rq.Method, rq.URI)
		}
	}
}

// TestRR14ReloadKeepsRateLimitBuckets: a reload that changes one limit
// (here per_ip, raised for a campus NAT) must not hand every buyer a fresh
// per_user bucket. Admission replaces all three limiters whenever
// cfg.Limits differs (admission/state.go Apply → newLimiters), so a
// buyer at RATE_LIMITED gets `burst` more buys after every reload.
func TestRR14ReloadKeepsRateLimitBuckets(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	env := rr14Env0(t, r, shop)
	v := rr14Base()
	v.PerUser = "{ rate: 0.01, burst: 2 }"
	v.PerIP = "{ rate: 1000, burst: 1000 }"
	cfg, err := rr14Parse(t, env.yaml(v))
	if err != nil {
		t.Fatal(err)
	}
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, env.act)
	buy := func() e2e.Resp { return e2e.Buy(p.Addr, env.act, "scalper") }
	got := []string{buy().Code, buy().Code, buy().Code}
	if got[2] != "RATE_LIMITED" {
		t.Fatalf("before any reload: %v, want the third RATE_LIMITED", got)
	}
	limited := 0
	for i := 0; i < 5; i++ {
		v.PerIP = fmt.Sprintf("{ rate: %d, burst: 1000 }", 1001+i) // per_user unchanged
		next, err := rr14Parse(t, env.yaml(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := rr14Reload(p, next); err != nil {
			t.Fatal(err)
		}
		if c := buy().Code; c == "RATE_LIMITED" {
			limited++
		} else {
			got = append(got, c)
		}
	}
	if limited != 5 {
		t.Errorf("per_user {rate: 0.01, burst: 2}: after 5 reloads that changed only per_ip, %d of 5 buys were RATE_LIMITED; the others answered %v — each reload refilled the buyer's per_user bucket", limited, got[3:])
	}
}

// TestRR14ReloadLoweringTimeoutsReleasesWinnerAtShop: the shop is slow, so
// the operator lowers upstream.timeout 20s → 1s and pending_timeout 60s →
// 4s (valid: ≥ 2 × 1s + 2s) and reloads. A winner sent before the reload
// is still at the shop under the old 20 s timeout. The background
// reconciler (or `reconcile --repair` with the same file) uses the new
// pending_timeout: at 4 s it asks verify (no order yet: 404) and releases
// the unit, which is sold again; then the shop takes the first order.
// Two orders for one unit.
func TestRR14ReloadLoweringTimeoutsReleasesWinnerAtShop(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	env := rr14Env0(t, r, shop)
	env.shards = 1
	v := rr14Base()
	v.Stock = 1
	v.UpstreamTimeout, v.PendingTimeout = "20s", "60s"
	cfg, err := rr14Parse(t, env.yaml(v))
	if err != nil {
		t.Fatal(err)
	}
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, env.act)

	release := shop.Hang("slow")
	first := make(chan e2e.Resp, 1)
	go func() {
		first <- e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + env.act + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"X-User-Id", "slow"}}, Timeout: 30 * time.Second})
	}()
	e2e.Eventually(t, 5*time.Second, "the first winner at the shop", func() bool { return shop.SeenBuy("slow") })

	v.UpstreamTimeout, v.PendingTimeout = "1s", "4s"
	next, err := rr14Parse(t, env.yaml(v))
	if err != nil {
		t.Fatalf("the lowered timeouts are a valid file: %v", err)
	}
	if err := rr14Reload(p, next); err != nil {
		t.Logf("reload refused (what a fix may do): %v", err)
		release()
		<-first
		return
	}
	time.Sleep(4500 * time.Millisecond)
	// serve's background pass, with the running config.
	rep, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
		Run(context.Background(), []*config.Activity{next.Activity(env.act)}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reconcile: %+v", rep.Activities)
	second := e2e.Buy(p.Addr, env.act, "second")
	release() // the shop now takes the first order
	f := <-first
	t.Logf("first buyer: %d %s; second buyer: %d %s", f.Status, f.Code, second.Status, second.Code)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Server.WaitConfirms(ctx)
	st := p.SKUStatus(t, env.act)
	orders := shop.Orders()
	if len(orders) > 1 || int64(len(orders)) != st.Confirmed {
		t.Errorf("stock 1: the shop holds %d orders, Redis %+v; the reconciler released a winner still at the shop under the old upstream.timeout (20s) by the reloaded pending_timeout (4s)", len(orders), st)
	}
}
