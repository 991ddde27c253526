package e2e_test

// SPEC.md §1–§5 audit (first half): statements no other test checks, or
// checks only through the implementation's own code (e.g. the signature).

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// specAShopBuyRequest returns the one request the shop received that
// carried X-Seckill-Token for user.
func specAShopBuyRequest(t *testing.T, shop *e2e.Shop, user string) e2e.Request {
	t.Helper()
	var got []e2e.Request
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" && r.Header.Get("X-Seckill-User") == user {
			got = append(got, r)
		}
	}
	if len(got) != 1 {
		t.Fatalf("the shop got %d buys of %s, want 1", len(got), user)
	}
	return got[0]
}

// specASigFields reads X-Seckill-Signature's fields by name.
func specASigFields(h string) map[string]string {
	m := map[string]string{}
	for _, part := range strings.Split(h, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		m[k] = v
	}
	return m
}

// SPEC §4: "(winner, sync) | shop's status | the shop's response is passed
// through, with X-Seckill-Token added".
func TestSpecAWinnerGetsTheShopsAnswerWithToken(t *testing.T) {
	f := newFixture(t)
	f.shop.Answer("w201", http.StatusCreated)
	r := f.buy(actOpen, "w201")
	if r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("winner got %d %s (%v), want the shop's 201", r.Status, r.Body, r.Err)
	}
	if r.Header["X-Shop"] != "order" || r.Header["Content-Type"] != "application/json" {
		t.Errorf("the shop's headers were not passed through: %v", r.Header)
	}
	var body map[string]string
	if err := json.Unmarshal(r.Body, &body); err != nil || body["order_id"] == "" {
		t.Fatalf("the shop's body was not passed through: %s", r.Body)
	}
	tok := r.Header["X-Seckill-Token"]
	if tok == "" || tok != body["token"] {
		t.Errorf("X-Seckill-Token %q, the shop got token %q", tok, body["token"])
	}
	if req := specAShopBuyRequest(t, f.shop, "w201"); req.Header.Get("X-Seckill-Token") != tok {
		t.Errorf("client's X-Seckill-Token %q is not the one the shop got %q", tok, req.Header.Get("X-Seckill-Token"))
	}
}

// SPEC §5: the shop receives "the original request (method, path, query,
// body, headers) plus: X-Seckill-Token, X-Seckill-Activity, X-Seckill-Sku,
// X-Seckill-Qty, X-Seckill-User ... X-Forwarded-For is appended as usual."
func TestSpecAShopGetsTheOriginalRequestPlusSeckillHeaders(t *testing.T) {
	f := newFixture(t)
	body := `{"item":{"sku":"sku1"},"qty":2,"note":"gift wrap"}`
	r := f.do(e2e.Req{URI: "/j/buy?ref=7&utm=a", Body: []byte(body), Header: [][2]string{
		{"X-User-Id", "u-json"}, {"Content-Type", "application/json"}, {"X-Custom", "kept"},
		{"X-Forwarded-For", "203.0.113.9"},
	}})
	wantWin(t, r)
	req := specAShopBuyRequest(t, f.shop, "u-json")
	if req.Method != "POST" || req.Path != "/j/buy" || req.Query != "ref=7&utm=a" || string(req.Body) != body {
		t.Errorf("shop got %s %s ?%s body %q", req.Method, req.Path, req.Query, req.Body)
	}
	if req.Header.Get("X-Custom") != "kept" || req.Header.Get("Content-Type") != "application/json" || req.Header.Get("X-User-Id") != "u-json" {
		t.Errorf("client headers lost: %v", req.Header)
	}
	for name, want := range map[string]string{
		"X-Seckill-Token": r.Token(), "X-Seckill-Activity": actJSON, "X-Seckill-Sku": e2e.SKU,
		"X-Seckill-Qty": "2", "X-Seckill-User": "u-json",
	} {
		if got := req.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := req.Header.Get("X-Forwarded-For"); got != "203.0.113.9, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's value with the peer appended", got)
	}
}

