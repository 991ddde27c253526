package e2e_test

// Spec audit, second half: SPEC §6 (consistency promises) and §9
// (amendments: replays, STORE_UNAVAILABLE, bundles, ...), against real
// redis-servers and the recording shop.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// specBRelease releases token tok as `seckill-proxy release` does.
func specBRelease(t *testing.T, st *store.Store, tok string) (lua.Code, error) {
	t.Helper()
	tk, err := store.ParseToken(tok)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := st.Flags(ctx, tk.Activity)
	if err != nil {
		return 0, err
	}
	return st.Release(ctx, tk, f.Shards, "refund", time.Now().UnixMilli(), false)
}

func specBBuyID(addr, act, user, rid string) e2e.Resp {
	h := [][2]string{{"X-User-Id", user}}
	if rid != "" {
		h = append(h, [2]string{"X-Request-Id", rid})
	}
	return e2e.Do(nil, addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy", Header: h})
}

// SPEC §9 Replays: "never a state older than the reservation's". A winner's
// order refunded by the operator (confirmed → released) is no longer the
// shop's 200: a repeat of the winning request must not replay it.
func TestSpecBReplayAfterOperatorReleaseIsNotStale(t *testing.T) {
	f := newFixture(t)
	st := opsStore(t, f.p.Cfg)
	first := specBBuyID(f.p.Addr, actOpen, "alice", "rid-1")
	wantWin(t, first)
	f.p.WantStock(t, actOpen, 99, 0, 1)
	if code, err := specBRelease(t, st, first.Token()); err != nil || code != lua.OK {
		t.Fatalf("release %s: %v %v", first.Token(), code, err)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
	again := specBBuyID(f.p.Addr, actOpen, "alice", "rid-1")
	t.Logf("repeat after the refund: %d %s token %s", again.Status, again.Body, again.Token())
	if again.Err != nil {
		t.Fatal(again.Err)
	}
	if again.Header["X-Seckill-Replayed"] == "true" || (again.Token() == first.Token() && again.Status/100 == 2) {
		t.Fatalf("repeat after the order was released replays the confirmed answer: %d %s token %s replayed=%q",
			again.Status, again.Body, again.Token(), again.Header["X-Seckill-Replayed"])
	}
	k := f.p.SKUStatus(t, actOpen)
	if !k.OK || k.Pending+k.Confirmed > 1 {
		t.Fatalf("status after the repeat %+v", k)
	}
}

// SPEC §4/§9: the same request (user, X-Request-Id) sent many times at
// once, over two instances, reserves once: one shop buy per user, every
// copy answered with that one reservation's state.
func TestSpecBConcurrentRepeatsTwoInstancesReserveOnce(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	// 360 requests at once on two instances beside the package's other
	// tests: a 200 ms Redis timeout made copies STORE_UNAVAILABLE (a right
	// answer under overload, CI once: 52 of 360), which is not what this
	// test is about.
	o := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second,
		Activities: []e2e.Activity{{ID: "rep", Stock: 1000, Shards: 4}}}
	p1, p2 := e2e.StartProxy(t, o.Config(t)), e2e.StartProxy(t, o.Config(t))
	p1.Preheat(t, "rep")
	p2.WaitPreheated(t, "rep")
	const users, copies = 60, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	tokens := map[string]map[string]bool{}
	codes := map[string]int{}
	for u := 0; u < users; u++ {
		user := fmt.Sprintf("u%d", u)
		for c := 0; c < copies; c++ {
			addr := p1.Addr
			if c%2 == 1 {
				addr = p2.Addr
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := specBBuyID(addr, "rep", user, "rid-"+user)
				if res.Header["X-Seckill-Replayed"] == "true" && res.Status == 200 && res.Token() != "" {
					res.Code = "WIN" // the shop's answer again (its own headers are not replayed)
				}
				mu.Lock()
				defer mu.Unlock()
				codes[res.Code]++
				switch res.Code {
				case "WIN", "PENDING", "ALREADY_PURCHASED":
				default:
					t.Errorf("%s copy: %d %s (err %v)", user, res.Status, res.Body, res.Err)
				}
				if res.Code == "WIN" {
					if tokens[user] == nil {
						tokens[user] = map[string]bool{}
					}
					tokens[user][res.Token()] = true
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("answers %v", codes)
	perUser := map[string]int{}
	for _, b := range shop.Buys() {
		perUser[b.User]++
	}
	for u := 0; u < users; u++ {
		user := fmt.Sprintf("u%d", u)
		if perUser[user] != 1 {
			t.Errorf("%s: the shop got %d buys, want 1", user, perUser[user])
		}
		if len(tokens[user]) > 1 {
			t.Errorf("%s: %d different tokens among the copies' wins", user, len(tokens[user]))
		}
	}
	p1.Server.WaitConfirms(context.Background())
	p2.WantStock(t, "rep", 1000-users, 0, users)
}

// SPEC §6: initial = remaining + pending + confirmed at every moment, never
// stock above initial after any release, never a user above the limit.
// Buys on two instances race with refunds (each winner's token released
// twice at once) and with re-buys of the refunded users.
func TestSpecBStockAddsUpUnderRacingReleases(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	const stock = 40
	o := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second, // 360 buys at once on two instances: a 200 ms timeout under the package's load answers some STORE_UNAVAILABLE, not what this test checks
		Activities: []e2e.Activity{{ID: "rel", Stock: stock, Shards: 4}}}
	cfg := o.Config(t)
	p1, p2 := e2e.StartProxy(t, cfg), e2e.StartProxy(t, o.Config(t))
	p1.Preheat(t, "rel")
	p2.WaitPreheated(t, "rel")
	st := opsStore(t, cfg)
	a := p1.Activity(t, "rel")

	var released atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[string][]string{} // user -> tokens won and not released
	stop := make(chan struct{})
	var bad atomic.Int64
	// A watcher reads the counters while everything runs.
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := st.Status(context.Background(), a)
			if err == nil {
				for _, k := range s.SKUs {
					if !k.OK || k.Remaining > k.Initial || k.Remaining+k.Pending+k.Confirmed != k.Initial || k.Confirmed > k.Initial {
						bad.Add(1)
						t.Errorf("mid-run status breaks the invariant: %+v", k)
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for u := 0; u < 120; u++ {
		user := fmt.Sprintf("u%d", u)
		addr := p1.Addr
		if u%2 == 1 {
			addr = p2.Addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 3; round++ {
				res := e2e.Buy(addr, "rel", user)
				if res.Code != "WIN" {
					switch res.Code {
					case "SOLD_OUT", "ALREADY_PURCHASED", "PENDING":
					default:
						t.Errorf("%s: %d %s (err %v)", user, res.Status, res.Body, res.Err)
					}
					continue
				}
				if u%3 != 0 { // two in three winners keep their unit
					mu.Lock()
					held[user] = append(held[user], res.Token())
					mu.Unlock()
					return
				}
				// Refund twice at once: one release counts.
				var rw sync.WaitGroup
				var oks atomic.Int64
				for i := 0; i < 2; i++ {
					rw.Add(1)
					go func() {
						defer rw.Done()
						code, err := specBRelease(t, st, res.Token())
						if err != nil {
							t.Errorf("release: %v", err)
						}
						if code == lua.OK {
							oks.Add(1)
						} else if code != lua.Same {
							t.Errorf("release %s: code %v", res.Token(), code)
						}
					}()
				}
				rw.Wait()
				if oks.Load() != 1 {
					t.Errorf("%s: %d releases succeeded for one token", user, oks.Load())
				}
				released.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watch
	p1.Server.WaitConfirms(context.Background())
	k := p2.SKUStatus(t, "rel")
	keep := 0
	for user, toks := range held {
		if len(toks) > 1 {
			t.Errorf("%s holds %d units, per_user_limit 1", user, len(toks))
		}
		keep += len(toks)
	}
	t.Logf("status %+v; kept %d, released %d", k, keep, released.Load())
	if !k.OK || k.Remaining+k.Pending+k.Confirmed != stock || k.Remaining > stock || k.Pending != 0 {
		t.Fatalf("status %+v does not add up", k)
	}
	if k.Confirmed != int64(keep) || k.Released != released.Load() {
		t.Fatalf("confirmed %d released %d, want %d kept and %d released", k.Confirmed, k.Released, keep, released.Load())
	}
	// Released units are on sale again: fresh buyers take exactly what is
	// left, then SOLD_OUT.
	left := k.Remaining
	wins := int64(0)
	for i := 0; i < int(left)+5; i++ {
		res := e2e.Buy(p1.Addr, "rel", fmt.Sprintf("late%d", i))
		if res.Code == "WIN" {
			wins++
		} else if res.Code != "SOLD_OUT" {
			t.Errorf("late buyer %d: %d %s", i, res.Status, res.Body)
		}
	}
	if wins != left {
		t.Errorf("late buyers won %d units, %d were left after the refunds", wins, left)
	}
	// A winner's confirm runs after its answer: the late winners' may still
	// be on their way (CI under -race: pending 1, confirmed 39).
	p1.Server.WaitConfirms(context.Background())
	p2.WantStock(t, "rel", 0, 0, stock)
}

// specBStallBundleProxy: redis.timeout 100 ms in front of a Redis that
// takes DEBUG SLEEP, with a bundle activity preheated and its scripts
// loaded by a warm-up bundle.
func specBStallBundleProxy(t *testing.T) (*redistest.Server, *e2e.Shop, *e2e.Proxy) {
	t.Helper()
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "sbun", Shards: 2, PerUserLimit: 2, BundleRoute: bundleRoute,
			SKUs: []config.SKU{{ID: "a", Stock: 60}, {ID: "b", Stock: 60}}}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "sbun")
	if r := specBBundle(p, "warm-up"); r.Code != "WIN" {
		t.Fatalf("warm-up bundle: %d %s", r.Status, r.Body)
	}
	return node, shop, p
}

func specBBundle(p *e2e.Proxy, user string) e2e.Resp {
	return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/sbun/bundle", Body: []byte(itemsJSON("a:1", "b:1")),
		Header: [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}}, Timeout: 5 * time.Second})
}

// SPEC §9 "STORE_UNAVAILABLE means nothing is held, also when Redis
// answered late", for bundles through the proxy: a bundle refused during a
// stall holds no unit of any item once Redis is back, and its buyer buys
// the bundle again at once.
func TestSpecBBundleStallStoreUnavailableHoldsNothing(t *testing.T) {
	node, shop, p := specBStallBundleProxy(t)
	unavailable := stallRounds(t, node, func(user string) e2e.Resp { return specBBundle(p, user) })
	if len(unavailable) == 0 {
		t.Fatal("no bundle was in flight during a stall")
	}
	a := p.Activity(t, "sbun")
	e2e.Eventually(t, 3*time.Second, "nothing pending after the stalls", func() bool {
		s, err := p.Store.Status(context.Background(), a)
		if err != nil {
			return false
		}
		for _, k := range s.SKUs {
			if !k.OK || k.Pending != 0 {
				return false
			}
		}
		return true
	})
	// Per-user limit 2, one unit of each SKU per bundle: a refused buyer
	// holding nothing buys one bundle, and a second one too.
	for _, u := range unavailable {
		if r := specBBundle(p, u); r.Code != "WIN" {
			t.Errorf("%s, refused during a stall, buys again: %d %s, want a win", u, r.Status, r.Body)
		}
	}
	orders := shop.Orders()
	for _, k := range p.Status(t, "sbun").SKUs {
		if !k.OK || k.Remaining+k.Pending+k.Confirmed != 60 || k.Pending != 0 || k.Confirmed != int64(len(orders)) {
			t.Errorf("sku %s %+v with %d bundle orders at the shop", k.ID, k, len(orders))
		}
	}
	t.Logf("%d STORE_UNAVAILABLE bundles over 3 stalls, %d orders", len(unavailable), len(orders))
}

// README (Bundles) documents "409 SOLD_OUT names the short SKU"; SPEC §4
// has SOLD_OUT as 410. Which one does a bundle get?
func TestSpecBBundleSoldOutStatus(t *testing.T) {
	f := newBundleFixture(t, false, e2e.Activity{ID: "bso", Shards: 1, PerUserLimit: 3, BundleRoute: bundleRoute,
		SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 1}}})
	if r := f.bundle("bso", "u1", itemsJSON("a:1", "b:1")); r.Code != "WIN" {
		t.Fatalf("first bundle: %d %s", r.Status, r.Body)
	}
	r := f.bundle("bso", "u2", itemsJSON("a:1", "b:1"))
	if r.Code != "SOLD_OUT" || r.Str("sku") != "b" {
		t.Fatalf("bundle short of b: %d %s", r.Status, r.Body)
	}
	if r.Status != http.StatusGone {
		t.Errorf("bundle SOLD_OUT answered %d, SPEC §4 says SOLD_OUT is 410", r.Status)
	}
}

// README Fair start: "A repeated request id, per-user limits, stock and
// every other rule are Redis's, as without fair start." Copies of one
// request, and several requests of one user, held in the window and let on
// at independent moments: one reservation each; exactly `stock` winners.
func TestSpecBFairStartHeldRepeatsReserveOnce(t *testing.T) {
	t0 := fairT0.Add(5 * time.Minute)
	f := startFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "fdup", Stock: 20, Start: t0,
		FairStart: 200 * time.Millisecond, FairStartSpread: 300 * time.Millisecond}}})
	send := func(user, rid string) e2e.Resp {
		h := [][2]string{{"X-User-Id", user}}
		if rid != "" {
			h = append(h, [2]string{"X-Request-Id", rid})
		}
		return e2e.Do(f.c, f.p.Addr, e2e.Req{URI: "/api/seckill/fdup/" + e2e.SKU + "/buy", Header: h, Timeout: 60 * time.Second})
	}
	f.clock.at(t0, 5*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]map[string]int{}
	got := func(user string, r e2e.Resp) {
		if r.Header["X-Seckill-Replayed"] == "true" && r.Status == 200 && r.Token() != "" {
			r.Code = "REPLAY" // the winner's answer again, same reservation
		}
		mu.Lock()
		defer mu.Unlock()
		if codes[user] == nil {
			codes[user] = map[string]int{}
		}
		codes[user][r.Code]++
		switch r.Code {
		case "WIN", "REPLAY", "SOLD_OUT", "PENDING", "ALREADY_PURCHASED":
		default:
			t.Errorf("%s: %d %s (err %v)", user, r.Status, r.Body, r.Err)
		}
	}
	n := 0
	for i := 0; i < 40; i++ {
		u := fmt.Sprintf("plain%d", i)
		wg.Add(1)
		n++
		go func() { defer wg.Done(); got(u, send(u, "")) }()
	}
	for i := 0; i < 8; i++ {
		wg.Add(2)
		n += 2
		go func() { defer wg.Done(); got("dup", send("dup", "one-rid")) }()
		rid := fmt.Sprintf("rid-%d", i)
		go func() { defer wg.Done(); got("multi", send("multi", rid)) }()
	}
	e2e.Eventually(t, 20*time.Second, "every buy held", func() bool { return f.held() == n })
	for d := 200 * time.Millisecond; d <= 600*time.Millisecond; d += 5 * time.Millisecond {
		f.clock.at(t0, d)
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	perUser := map[string]int{}
	for _, b := range f.shop.Buys() {
		perUser[b.User]++
	}
	for _, u := range []string{"dup", "multi"} {
		if perUser[u] > 1 || codes[u]["WIN"] > 1 {
			t.Errorf("%s: %d shop buys, %d WIN answers (%v), per_user_limit 1", u, perUser[u], codes[u]["WIN"], codes[u])
		}
	}
	wins := 0
	for _, c := range codes {
		wins += c["WIN"]
	}
	if wins != 20 || len(f.shop.Orders()) != 20 {
		t.Errorf("%d WIN answers, %d shop orders, want 20 each", wins, len(f.shop.Orders()))
	}
	f.p.WantStock(t, "fdup", 0, 0, 20)
	t.Logf("dup %v multi %v", codes["dup"], codes["multi"])
}

