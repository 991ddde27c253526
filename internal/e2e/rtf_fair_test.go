package e2e_test

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRTFFairStartKeyRotationAtTheOpeningIsNoSecondTicket: the signing key
// is rotated (README, step 3: the new key moved first, SIGHUP) while a
// fair-start window is open. Each buyer's moment was a keyed hash with the
// signing secret as key: a buyer held before the reload sends a copy after
// it and holds a second, independent moment (and so does one who sends a
// copy to each instance of a fleet half way through a rolling reload), the
// earlier of two winning. Every copy of a buyer's buy must be let on in
// one moment, across the reload: both copies answered in one clock step.
func TestRTFFairStartKeyRotationAtTheOpeningIsNoSecondTicket(t *testing.T) {
	os.Setenv("SECKILL_RTF_KEY_OLD", "rtf-old-secret")
	os.Setenv("SECKILL_RTF_KEY_NEW", "rtf-new-secret")
	const (
		oldFirst = `[{id: "2026-11", secret_env: SECKILL_RTF_KEY_OLD}, {id: "2026-12", secret_env: SECKILL_RTF_KEY_NEW}]`
		newFirst = `[{id: "2026-12", secret_env: SECKILL_RTF_KEY_NEW}, {id: "2026-11", secret_env: SECKILL_RTF_KEY_OLD}]`
	)
	rtfOneMomentAcrossReload(t, 600*time.Millisecond, func(o *e2e.Options) { o.SigningKeys = oldFirst },
		func(o *e2e.Options) { o.SigningKeys = newFirst }, "key rotation")
}

// TestRTFFairStartSpreadLengthenedAtTheOpeningIsNoSecondTicket: README's
// advice when Redis cannot take the held buys' pace is to lengthen
// fair_start_spread; done by a reload inside the window, the buys held
// then kept the moments of the old spread (so the reload metered none of
// them), and a copy sent after it drew the buyer a moment of the new one:
// two moments per buyer, and a buyer arriving after the reload ranked
// behind held ones by arrival. Every held buy must follow the spread the
// running config says.
func TestRTFFairStartSpreadLengthenedAtTheOpeningIsNoSecondTicket(t *testing.T) {
	rtfOneMomentAcrossReload(t, 200*time.Millisecond, func(*e2e.Options) {},
		func(o *e2e.Options) { o.Activities[0].FairStartSpread = 600 * time.Millisecond }, "spread lengthened")
}

// rtfOneMomentAcrossReload holds one buy of each of 20 buyers in a
// fair-start window (fair_start 100 ms, spread as given) on a fake clock,
// reloads with edit, sends each buyer a second copy, walks the clock over
// the spread and fails for each buyer whose copies were let on more than a
// step apart.
func rtfOneMomentAcrossReload(t *testing.T, spread time.Duration, base, edit func(*e2e.Options), what string) {
	const (
		act    = "rtfrot"
		buyers = 20
		step   = 10 * time.Millisecond
		fair   = 100 * time.Millisecond
	)
	t0 := time.Now().Add(time.Hour).Truncate(time.Second)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second,
		Activities: []e2e.Activity{{ID: act, Stock: 100, Shards: 1, Start: t0, End: t0.Add(time.Hour),
			FairStart: fair, FairStartSpread: spread}}}
	base(&opts)
	cfg := opts.Config(t)
	clock := &fakeClock{}
	clock.at(t0, 10*time.Millisecond)
	p := e2e.StartProxyClock(t, cfg, clock.now)
	p.Preheat(t, act)
	c := &fasthttp.Client{MaxConnsPerHost: 256}

	var mu sync.Mutex
	answeredAt := map[string][]int{} // user -> clock step of each copy's answer
	codes := map[string][]string{}
	curStep := 0
	var wg sync.WaitGroup
	send := func(u string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := e2e.Do(c, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
				Header: [][2]string{{"X-User-Id", u}}, Timeout: 60 * time.Second})
			mu.Lock()
			answeredAt[u] = append(answeredAt[u], curStep)
			codes[u] = append(codes[u], res.Code)
			mu.Unlock()
		}()
	}
	us := users("rtfrot", buyers)
	held := func() int { return int(p.Gauge(p.Metrics.FairHeld)) }
	for _, u := range us {
		send(u)
	}
	e2e.Eventually(t, 10*time.Second, "first copies held", func() bool { return held() == buyers })

	// The reload, at the opening.
	edit(&opts)
	next := opts.Config(t)
	next.Listen, next.Admin.Listen = p.Cfg.Listen, p.Cfg.Admin.Listen
	if err := p.Server.Apply(next); err != nil {
		t.Fatalf("reload: %v", err)
	}
	p.Pipeline.Apply(next) // as serve's reload does
	clock.at(t0, 20*time.Millisecond)
	for _, u := range us {
		send(u)
	}
	e2e.Eventually(t, 10*time.Second, "second copies held", func() bool { return held() == 2*buyers })

	last := spread
	if s := next.Activity(act).FairStartSpread; s > last {
		last = s
	}
	for d := fair; d <= fair+last+step; d += step {
		mu.Lock()
		curStep = int((d - fair) / step)
		mu.Unlock()
		clock.at(t0, d)
		time.Sleep(40 * time.Millisecond)
	}
	wg.Wait()
	apart := 0
	for _, u := range us {
		at := answeredAt[u]
		if len(at) != 2 {
			t.Fatalf("%s: %d answers", u, len(at))
		}
		if diff := at[0] - at[1]; diff > 1 || diff < -1 {
			apart++
			t.Logf("%s: copies let on %d ms apart (%v)", u, diff*int(step/time.Millisecond), codes[u])
		}
	}
	if apart > 0 {
		t.Errorf("%d of %d buyers' two copies were let on at different moments across a reload at the opening (%s): two tickets each", apart, buyers, what)
	}
}