// SPEC §5: "v1 is HMAC-SHA256, keyed with the signing secret, of
// <t>.<token>.<activity>.<sku>.<qty>.<user>", t in unix ms (recent),
// computed here independently of internal/signing.
func TestSpecASignatureV1ComputedIndependently(t *testing.T) {
	f := newFixture(t)
	before := time.Now().UnixMilli()
	wantWin(t, f.do(e2e.Req{URI: "/q/buy?sku=sku1&qty=3", Header: [][2]string{{"X-User-Id", "sig-u"}}}))
	after := time.Now().UnixMilli()
	req := specAShopBuyRequest(t, f.shop, "sig-u")
	fs := specASigFields(req.Header.Get("X-Seckill-Signature"))
	ts, err := strconv.ParseInt(fs["t"], 10, 64)
	if err != nil || ts < before-1000 || ts > after+1000 {
		t.Fatalf("t=%q not a unix-ms time of the buy (%d..%d)", fs["t"], before, after)
	}
	msg := strings.Join([]string{fs["t"], req.Header.Get("X-Seckill-Token"), actQuery, e2e.SKU, "3", "sig-u"}, ".")
	m := hmac.New(sha256.New, []byte(e2e.Secret))
	m.Write([]byte(msg))
	if want := hex.EncodeToString(m.Sum(nil)); fs["v1"] != want {
		t.Fatalf("v1 = %q, want HMAC-SHA256(secret, %q) = %s", fs["v1"], msg, want)
	}
	if req.Header.Get("X-Seckill-Qty") != "3" {
		t.Errorf("X-Seckill-Qty = %q", req.Header.Get("X-Seckill-Qty"))
	}
}

// SPEC §5: X-Seckill-Token is a "unique, unguessable reservation id".
func TestSpecATokensUniqueAndUnguessable(t *testing.T) {
	f := newFixture(t)
	seen := map[string]bool{}
	rand := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := f.buy(actOpen, "tok-"+strconv.Itoa(i))
			mu.Lock()
			defer mu.Unlock()
			if r.Code != "WIN" {
				t.Errorf("buyer %d: %d %s", i, r.Status, r.Body)
				return
			}
			tok := r.Token()
			if seen[tok] {
				t.Errorf("token %s issued twice", tok)
			}
			seen[tok] = true
			// The secret part: whatever follows the last '.'; at least 96
			// bits of base64 (16 characters) and never repeated.
			secret := tok[strings.LastIndex(tok, ".")+1:]
			if len(secret) < 16 || rand[secret] {
				t.Errorf("token %s: secret part %q too short or repeated", tok, secret)
			}
			rand[secret] = true
		}(i)
	}
	wg.Wait()
	if len(seen) != 40 {
		t.Errorf("%d distinct tokens for 40 winners", len(seen))
	}
}

// SPEC §4 body: {"code","message","activity","sku"} on every answer the
// proxy gives itself about a SKU of an activity.
func TestSpecAProxyAnswersNameActivityAndSku(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.UpstreamTimeout = 300 * time.Millisecond })
	f.shop.Answer("fail-u", http.StatusConflict)
	rel := f.shop.Hang("slow-u")
	defer rel()
	wantWin(t, f.buy(actOpen, "dup-u"))
	for _, c := range []struct {
		act, user, code string
		status          int
	}{
		{actFuture, "x1", "NOT_STARTED", 403},
		{actPast, "x1", "ENDED", 403},
		{actCold, "x1", "NOT_READY", 503},
		{actOpen, "dup-u", "ALREADY_PURCHASED", 409},
		{actOpen, "fail-u", "UPSTREAM_FAILED", 502},
		{actOpen, "slow-u", "UPSTREAM_TIMEOUT", 504},
	} {
		r := f.buy(c.act, c.user)
		wantCode(t, r, c.code, c.status)
		if r.Str("activity") != c.act || r.Str("sku") != e2e.SKU {
			t.Errorf("%s body %s: want activity %q and sku %q", c.code, r.Body, c.act, e2e.SKU)
		}
	}
}