// README Fair start: "The fleet admission rate is applied at release, not
// at arrival". Held buys spend no admission token while held (none is
// answered BUSY in the window); at release the bucket (burst 5) admits at
// most its burst plus what refills, the rest BUSY with Retry-After.
func TestSpecBFairStartAdmissionRateAtRelease(t *testing.T) {
	t0 := fairT0.Add(10 * time.Minute)
	f := startFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "frate", Stock: 100, Start: t0,
		FairStart: 200 * time.Millisecond, FairStartSpread: 100 * time.Millisecond,
		AdmissionRate: "{ rate: 1, burst: 5 }"}}})
	f.clock.at(t0, 5*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answered atomic.Int64
	codes := map[string]int{}
	f.fire(&wg, "frate", users("fr", 30), func(u string, r e2e.Resp) {
		answered.Add(1)
		mu.Lock()
		defer mu.Unlock()
		codes[r.Code]++
		if r.Code == "BUSY" && r.Header["Retry-After"] == "" {
			t.Errorf("BUSY without Retry-After")
		}
	})
	e2e.Eventually(t, 20*time.Second, "every buy held", func() bool { return f.held()+int(answered.Load()) == 30 })
	time.Sleep(100 * time.Millisecond)
	if a := answered.Load(); a != 0 {
		mu.Lock()
		t.Errorf("%d buys answered while held (%v): the admission rate was applied at arrival", a, codes)
		mu.Unlock()
	}
	for d := 200 * time.Millisecond; d <= 320*time.Millisecond; d += 5 * time.Millisecond {
		f.clock.at(t0, d)
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	wg.Wait()
	el := time.Since(start).Seconds()
	t.Logf("answers %v", codes)
	if max := 5 + int(el+2); codes["WIN"] > max || codes["WIN"] == 0 {
		t.Errorf("%d winners through a fleet admission rate of burst 5, rate 1/s; want 1..%d", codes["WIN"], max)
	}
	if codes["WIN"]+codes["BUSY"] != 30 {
		t.Errorf("answers %v, want only WIN and BUSY", codes)
	}
}

// SPEC §9 Replays in queue mode: a repeat (same user, same X-Request-Id)
// never reserves twice and never answers a state older than the
// reservation's: 202 while queued or at the shop, and once the worker's
// order is confirmed no 202 any more.
func TestSpecBQueueModeRepeatsFollowTheReservation(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "qrep", Stock: 10, Shards: 2, Mode: "queue"}}}, nil)
	release := shop.Hang("alice")
	defer release()
	first := specBBuyID(p.Addr, "qrep", "alice", "rid-q")
	wantCode(t, first, "QUEUED", 202)
	tok := first.Token()
	if tok == "" {
		t.Fatalf("QUEUED without a token: %s", first.Body)
	}
	// Queued, nobody sending yet.
	again := specBBuyID(p.Addr, "qrep", "alice", "rid-q")
	if again.Status != 202 || (again.Token() != "" && again.Token() != tok) {
		t.Fatalf("repeat while queued: %d %s token %s", again.Status, again.Body, again.Token())
	}
	p.StartQueue(t)
	e2e.Eventually(t, 5*time.Second, "the worker's request at the shop", func() bool { return shop.SeenBuy("alice") })
	again = specBBuyID(p.Addr, "qrep", "alice", "rid-q")
	if again.Status != 202 {
		t.Fatalf("repeat while at the shop: %d %s", again.Status, again.Body)
	}
	release()
	e2e.Eventually(t, 5*time.Second, "confirmed", func() bool { return rqPoll(p.Addr, tok).State == store.StateConfirmed })
	late := specBBuyID(p.Addr, "qrep", "alice", "rid-q")
	t.Logf("repeat after the confirm: %d %s", late.Status, late.Body)
	if late.Status == 202 || late.Code == "WIN" && late.Token() != tok {
		t.Fatalf("repeat after the confirm: %d %s, a state older than confirmed or a new reservation", late.Status, late.Body)
	}
	if late.Code != "ALREADY_PURCHASED" && late.Header["X-Seckill-Replayed"] != "true" {
		t.Errorf("repeat after the confirm: %d %s, want 409 ALREADY_PURCHASED or the replay", late.Status, late.Body)
	}
	if n := len(shop.Buys()); n != 1 {
		t.Errorf("the shop got %d buys, want 1", n)
	}
	k := rqWantStock(t, p.Store, p.Activity(t, "qrep"))
	if k.Confirmed != 1 || k.Pending != 0 || k.Remaining != 9 {
		t.Errorf("status %+v, want 9/0/1", k)
	}
}

