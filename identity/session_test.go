package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// whoami is an in-process whoami endpoint: cookie "sid" values "u:<user>"
// are signed in as <user>; "slow:" ones answer after hold; anything else
// is 401. It counts calls and the most it served at once.
type whoami struct {
	srv              *httptest.Server
	calls            atomic.Int64
	cur, peak        atomic.Int64
	status           atomic.Int64 // when set, every call answers it
	hold             time.Duration
	gate             chan struct{} // when set, calls wait for it to close
	lastCookie       atomic.Value
	lastHeader       atomic.Value
	userHeaderAnswer bool
}

func startWhoami(t *testing.T, edit ...func(*whoami)) *whoami {
	t.Helper()
	w := &whoami{}
	for _, e := range edit {
		e(w)
	}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *whoami) serve(rw http.ResponseWriter, r *http.Request) {
	w.calls.Add(1)
	n := w.cur.Add(1)
	defer w.cur.Add(-1)
	for p := w.peak.Load(); n > p && !w.peak.CompareAndSwap(p, n); p = w.peak.Load() {
	}
	w.lastCookie.Store(r.Header.Get("Cookie"))
	w.lastHeader.Store(r.Header.Get("X-Session"))
	if w.gate != nil {
		<-w.gate
	}
	if w.hold > 0 {
		time.Sleep(w.hold)
	}
	if s := w.status.Load(); s != 0 {
		rw.WriteHeader(int(s))
		return
	}
	v := ""
	if c, err := r.Cookie("sid"); err == nil {
		v = c.Value
	} else {
		v = r.Header.Get("X-Session")
	}
	user, ok := strings.CutPrefix(v, "u:")
	if !ok {
		rw.WriteHeader(http.StatusUnauthorized)
		return
	}
	if w.userHeaderAnswer {
		rw.Header().Set("X-User", user)
		return
	}
	user, _ = url.QueryUnescape(user)
	_ = json.NewEncoder(rw).Encode(map[string]string{"user_id": user, "name": "x"})
}

func sessionCfg(whoamiURL string, edit ...func(*config.Session)) config.Session {
	c := config.Session{Cookie: "sid", URL: whoamiURL, UserFrom: config.DefaultSessionUserFrom, TTL: 30 * time.Second,
		NegativeTTL: 2 * time.Second, Timeout: 300 * time.Millisecond, MaxInFlight: 64, CacheSize: 1000}
	for _, e := range edit {
		e(&c)
	}
	return c
}