// SPEC §4: "GET /_seckill/activities/{id} → state, window, and per SKU
// remaining (display value, may lag by < 1 s)".
func TestSpecAPublicActivityWindowAndLag(t *testing.T) {
	f := newFixture(t)
	get := func() e2e.Resp { return f.do(e2e.Req{Method: "GET", URI: "/_seckill/activities/" + actOpen}) }
	remaining := func(r e2e.Resp) float64 {
		skus, _ := r.JSON["skus"].([]any)
		if len(skus) != 1 {
			return -1
		}
		m, _ := skus[0].(map[string]any)
		n, _ := m["remaining"].(float64)
		return n
	}
	r := get()
	a := f.act(t, actOpen)
	s, ok1 := r.Num("start_ms")
	e, ok2 := r.Num("end_ms")
	if r.Status != 200 || r.Header["Content-Type"] != "application/json" || !ok1 || !ok2 ||
		int64(s) != a.Start.UnixMilli() || int64(e) != a.End.UnixMilli() || r.Str("state") != "open" {
		t.Fatalf("activity: %d %s (%s), want state open, start_ms %d, end_ms %d", r.Status, r.Body, r.Header["Content-Type"], a.Start.UnixMilli(), a.End.UnixMilli())
	}
	if remaining(r) != 100 {
		t.Fatalf("remaining %v, want 100: %s", remaining(r), r.Body)
	}
	wantWin(t, f.buy(actOpen, "lag-u"))
	t0 := time.Now()
	for remaining(get()) != 99 {
		if time.Since(t0) >= time.Second {
			t.Fatalf("remaining still %v a second after a win", remaining(get()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SPEC §4: "Proxy-owned public endpoints (prefix configurable, default
// /_seckill)".
func TestSpecAPublicPrefixConfigurable(t *testing.T) {
	redis, shop := e2e.StartRedis(t), e2e.StartShop(t)
	cfg := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{{ID: "pp", Stock: 3}}}.Config(t)
	cfg.PublicPrefix = "/flash"
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "pp")
	r := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/flash/time"})
	if ms, ok := r.Num("server_time_ms"); r.Status != 200 || !ok || time.Since(time.UnixMilli(int64(ms))).Abs() > time.Minute {
		t.Fatalf("/flash/time: %d %s", r.Status, r.Body)
	}
	r = e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/flash/activities/pp"})
	if r.Status != 200 || r.Str("state") != "open" {
		t.Fatalf("/flash/activities/pp: %d %s", r.Status, r.Body)
	}
	won := e2e.Buy(p.Addr, "pp", "pp-u")
	wantWin(t, won)
	r = e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/flash/reservations/" + won.Token()})
	if r.Status != 200 || r.Str("state") != "confirmed" {
		t.Fatalf("/flash/reservations: %d %s", r.Status, r.Body)
	}
}

// SPEC §2: "pause ... kill switch for one activity; every proxy instance
// obeys within 1 s". The flag is set through a client of its own, as the
// pause command does; two instances must both refuse within a second.
func TestSpecAPauseObeyedWithinOneSecond(t *testing.T) {
	f := newFixture(t)
	p2 := e2e.StartProxy(t, f.opts.Config(t))
	p2.WaitPreheated(t, actOpen)
	wantWin(t, f.buy(actOpen, "warm-1"))
	wantWin(t, e2e.Buy(p2.Addr, actOpen, "warm-2"))
	f.setPaused(t, actOpen, true)
	t0 := time.Now()
	time.Sleep(time.Second)
	elapsed := time.Since(t0)
	for i, addr := range []string{f.p.Addr, p2.Addr} {
		r := e2e.Buy(addr, actOpen, "late-"+strconv.Itoa(i))
		if r.Code != "PAUSED" {
			t.Errorf("instance %d, %v after pause: %d %s, want 503 PAUSED", i, elapsed, r.Status, r.Body)
		}
	}
	f.setPaused(t, actOpen, false)
}

// SPEC §5: "shop answers 2xx → reservation confirmed (order id recorded
// when found)"; SPEC §3: order_id_from "json:/order_id ... (or header:NAME)".
func TestSpecAOrderIDRecorded(t *testing.T) {
	t.Run("json default", func(t *testing.T) {
		f := newFixture(t)
		won := f.buy(actOpen, "oid-u")
		wantWin(t, won)
		oid := f.shop.Orders()[won.Token()].OrderID
		r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + won.Token()})
		if r.Status != 200 || r.Str("state") != "confirmed" || oid == "" || r.Str("order_id") != oid {
			t.Fatalf("reservation %d %s, want confirmed with order_id %q", r.Status, r.Body, oid)
		}
	})
	t.Run("header:NAME", func(t *testing.T) {
		var n int
		var mu sync.Mutex
		shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Seckill-Token") == "" {
				w.WriteHeader(404)
				return
			}
			mu.Lock()
			n++
			id := "H-" + strconv.Itoa(n)
			mu.Unlock()
			w.Header().Set("X-Order-Id", id)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("thanks"))
		}))
		defer shop.Close()
		redis := e2e.StartRedis(t)
		cfg := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{{ID: "hdr", Stock: 3, NoVerify: true}}}.Config(t)
		cfg.Activities[0].OrderIDFrom = "header:X-Order-Id"
		p := e2e.StartProxy(t, cfg)
		p.Preheat(t, "hdr")
		won := e2e.Buy(p.Addr, "hdr", "h-u")
		if won.Status != 200 || won.Token() == "" || string(won.Body) != "thanks" {
			t.Fatalf("winner: %d %s %v", won.Status, won.Body, won.Header)
		}
		r := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + won.Token()})
		if r.Status != 200 || r.Str("state") != "confirmed" || r.Str("order_id") != "H-1" {
			t.Fatalf("reservation %d %s, want confirmed with order_id H-1", r.Status, r.Body)
		}
	})
}