// README Shadow mode: "When Redis is down the decision is
// STORE_UNAVAILABLE and the buy still goes to the shop". The client gets
// the shop's own answer, never a proxy refusal.
func TestSpecBShadowRedisDownStillForwards(t *testing.T) {
	node := redistest.Start(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: []string{node.Addr}, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "shd", Mode: config.ModeShadow, ShadowHeaders: true, NoVerify: true, SKUs: []config.SKU{{ID: "a", Stock: 5}}},
	}}.Config(t))
	p.Preheat(t, "shd")
	buy := func(user string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/shd/a/buy", Header: [][2]string{{"X-User-Id", user}}})
	}
	if r := buy("before"); r.Status != 200 || r.Header["X-Shop"] != "pass" {
		t.Fatalf("shadow buy with Redis up: %d %s", r.Status, r.Body)
	}
	node.Kill()
	for i := 0; i < 5; i++ {
		r := buy(fmt.Sprintf("down%d", i))
		if r.Err != nil || r.Status != 200 || r.Header["X-Shop"] != "pass" {
			t.Fatalf("shadow buy %d with Redis down: %d %s (err %v), want the shop's own 200", i, r.Status, r.Body, r.Err)
		}
	}
	seen := map[string]int{}
	for _, q := range shop.Requests() {
		seen[q.Header.Get("X-Seckill-Shadow")]++
	}
	if len(shop.Requests()) != 6 || seen["STORE_UNAVAILABLE"] != 5 {
		t.Errorf("shop got %d requests, shadow codes %v; want 6, 5 of them STORE_UNAVAILABLE", len(shop.Requests()), seen)
	}
}

