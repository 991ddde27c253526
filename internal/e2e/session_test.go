package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// whoamiShop is the shop's whoami endpoint, in-process: cookie "sid"
// values "u:<user>" are signed in as <user>, others answer 401. status,
// when set, is every answer; hold delays each; gate, when set, holds
// each call until closed. It counts calls and the most at once.
type whoamiShop struct {
	srv       *httptest.Server
	calls     atomic.Int64
	cur, peak atomic.Int64
	status    atomic.Int64
	hold      atomic.Int64 // ns
	gate      chan struct{}
}

func startWhoamiShop(t *testing.T, gate chan struct{}) *whoamiShop {
	t.Helper()
	w := &whoamiShop{gate: gate}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.calls.Add(1)
		n := w.cur.Add(1)
		defer w.cur.Add(-1)
		for p := w.peak.Load(); n > p && !w.peak.CompareAndSwap(p, n); p = w.peak.Load() {
		}
		if w.gate != nil {
			<-w.gate
		}
		time.Sleep(time.Duration(w.hold.Load()))
		if s := w.status.Load(); s != 0 {
			rw.WriteHeader(int(s))
			return
		}
		c, err := r.Cookie("sid")
		if err != nil || !strings.HasPrefix(c.Value, "u:") {
			rw.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(rw).Encode(map[string]any{"user_id": strings.TrimPrefix(c.Value, "u:")})
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// sessionFixture is the fixture with identity.user.session pointing at w.
func sessionFixture(t *testing.T, w *whoamiShop, extra string, edit ...func(*e2e.Options)) *fixture {
	return newFixture(t, append(edit, func(o *e2e.Options) {
		if !strings.Contains(extra, "timeout") {
			extra += ", timeout: 200ms"
		}
		o.User = fmt.Sprintf(`{ session: { cookie: sid, url: %q%s } }`, w.srv.URL+"/internal/whoami", extra)
	})...)
}

// manyConns lets a test hold a thousand buys open at once.
var manyConns = &fasthttp.Client{MaxConnsPerHost: 2000}

func buyWithCookie(f *fixture, act, cookie string) e2e.Resp {
	return e2e.Do(manyConns, f.p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy", Header: [][2]string{{"Cookie", cookie}}})
}

// TestSessionThousandBuysOneLookup: 1,000 concurrent buys with one session
// cookie make exactly one whoami call; the shop is told the whoami user.
func TestSessionThousandBuysOneLookup(t *testing.T) {
	w := startWhoamiShop(t, nil)
	w.hold.Store(int64(100 * time.Millisecond)) // the buys pile up behind the first look-up
	// A thousand scripts at once on a shared test machine: give Redis and
	// the look-up time, this test is about how many look-ups are made.
	f := sessionFixture(t, w, ", timeout: 5s", func(o *e2e.Options) { o.RedisTimeout = 3 * time.Second })
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := buyWithCookie(f, actOpen, "theme=dark; sid=u:alice")
			mu.Lock()
			codes[r.Code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got := w.calls.Load(); got != 1 {
		t.Errorf("whoami calls = %d, want 1", got)
	}
	if codes["WIN"] != 1 || codes["WIN"]+codes["PENDING"]+codes["ALREADY_PURCHASED"] != 1000 {
		t.Errorf("answers %v, want one WIN and the rest PENDING or ALREADY_PURCHASED", codes)
	}
	orders := f.shop.Orders()
	if len(orders) != 1 {
		t.Fatalf("shop has %d orders, want 1", len(orders))
	}
	for _, o := range orders {
		if o.User != "alice" || !o.SigOK {
			t.Errorf("shop was told user %q (signature ok %v), want alice", o.User, o.SigOK)
		}
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestSessionUnauthenticated: a session the shop refuses (401 or 403), a
// made-up cookie, or no cookie at all is 401 UNAUTHENTICATED with a
// WWW-Authenticate challenge; nothing is reserved, nothing reaches the shop.
func TestSessionUnauthenticated(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	check := func(name string, r e2e.Resp) {
		t.Helper()
		wantCode(t, r, "UNAUTHENTICATED", 401)
		if h := r.Header["Www-Authenticate"]; !strings.HasPrefix(h, "Cookie ") || !strings.Contains(h, `cookie-name="sid"`) {
			t.Errorf("%s: WWW-Authenticate = %q", name, h)
		}
	}
	check("made-up cookie", buyWithCookie(f, actOpen, "sid=forged"))
	check("no cookie", f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"X-User-Id", "alice"}}}))
	check("empty cookie", buyWithCookie(f, actOpen, "sid="))
	if got := w.calls.Load(); got != 1 {
		t.Errorf("whoami calls = %d, want 1 (a missing cookie is refused locally)", got)
	}
	w.status.Store(403)
	check("403", buyWithCookie(f, actOpen, "sid=u:mallory"))
	w.status.Store(401)
	check("401", buyWithCookie(f, actOpen, "sid=u:trudy"))
	f.p.WantStock(t, actOpen, 100, 0, 0)
	if n := len(f.shop.Buys()); n != 0 {
		t.Errorf("shop saw %d buys", n)
	}
}

// TestSessionAuthUnavailable: whoami failing (5xx), slow (beyond the
// session timeout) or down is 503 AUTH_UNAVAILABLE with Retry-After;
// nothing is reserved and stock adds up.
func TestSessionAuthUnavailable(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	check := func(name string, r e2e.Resp) {
		t.Helper()
		wantCode(t, r, "AUTH_UNAVAILABLE", 503)
		if r.Header["Retry-After"] == "" {
			t.Errorf("%s: no Retry-After", name)
		}
	}
	w.status.Store(500)
	check("500", buyWithCookie(f, actOpen, "sid=u:a"))
	check("500 again, not cached", buyWithCookie(f, actOpen, "sid=u:a"))
	w.status.Store(0)
	w.hold.Store(int64(400 * time.Millisecond))
	check("slow", buyWithCookie(f, actOpen, "sid=u:b"))
	w.hold.Store(0)
	wantWin(t, buyWithCookie(f, actOpen, "sid=u:b")) // the shop is back
	w.srv.Close()
	check("down", buyWithCookie(f, actOpen, "sid=u:c"))
	f.p.WantStock(t, actOpen, 99, 0, 1)
	if n := len(f.shop.Buys()); n != 1 {
		t.Errorf("shop saw %d buys, want 1", n)
	}
}

// TestSessionNoLookupWhenRefusedLocally: a buy the local stages refuse
// (not started, ended, unknown item, paused, sold out from memory) costs no
// whoami call.
func TestSessionNoLookupWhenRefusedLocally(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("sid=u:fresh%d", n) }
	wantCode(t, buyWithCookie(f, actFuture, fresh()), "NOT_STARTED", 403)
	wantCode(t, buyWithCookie(f, actPast, fresh()), "ENDED", 403)
	wantCode(t, f.do(e2e.Req{URI: "/api/seckill/open/nosuch/buy", Header: [][2]string{{"Cookie", fresh()}}}), "UNKNOWN_ITEM", 404)
	if n := w.calls.Load(); n != 0 {
		t.Errorf("whoami calls for locally refused buys = %d, want 0", n)
	}
	// Buys racing the pause's propagation are looked up (the pause is not
	// seen yet); once it is seen, a paused buy costs no call.
	f.setPaused(t, actOpen, true)
	e2e.Eventually(t, 3*time.Second, "pause seen", func() bool { return buyWithCookie(f, actOpen, fresh()).Code == "PAUSED" })
	before := w.calls.Load()
	wantCode(t, buyWithCookie(f, actOpen, fresh()), "PAUSED", 503)
	f.setPaused(t, actOpen, false)
	wantCode(t, buyWithCookie(f, actPast, fresh()), "ENDED", 403)
	if n := w.calls.Load(); n != before {
		t.Errorf("whoami calls for paused and ended buys = %d, want 0", n-before)
	}
	// Sell tiny out, then wait for the proxy's snapshot to know it.
	wantWin(t, buyWithCookie(f, actTiny, "sid=u:winner"))
	e2e.Eventually(t, 3*time.Second, "sold out from memory", func() bool {
		c0 := w.calls.Load()
		r := buyWithCookie(f, actTiny, fresh())
		return r.Code == "SOLD_OUT" && w.calls.Load() == c0
	})
	c0 := w.calls.Load()
	for range 20 {
		wantCode(t, buyWithCookie(f, actTiny, fresh()), "SOLD_OUT", 410)
	}
	if got := w.calls.Load() - c0; got != 0 {
		t.Errorf("whoami calls for sold-out buys = %d, want 0", got)
	}
}

// TestSessionFloodInFlightBound: with the shop's whoami stuck, a flood of
// distinct made-up cookies holds at most max_in_flight look-ups; every
// other buy is answered 503 AUTH_UNAVAILABLE at once, nothing reserved.
func TestSessionFloodInFlightBound(t *testing.T) {
	gate := make(chan struct{})
	w := startWhoamiShop(t, gate)
	f := sessionFixture(t, w, ", max_in_flight: 4, timeout: 3s")
	var wg sync.WaitGroup
	var unavailable, unauth atomic.Int64
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch buyWithCookie(f, actOpen, fmt.Sprintf("sid=forged%d", i)).Code {
			case "AUTH_UNAVAILABLE":
				unavailable.Add(1)
			case "UNAUTHENTICATED":
				unauth.Add(1)
			}
		}()
	}
	e2e.Eventually(t, 5*time.Second, "296 answered at once", func() bool { return unavailable.Load() == 296 })
	close(gate)
	wg.Wait()
	if p := w.peak.Load(); p > 4 {
		t.Errorf("whoami calls at once = %d, want <= 4", p)
	}
	if w.calls.Load() != 4 || unauth.Load() != 4 {
		t.Errorf("whoami calls %d, unauthenticated %d; want 4 and 4", w.calls.Load(), unauth.Load())
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestSessionLookupSpendsPerIPToken: each look-up spends a per_ip token
// before the call, so one address flooding made-up cookies gets as many
// look-ups as its burst and then 429 RATE_LIMITED, with no call.
func TestSessionLookupSpendsPerIPToken(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "", func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 0.001, burst: 4 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	for i := range 4 {
		wantCode(t, buyWithCookie(f, actOpen, fmt.Sprintf("sid=forged%d", i)), "UNAUTHENTICATED", 401)
	}
	for i := range 10 {
		wantCode(t, buyWithCookie(f, actOpen, fmt.Sprintf("sid=more%d", i)), "RATE_LIMITED", 429)
	}
	if got := w.calls.Load(); got != 4 {
		t.Errorf("whoami calls = %d, want 4", got)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}