// SPEC §1 step 3 / §4: "BLOCKED | 403 | IP, device or user on a
// blocklist" and "RATE_LIMITED | 429 | IP, device or user rate exceeded",
// for the device (default identity.device header X-Device-Id) and the IP.
func TestSpecADeviceAndIPBlocksAndDeviceRate(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 1000000, burst: 1000000 }, per_device: { rate: 1, burst: 2 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	dev := func(user, device string) e2e.Resp {
		return f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"X-User-Id", user}, {"X-Device-Id", device}}})
	}
	// per_device burst 2: a third buy from one device in the same instant
	// is refused, whoever the user.
	wantWin(t, dev("d-u1", "dev-hot"))
	wantWin(t, dev("d-u2", "dev-hot"))
	r := dev("d-u3", "dev-hot")
	wantCode(t, r, "RATE_LIMITED", 429)
	wantRetryAfter(t, r)

	st := f.p.Store
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.BlockAdd(ctx, store.BlockDevice, []string{"dev-bad"}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	n := 0
	e2e.Eventually(t, 2*time.Second, "BLOCKED by device", func() bool {
		n++
		return dev("bd-"+strconv.Itoa(n), "dev-bad").Code == "BLOCKED"
	})
	wantCode(t, dev("bd-x", "dev-bad"), "BLOCKED", 403)
	wantWin(t, dev("bd-ok", "dev-good"))

	if err := st.BlockAdd(ctx, store.BlockIP, []string{"127.0.0.1"}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, 2*time.Second, "BLOCKED by IP", func() bool {
		n++
		return dev("bi-"+strconv.Itoa(n), "dev-ip-"+strconv.Itoa(n)).Code == "BLOCKED"
	})
	wantCode(t, dev("bi-x", "dev-ip-x"), "BLOCKED", 403)
}