// SPEC §6 with qty > 1 and shards that run dry (stock moved between
// shards): many buyers sending several buys each with qty 1–3 at once over
// two instances, per_user_limit 3, stock 60 on 8 shards. Nobody holds more
// than 3 units, no oversell, and every unit is sold (no fragment refusals).
func TestSpecBQtyStealsPerUserLimitAndExactSellOut(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	const stock = 60
	// A storm of 200 buys on a shared test box: Redis gets a second, not
	// the 200 ms default (a call slower than that is answered 503
	// STORE_UNAVAILABLE, which this test does not expect; CI once saw one
	// proxy's 100 buys answered so while other packages' redis-servers
	// loaded the box). What it checks is limits and the exact sell-out.
	o := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: time.Duration(redistest.TimeoutScale) * time.Second,
		Activities: []e2e.Activity{{ID: "qs", Stock: stock, Shards: 8,
			Path: "/qs/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", PerUserLimit: 3}}}
	p1, p2 := e2e.StartProxy(t, o.Config(t)), e2e.StartProxy(t, o.Config(t))
	p1.Preheat(t, "qs")
	p2.WaitPreheated(t, "qs")
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	minSoldOut := 1 << 30
	for u := 0; u < 50; u++ {
		for c := 0; c < 4; c++ {
			user, qty := fmt.Sprintf("u%d", u), 1+(u+c)%3
			addr := p1.Addr
			if c%2 == 1 {
				addr = p2.Addr
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := e2e.Do(nil, addr, e2e.Req{URI: fmt.Sprintf("/qs/buy?sku=%s&qty=%d", e2e.SKU, qty), Header: [][2]string{{"X-User-Id", user}}})
				mu.Lock()
				codes[res.Code]++
				if res.Code == "SOLD_OUT" && qty < minSoldOut {
					minSoldOut = qty
				}
				mu.Unlock()
				switch res.Code {
				case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING":
				default:
					t.Errorf("%s qty %d: %d %s (err %v)", user, qty, res.Status, res.Body, res.Err)
				}
			}()
		}
	}
	wg.Wait()
	p1.Server.WaitConfirms(context.Background())
	held := map[string]int{}
	total := 0
	for _, ord := range shop.Orders() {
		var q int
		fmt.Sscan(ord.Qty, &q)
		held[ord.User] += q
		total += q
	}
	for u, n := range held {
		if n > 3 {
			t.Errorf("%s holds %d units, per_user_limit 3", u, n)
		}
	}
	k := p2.SKUStatus(t, "qs")
	t.Logf("answers %v; status %+v; %d units in %d orders", codes, k, total, len(shop.Orders()))
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(total) || k.Remaining+k.Confirmed != stock {
		t.Fatalf("status %+v with %d units ordered at the shop", k, total)
	}
	// Stock only falls here, so at every moment at least the final
	// remainder was left: a SOLD_OUT for a qty within it is a fragment
	// refusal (units on some shard, the buyer refused). One kind remains
	// under load (README "Failure behaviour and limits"): a qty-1 buyer who
	// looked while a qty-3 buyer's partial steal had a unit in transit
	// between two shards (taken from the donor, not yet deposited) found
	// every shard dry; the unit lands on the thief's home shard, unused.
	// What must hold is that no unit is stranded: the next buyers get
	// every one of them, and SOLD_OUT comes only when none is left.
	if k.Remaining > 0 && int64(minSoldOut) <= k.Remaining {
		t.Logf("%d units left after the storm while a buy of qty %d was refused SOLD_OUT (a unit in transit): the next buyers must get them", k.Remaining, minSoldOut)
	}
	for i := int64(0); k.Remaining > 0 && i < 2*stock; i++ {
		res := e2e.Do(nil, p1.Addr, e2e.Req{URI: fmt.Sprintf("/qs/buy?sku=%s&qty=1", e2e.SKU), Header: [][2]string{{"X-User-Id", fmt.Sprint("sweep", i)}}})
		before := k.Remaining
		k = p2.SKUStatus(t, "qs")
		if res.Code == "SOLD_OUT" && before > 0 {
			t.Fatalf("after the storm, with %d units left and nobody else buying, a qty-1 buy was refused SOLD_OUT: a stranded unit", before)
		}
	}
	if k.Remaining != 0 || k.Remaining+k.Confirmed+k.Pending != stock {
		t.Fatalf("after the sweep: %+v, want every unit sold", k)
	}
}