func newSession(t testing.TB, c config.Session, o SessionOptions) *Session {
	t.Helper()
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s, err := NewSession(c, o)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestSessionOneLookupForConcurrentBuyers(t *testing.T) {
	w := startWhoami(t, func(w *whoami) { w.gate = make(chan struct{}) })
	s := newSession(t, sessionCfg(w.srv.URL, func(c *config.Session) { c.Timeout = 5 * time.Second }), SessionOptions{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if u, err := s.Identify(context.Background(), "u:alice"); err != nil || u != "alice" {
				bad.Add(1)
			}
		}()
	}
	// Let every caller reach the flight before the shop answers.
	for w.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(w.gate)
	wg.Wait()
	if got := w.calls.Load(); got != 1 {
		t.Errorf("whoami calls = %d, want 1", got)
	}
	if bad.Load() != 0 {
		t.Errorf("%d callers were not told alice", bad.Load())
	}
	// Later callers are answered from the cache.
	if u, err, ok := s.Cached("u:alice"); !ok || err != nil || u != "alice" {
		t.Errorf("Cached = %q, %v, %v", u, err, ok)
	}
	if _, _ = s.Identify(context.Background(), "u:alice"); w.calls.Load() != 1 {
		t.Errorf("whoami calls after cache = %d, want 1", w.calls.Load())
	}
}

func TestSessionPositiveCacheTTL(t *testing.T) {
	w := startWhoami(t)
	s := newSession(t, sessionCfg(w.srv.URL, func(c *config.Session) { c.TTL = 300 * time.Millisecond }), SessionOptions{})
	for i := range 3 {
		if u, err := s.Identify(context.Background(), "u:bob"); err != nil || u != "bob" {
			t.Fatalf("Identify %d = %q, %v", i, u, err)
		}
	}
	if got := w.calls.Load(); got != 1 {
		t.Fatalf("whoami calls within ttl = %d, want 1", got)
	}
	time.Sleep(400 * time.Millisecond)
	if _, _, ok := s.Cached("u:bob"); ok {
		t.Error("answer still cached after ttl")
	}
	if u, err := s.Identify(context.Background(), "u:bob"); err != nil || u != "bob" {
		t.Fatalf("Identify after ttl = %q, %v", u, err)
	}
	if got := w.calls.Load(); got != 2 {
		t.Errorf("whoami calls after ttl = %d, want 2", got)
	}
}

// TestSessionNegativeCachedTwoSeconds: a 401 is remembered for the default
// negative_ttl (2 s), then asked again.
func TestSessionNegativeCachedTwoSeconds(t *testing.T) {
	w := startWhoami(t)
	s := newSession(t, sessionCfg(w.srv.URL), SessionOptions{})
	for i := range 3 {
		if _, err := s.Identify(context.Background(), "forged"); !errors.Is(err, ErrSessionRefused) {
			t.Fatalf("Identify %d err = %v, want ErrSessionRefused", i, err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err, ok := s.Cached("forged"); !ok || !errors.Is(err, ErrSessionRefused) {
		t.Errorf("Cached within 2s = %v, %v; want the refusal", err, ok)
	}
	if got := w.calls.Load(); got != 1 {
		t.Fatalf("whoami calls within negative ttl = %d, want 1", got)
	}
	time.Sleep(700 * time.Millisecond)
	_, _ = s.Identify(context.Background(), "forged")
	if got := w.calls.Load(); got != 2 {
		t.Errorf("whoami calls after negative ttl = %d, want 2", got)
	}
}

func TestSessionAnswers(t *testing.T) {
	tests := []struct {
		name     string
		give     string // credential
		status   int    // whoami's status for every call (0: by credential)
		hold     time.Duration
		userHdr  bool
		header   bool // credential in X-Session instead of cookie sid
		wantUser string
		wantErr  error
	}{
		{name: "signed in", give: "u:carol", wantUser: "carol"},
		{name: "user from header", give: "u:dave", userHdr: true, wantUser: "dave"},
		{name: "credential in a header", give: "u:erin", header: true, wantUser: "erin"},
		{name: "401", give: "nobody", wantErr: ErrSessionRefused},
		{name: "403", give: "u:x", status: 403, wantErr: ErrSessionRefused},
		{name: "200 without a user", give: "u:", wantErr: ErrSessionRefused},
		{name: "user id with a control char", give: "u:a%01b", wantErr: ErrSessionRefused},
		{name: "user id with a bar", give: "u:a|b", wantErr: ErrSessionRefused},
		{name: "500", give: "u:x", status: 500, wantErr: ErrSessionUnavailable},
		{name: "502", give: "u:x", status: 502, wantErr: ErrSessionUnavailable},
		{name: "redirect to a login page", give: "u:x", status: 302, wantErr: ErrSessionUnavailable},
		{name: "404", give: "u:x", status: 404, wantErr: ErrSessionUnavailable},
		{name: "slow", give: "u:x", hold: 500 * time.Millisecond, wantErr: ErrSessionUnavailable},
		{name: "empty credential", give: "", wantErr: ErrSessionRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWhoami(t, func(w *whoami) { w.hold, w.userHeaderAnswer = tt.hold, tt.userHdr })
			w.status.Store(int64(tt.status))
			c := sessionCfg(w.srv.URL, func(c *config.Session) {
				c.Timeout = 200 * time.Millisecond
				if tt.userHdr {
					c.UserFrom = "header:X-User"
				}
				if tt.header {
					c.Cookie, c.Header = "", "X-Session"
				}
			})
			s := newSession(t, c, SessionOptions{Check: checkID})
			// The credential goes out as a cookie value or header value:
			// the whoami test server reads "u:..." from either.
			u, err := s.Identify(context.Background(), tt.give)
			if u != tt.wantUser || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("Identify = %q, %v; want %q, %v", u, err, tt.wantUser, tt.wantErr)
			}
			if tt.header && w.lastHeader.Load() != tt.give {
				t.Errorf("whoami got X-Session %q", w.lastHeader.Load())
			}
			if !tt.header && tt.give != "" && w.lastCookie.Load() != "sid="+tt.give {
				t.Errorf("whoami got Cookie %q", w.lastCookie.Load())
			}
		})
	}
}

func TestSessionUnreachable(t *testing.T) {
	w := startWhoami(t)
	addr := w.srv.URL
	w.srv.Close()
	s := newSession(t, sessionCfg(addr), SessionOptions{})
	if _, err := s.Identify(context.Background(), "u:a"); !errors.Is(err, ErrSessionUnavailable) {
		t.Errorf("err = %v, want ErrSessionUnavailable", err)
	}
	// Not cached: the next buy asks again.
	if _, _, ok := s.Cached("u:a"); ok {
		t.Error("an unavailable answer was cached")
	}
}

// TestSessionInFlightBound: with the shop stuck, at most max_in_flight
// look-ups are in flight; every other buyer is told at once.
func TestSessionInFlightBound(t *testing.T) {
	w := startWhoami(t, func(w *whoami) { w.gate = make(chan struct{}) })
	s := newSession(t, sessionCfg(w.srv.URL, func(c *config.Session) { c.MaxInFlight, c.Timeout = 4, 5*time.Second }), SessionOptions{})
	var wg sync.WaitGroup
	var unavailable atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Identify(context.Background(), fmt.Sprintf("u:user%d", i)); errors.Is(err, ErrSessionUnavailable) {
				unavailable.Add(1)
			}
		}()
	}
	Eventually(t, 5*time.Second, func() bool { return unavailable.Load() == 196 })
	close(w.gate)
	wg.Wait()
	if got := w.peak.Load(); got > 4 {
		t.Errorf("look-ups in flight at once = %d, want <= 4", got)
	}
	if got := w.calls.Load(); got != 4 {
		t.Errorf("whoami calls = %d, want 4", got)
	}
}

