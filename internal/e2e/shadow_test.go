package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/shop"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// shadowSeen is one buy as the shop behind a shadow proxy received it.
type shadowSeen struct {
	user, sku, code string // code: X-Seckill-Shadow, the proxy's would-be answer
	status          int
	otherSeckill    bool // any X-Seckill-* header besides X-Seckill-Shadow
}

// Issue 13 §2: the demo shop in legacy mode (selling from its own stock
// row, no tokens) behind a shadow proxy; 2,000 buyers × 3 attempts for 100
// units. The shop is given more stock than the config (65+65 for 50+50)
// and sells one unit per user per SKU, so it oversells and lets users
// past per_user_limit (1, activity-wide): every figure of the report is
// non-trivial, and each must equal what the test counted at the shop.
func TestShadowReportMatchesShop(t *testing.T) {
	r := StartRedis(t)
	const act, perSKU, shopPerSKU, users, attempts = "sh", 50, 65, 2000, 3

	legacy, err := shop.New(context.Background(), shop.Config{DB: "sqlite:" + filepath.Join(t.TempDir(), "shop.db"),
		Legacy: true, Reset: true, Stock: map[string]int64{act + "/a": shopPerSKU, act + "/b": shopPerSKU}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []shadowSeen
	inner := legacy.Handler()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		inner(ctx)
		path := string(ctx.Path())
		if !strings.HasSuffix(path, "/buy") {
			return
		}
		s := shadowSeen{user: string(ctx.Request.Header.Peek("X-User-Id")), code: string(ctx.Request.Header.Peek("X-Seckill-Shadow")),
			status: ctx.Response.StatusCode()}
		if parts := strings.Split(path, "/"); len(parts) == 6 {
			s.sku = parts[4]
		}
		for k := range ctx.Request.Header.All() {
			if strings.HasPrefix(strings.ToLower(string(k)), "x-seckill-") && !strings.EqualFold(string(k), "X-Seckill-Shadow") {
				s.otherSeckill = true
			}
		}
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); _ = legacy.Close() })

	cfg := Options{Redis: r.Addrs, ShopURL: "http://" + ln.Addr().String(), Activities: []Activity{{
		ID: act, Mode: config.ModeShadow, ShadowHeaders: true, NoVerify: true,
		SKUs: []config.SKU{{ID: "a", Stock: perSKU}, {ID: "b", Stock: perSKU}},
	}}}.Config(t)
	p := StartProxy(t, cfg)
	p.Preheat(t, act)

	// Every buyer's attempts alternate SKUs (a, b, a or b, a, b), spread
	// over the run in random order.
	type job struct{ user, attempt int }
	jobs := make([]job, 0, users*attempts)
	for u := 0; u < users; u++ {
		for k := 0; k < attempts; k++ {
			jobs = append(jobs, job{u, k})
		}
	}
	// The first `early` buyers go first, one attempt at a time, while the
	// shop has stock of both SKUs: each gets a and b at the shop, so users
	// past the limit are certain, not left to the draw. The rest run in
	// random order.
	const early = 5
	rest := jobs[early*attempts:]
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	hc := &fasthttp.HostClient{Addr: p.Addr, MaxConns: 64}
	ch := make(chan job)
	clientOK := make(chan int, 64)
	var wg sync.WaitGroup
	for w := 0; w < 48; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for j := range ch {
				sku := "a"
				if (j.user+j.attempt)%2 == 1 {
					sku = "b"
				}
				req.Reset()
				req.Header.SetMethod("POST")
				req.SetRequestURI("http://" + p.Addr + "/api/seckill/" + act + "/" + sku + "/buy")
				req.Header.Set("X-User-Id", "u"+strconv.Itoa(j.user))
				if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
					t.Errorf("buy: %v", err)
					continue
				}
				if c := resp.StatusCode(); c >= 200 && c <= 299 {
					n++
				}
			}
			clientOK <- n
		}()
	}
	for i, j := range jobs {
		ch <- j
		if i < early*attempts {
			// One at a time: wait until this attempt has reached the shop
			// and been answered before the next one goes.
			for {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				if n > i {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	close(ch)
	wg.Wait()
	close(clientOK)
	clientTotal := 0
	for n := range clientOK {
		clientTotal += n
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Server.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Server.WaitShadow(ctx); err != nil {
		t.Fatal(err)
	}
	if d := p.Server.ShadowDropped(); d != 0 {
		t.Fatalf("%d shadow decisions not recorded", d)
	}

	// What the shop saw, counted here.
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != users*attempts {
		t.Fatalf("shop saw %d buys, want every one of %d", len(seen), users*attempts)
	}
	decisions := map[string]int64{}
	refusedOK := map[string]int64{}
	statuses := map[string]int64{}
	okBySKU := map[string]int64{}
	okByUser := map[string]int64{}
	var shopOK, admittedOK int
	for _, s := range seen {
		if s.code == "" || s.otherSeckill {
			t.Fatalf("buy %+v: want X-Seckill-Shadow and no other X-Seckill-* header", s)
		}
		decisions[s.code]++
		statuses[strconv.Itoa(s.status)]++
		if s.status >= 200 && s.status <= 299 {
			shopOK++
			okBySKU[s.sku]++
			okByUser[s.user]++
			if s.code == "ADMITTED" {
				admittedOK++
			} else {
				refusedOK[s.code]++
			}
		}
	}
	if clientTotal != shopOK {
		t.Fatalf("buyers got %d 2xx answers, the shop gave %d: the proxy changed answers", clientTotal, shopOK)
	}
	var beyond, over int64
	for _, n := range okBySKU {
		beyond += max(n-perSKU, 0)
	}
	for _, n := range okByUser {
		if n > 1 {
			over++
		}
	}
	var refusedTotal int64
	for _, n := range refusedOK {
		refusedTotal += n
	}

	rep, err := p.Store.ShadowReport(ctx, p.Activity(t, act))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decisions %v; shop %v; refused but accepted %v; beyond stock %d; over limit %d of %d; p50 %dµs p99 %dµs",
		decisions, statuses, refusedOK, beyond, over, len(okByUser), rep.LatencyP50Us, rep.LatencyP99Us)
	same := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: report %v, shop counted %v", what, got, want)
		}
	}
	same("decisions", rep.Decisions, decisions)
	same("total", rep.Total, int64(users*attempts))
	same("shop statuses", rep.ShopStatus, statuses)
	same("refused but accepted", rep.RefusedButAccepted, refusedOK)
	same("refused but accepted total", rep.RefusedButAcceptedTotal, refusedTotal)
	same("beyond stock", rep.BeyondStock, beyond)
	for _, k := range rep.SKUs {
		same("shop units of "+k.ID, k.ShopUnits, okBySKU[k.ID])
	}
	same("shop buyers", rep.ShopBuyers, int64(len(okByUser)))
	same("users over limit", rep.OverLimit, over)
	same("logged", rep.Logged, int64(users*attempts))
	if rep.LatencyP50Us <= 0 || rep.LatencyP99Us < rep.LatencyP50Us || rep.LatencyMaxUs < rep.LatencyP99Us {
		t.Errorf("latency p50 %d p99 %d max %d µs", rep.LatencyP50Us, rep.LatencyP99Us, rep.LatencyMaxUs)
	}
	// The legacy shop oversold (130 units for a stock of 100) and sold
	// some users both SKUs: the report must have something to say.
	if beyond != shopPerSKU*2-perSKU*2 || over < early || refusedTotal < beyond {
		t.Errorf("the run exercised too little: beyond %d, over %d, refused-but-accepted %d", beyond, over, refusedTotal)
	}

	// The shadow stock tracks what the proxy would have sold: its winners
	// the shop accepted are confirmed, the others released.
	st := p.Status(t, act)
	var confirmed int64
	for _, k := range st.SKUs {
		if !k.OK || k.Pending != 0 || k.Remaining+k.Confirmed != k.Initial || k.Initial != perSKU {
			t.Errorf("shadow stock %+v", k)
		}
		confirmed += k.Confirmed
	}
	same("shadow confirmed", confirmed, int64(admittedOK))
	if confirmed > 2*perSKU {
		t.Errorf("shadow oversold: %d", confirmed)
	}
	// The real activity's keys are untouched.
	real, err := p.Store.Status(ctx, p.Activity(t, act))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range real.SKUs {
		if k.Preheated {
			t.Errorf("real activity's stock was written: %+v", k)
		}
	}
	_ = store.ShadowLogMax
}