// README Protecting the shop + SPEC §9: with upstream.max_inflight bounding
// the shop, a Redis stall still leaves nothing held for a buyer answered
// STORE_UNAVAILABLE (or BUSY), each of them buys again at once, and
// pending falls back to what the shop holds without a reconciler.
func TestSpecBInflightStallHoldsNothing(t *testing.T) {
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamExtra: []string{"max_inflight: 2", "overflow: wait", "overflow_wait: 300ms"},
		Activities:    []e2e.Activity{{ID: "ifs", Stock: 200}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "ifs")
	if r := e2e.Buy(p.Addr, "ifs", "warm-up"); r.Code != "WIN" {
		t.Fatalf("warm-up: %d %s", r.Status, r.Body)
	}
	var mu sync.Mutex
	var refused []string
	codes := map[string]int{}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 15; i++ {
			user := fmt.Sprintf("r%d-u%d", round, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i >= 5 {
					time.Sleep(40 * time.Millisecond) // some arrive after the stall began
				}
				r := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/ifs/" + e2e.SKU + "/buy",
					Header: [][2]string{{"X-User-Id", user}}, Timeout: 5 * time.Second})
				mu.Lock()
				defer mu.Unlock()
				codes[r.Code]++
				switch {
				case (r.Code == "STORE_UNAVAILABLE" || r.Code == "BUSY") && r.Status == 503:
					refused = append(refused, user)
				case r.Code == "WIN":
				default:
					t.Errorf("%s during a stall: %d %s (err %v)", user, r.Status, r.Body, r.Err)
				}
			}()
		}
		time.Sleep(10 * time.Millisecond)
		wait := sleepRedis(t, node, 400*time.Millisecond)
		wg.Wait()
		wait()
	}
	t.Logf("answers during the stalls %v", codes)
	if len(refused) == 0 {
		t.Fatal("no buyer was refused during a stall")
	}
	e2e.Eventually(t, 5*time.Second, "nothing pending after the stalls", func() bool {
		s, err := p.Store.Status(context.Background(), p.Activity(t, "ifs"))
		return err == nil && s.SKUs[0].OK && s.SKUs[0].Pending == 0
	})
	for _, u := range refused {
		if r := e2e.Buy(p.Addr, "ifs", u); r.Code != "WIN" {
			t.Errorf("%s, refused during a stall, buys again: %d %s, want a win", u, r.Status, r.Body)
		}
	}
	orders := shop.Orders()
	k := p.SKUStatus(t, "ifs")
	if !k.OK || k.Pending != 0 || k.Confirmed != int64(len(orders)) || k.Remaining+k.Confirmed != 200 {
		t.Errorf("status %+v with %d shop orders", k, len(orders))
	}
	per := map[string]int{}
	for _, o := range orders {
		if per[o.User]++; per[o.User] > 1 {
			t.Errorf("%s has %d orders", o.User, per[o.User])
		}
	}
}