// refusingTransport answers every whoami call 401 in-process, counting the
// most calls at once: a flood test needs 100,000 calls, not sockets.
type refusingTransport struct{ cur, peak, calls atomic.Int64 }

func (rt *refusingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.calls.Add(1)
	n := rt.cur.Add(1)
	defer rt.cur.Add(-1)
	for p := rt.peak.Load(); n > p && !rt.peak.CompareAndSwap(p, n); p = rt.peak.Load() {
	}
	runtime.Gosched()
	return &http.Response{StatusCode: 401, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}, Request: r}, nil
}

// TestSessionFloodMemoryBound is README's bound: 100,000 distinct made-up
// cookies grow the heap by less than 16 MiB with the default cache_size,
// and look-ups in flight never exceed max_in_flight.
func TestSessionFloodMemoryBound(t *testing.T) {
	rt := &refusingTransport{}
	c := sessionCfg("http://shop.invalid/whoami", func(c *config.Session) {
		c.CacheSize, c.MaxInFlight = config.DefaultSessionCacheSize, 16
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newSession(t, c, SessionOptions{Transport: rt})
	// As many workers as slots: every cookie is looked up and its refusal
	// offered to the cache, the worst case for memory.
	const n, workers = 100_000, 16
	var wg sync.WaitGroup
	var refused, unavailable atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				_, err := s.Identify(context.Background(), fmt.Sprintf("forged-%08d-%s", i, strings.Repeat("x", 32)))
				switch {
				case errors.Is(err, ErrSessionRefused):
					refused.Add(1)
				case errors.Is(err, ErrSessionUnavailable):
					unavailable.Add(1)
				default:
					t.Errorf("Identify err = %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap growth %.1f MiB; %d refused, %d unavailable, %d calls, peak %d in flight",
		float64(growth)/(1<<20), refused.Load(), unavailable.Load(), rt.calls.Load(), rt.peak.Load())
	if growth > 16<<20 {
		t.Errorf("heap grew by %.1f MiB, want < 16 MiB", float64(growth)/(1<<20))
	}
	if p := rt.peak.Load(); p > 16 {
		t.Errorf("look-ups in flight at once = %d, want <= 16", p)
	}
	if refused.Load()+unavailable.Load() != n || rt.calls.Load() > n {
		t.Errorf("refused %d + unavailable %d != %d, calls %d", refused.Load(), unavailable.Load(), n, rt.calls.Load())
	}
	runtime.KeepAlive(s)
}

// checkID is the proxy's id check in small: 1..128 bytes, no control
// characters, no '|'.
func checkID(u string) (string, bool) {
	if len(u) == 0 || len(u) > 128 || strings.ContainsAny(u, "|\x7f") {
		return "", false
	}
	for _, c := range []byte(u) {
		if c < 0x20 {
			return "", false
		}
	}
	return u, true
}

// Eventually polls cond every 5 ms until it holds, failing the test after within.
func Eventually(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