// SPEC §1 step 4 / §3: "activity-level admission rate (global across all
// proxy instances)", admission_rate "whole fleet, per second": two
// instances together admit no more than one instance's budget.
func TestSpecAAdmissionRateIsFleetWide(t *testing.T) {
	redis, shop := e2e.StartRedis(t), e2e.StartShop(t)
	opts := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "adm", Stock: 1000, AdmissionRate: "{ rate: 1, burst: 5 }"}}}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, "adm")
	p2.WaitPreheated(t, "adm")
	t0 := time.Now()
	admitted, busy := 0, 0
	for i := 0; i < 40; i++ {
		addr := p1.Addr
		if i%2 == 1 {
			addr = p2.Addr
		}
		switch r := e2e.Buy(addr, "adm", "adm-"+strconv.Itoa(i)); r.Code {
		case "WIN":
			admitted++
		case "BUSY":
			busy++
		default:
			t.Fatalf("buy %d: %d %s", i, r.Status, r.Body)
		}
	}
	elapsed := time.Since(t0)
	t.Logf("admitted %d, BUSY %d in %v", admitted, busy, elapsed)
	// burst 5 plus what 1/s refills while the loop ran.
	if limit := 5 + int(elapsed.Seconds()) + 1; admitted > limit {
		t.Fatalf("two instances admitted %d of 40 in %v at admission_rate {rate: 1, burst: 5} for the fleet, want at most %d", admitted, elapsed, limit)
	}
	if busy == 0 {
		t.Fatal("no BUSY")
	}
}

// SPEC §4: "Every answer the proxy gives itself is JSON with
// Content-Type: application/json" — also the public endpoints' refusals.
func TestSpecAPublicEndpointRefusalsAreJSON(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		method, uri string
		status      int
	}{
		{"GET", "/_seckill/activities/nosuch", 404},
		{"GET", "/_seckill/reservations/open.sku1.0.AAAAAAAAAAAAAAAAAAAAAA", 404},
		{"POST", "/_seckill/time", 405},
	} {
		r := f.do(e2e.Req{Method: c.method, URI: c.uri})
		if r.Err != nil || r.Status != c.status {
			t.Errorf("%s %s: %d %s (%v), want %d", c.method, c.uri, r.Status, r.Body, r.Err, c.status)
			continue
		}
		if r.Header["Content-Type"] != "application/json" || !json.Valid(r.Body) || r.Header["X-Shop"] != "" {
			t.Errorf("%s %s: %d %q (%s), want a JSON answer of the proxy", c.method, c.uri, r.Status, r.Body, r.Header["Content-Type"])
		}
	}
}

// SPEC §4: "Repeating a request with the same X-Request-Id (same user)
// within 5 minutes returns the same outcome and never reserves twice" —
// the record a repeat is answered from lives at least 5 minutes (white
// box: the request id record's TTL in Redis).
func TestSpecARequestIDRememberedFiveMinutes(t *testing.T) {
	f := newFixture(t)
	wantWin(t, f.buyWithID("ttl-u", "ttl-rid-1"))
	keys, err := f.redis.Node.Do("KEYS", "*rid:ttl-u|ttl-rid-1")
	if err != nil || strings.TrimSpace(keys) == "" || strings.Contains(keys, "\n") {
		t.Fatalf("request id record: %q %v", keys, err)
	}
	pttl, err := f.redis.Node.Do("PTTL", strings.TrimSpace(keys))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := strconv.ParseInt(strings.TrimSpace(pttl), 10, 64)
	if ms < (5*time.Minute - 10*time.Second).Milliseconds() {
		t.Fatalf("request id record expires in %d ms, want about 5 minutes", ms)
	}
	again := f.buyWithID("ttl-u", "ttl-rid-1")
	if again.Status != 200 || again.Header["X-Seckill-Replayed"] != "true" {
		t.Errorf("repeat: %d %s %v", again.Status, again.Body, again.Header)
	}
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys", n)
	}
}