// The same promise in a crowd: a SKU selling out to many buyers while one
// buyer's request is sent 8 times at once (a double click, a retrying SDK)
// to one instance. Copies that arrive together share one outcome: when one
// copy won, no other copy of it is answered SOLD_OUT, and when one was
// answered SOLD_OUT, none wins. (Before store.ridLocks, 18 of 69 winning
// rounds had a SOLD_OUT copy with 4 shards: a copy whose home shard was
// flagged dry skipped reserve.lua's request-id check and found nothing to
// steal while the first copy's steal carried the last unit. A repeat sent
// after a SOLD_OUT answer is decided afresh: README, Replays.)
func TestSpecBCopiesOfAWinnerInACrowdNeverSoldOut(t *testing.T) {
	const acts = 12
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	var list []e2e.Activity
	for i := 0; i < acts; i++ {
		list = append(list, e2e.Activity{ID: fmt.Sprintf("crowd%d", i), Stock: 10, Shards: 4})
	}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: list}.Config(t))
	for _, a := range list {
		p.Preheat(t, a.ID)
	}
	violations, wonRuns := 0, 0
	for i := 0; i < acts; i++ {
		act := fmt.Sprintf("crowd%d", i)
		var wg sync.WaitGroup
		var mu sync.Mutex
		dup := map[string]int{}
		held, soldAfterWin := false, 0 // in the order the answers came
		start := make(chan struct{})
		for u := 0; u < 30; u++ {
			if u == 12 {
				close(start) // the copies go while the SKU is still selling
			}
			wg.Add(1)
			go func() { defer wg.Done(); e2e.Buy(p.Addr, act, fmt.Sprintf("c%d", u)) }()
			if u%4 == 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start // the 8 copies together, mid-crowd
					res := specBBuyID(p.Addr, act, "dup", "the-one")
					code := res.Code
					if res.Header["X-Seckill-Replayed"] == "true" {
						code = "REPLAY"
					}
					mu.Lock()
					dup[code]++
					switch {
					case code == "WIN" || code == "REPLAY" || code == "PENDING":
						held = true
					case code == "SOLD_OUT" && held:
						soldAfterWin++
					}
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		if dup["WIN"]+dup["REPLAY"]+dup["PENDING"] > 0 {
			wonRuns++
			// Once a copy holds the unit, no later copy says SOLD_OUT
			// ("never a state older than the reservation's"). A copy
			// answered SOLD_OUT before it while units were still moving
			// between shards, then a later one winning, is a repeat of a
			// refused request decided afresh (README, Replays).
			if soldAfterWin > 0 {
				violations++
				t.Errorf("%s: copies of dup's winning request answered %v, %d SOLD_OUT after a win", act, dup, soldAfterWin)
			}
		}
		if dup["WIN"] > 1 {
			t.Errorf("%s: dup won %d times with one request id", act, dup["WIN"])
		}
	}
	t.Logf("%d runs where dup's request won, %d with a SOLD_OUT copy", wonRuns, violations)
}