// TestRTFFairStartTwoInstancesMidRotationOneMoment: two instances half way
// through a rolling key rotation (one signs with the new key, one still
// with the old) during a fair-start window; each buyer sends a copy to
// each. Both copies must be let on in one moment (the preheat's seed keys
// the moments, not the signing secret).
func TestRTFFairStartTwoInstancesMidRotationOneMoment(t *testing.T) {
	os.Setenv("SECKILL_RTF_KEY_OLD", "rtf-old-secret")
	os.Setenv("SECKILL_RTF_KEY_NEW", "rtf-new-secret")
	const (
		oldFirst = `[{id: "2026-11", secret_env: SECKILL_RTF_KEY_OLD}, {id: "2026-12", secret_env: SECKILL_RTF_KEY_NEW}]`
		newFirst = `[{id: "2026-12", secret_env: SECKILL_RTF_KEY_NEW}, {id: "2026-11", secret_env: SECKILL_RTF_KEY_OLD}]`
		act      = "rtf2i"
		buyers   = 20
		step     = 10 * time.Millisecond
		fair     = 100 * time.Millisecond
		spread   = 600 * time.Millisecond
	)
	t0 := time.Now().Add(time.Hour).Truncate(time.Second)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, RedisTimeout: 2 * time.Second, SigningKeys: oldFirst,
		Activities: []e2e.Activity{{ID: act, Stock: 100, Shards: 1, Start: t0, End: t0.Add(time.Hour),
			FairStart: fair, FairStartSpread: spread}}}
	clock := &fakeClock{}
	clock.at(t0, 10*time.Millisecond)
	pa := e2e.StartProxyClock(t, opts.Config(t), clock.now)
	opts.SigningKeys = newFirst
	pb := e2e.StartProxyClock(t, opts.Config(t), clock.now)
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)
	c := &fasthttp.Client{MaxConnsPerHost: 256}
	var mu sync.Mutex
	answeredAt := map[string][]int{}
	curStep := 0
	var wg sync.WaitGroup
	for _, u := range users("rtf2i", buyers) {
		for _, p := range []*e2e.Proxy{pa, pb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e2e.Do(c, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
					Header: [][2]string{{"X-User-Id", u}}, Timeout: 60 * time.Second})
				mu.Lock()
				answeredAt[u] = append(answeredAt[u], curStep)
				mu.Unlock()
			}()
		}
	}
	e2e.Eventually(t, 10*time.Second, "copies held", func() bool {
		return int(pa.Gauge(pa.Metrics.FairHeld)) == buyers && int(pb.Gauge(pb.Metrics.FairHeld)) == buyers
	})
	for d := fair; d <= fair+spread+step; d += step {
		mu.Lock()
		curStep = int((d - fair) / step)
		mu.Unlock()
		clock.at(t0, d)
		time.Sleep(40 * time.Millisecond)
	}
	wg.Wait()
	apart := 0
	for u, at := range answeredAt {
		if len(at) != 2 {
			t.Fatalf("%s: %d answers", u, len(at))
		}
		if diff := at[0] - at[1]; diff > 1 || diff < -1 {
			apart++
		}
	}
	if apart > 0 {
		t.Errorf("%d of %d buyers' copies on two instances mid-rotation were let on at different moments", apart, buyers)
	}
}
