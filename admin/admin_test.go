package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const (
	token    = "adm-t0ken"
	actOpen  = "open"  // running, stock 10
	actElig  = "elig"  // running, eligible_only, stock 10
	actLater = "later" // starts in an hour, stock 5
	stock    = 10
)

// fixture is one real Redis, a recording shop, a proxy wired as serve
// wires it (admission refresher running, so blocklists and eligibility are
// obeyed) and the admin server on an httptest listener, sharing the proxy's
// metrics, store and config as in serve.
type fixture struct {
	redis *e2e.Redis
	shop  *e2e.Shop
	// direct reads Redis without client-side caching, so a check right
	// after a change sees it (the fixture's own store may still hold the
	// cached value until Redis' invalidation arrives).
	direct *store.Store
	opts   e2e.Options
	cfg    atomic.Pointer[config.Config]
	st     *store.Store
	m      *metrics.Metrics
	proxy  string
	adm    *httptest.Server
	srv    *proxy.Server
}

func newFixture(t *testing.T, adminToken string) *fixture {
	t.Helper()
	return newFixtureWith(t, adminToken, []e2e.Activity{
		{ID: actOpen, Stock: stock},
		{ID: actElig, Stock: stock, EligibleOnly: true},
		{ID: actLater, Stock: 5, Start: time.Now().Add(time.Hour), End: time.Now().Add(2 * time.Hour)},
	})
}

// newFixtureWith is newFixture with other activities.
func newFixtureWith(t *testing.T, adminToken string, acts []e2e.Activity) *fixture {
	t.Helper()
	return newFixtureOpts(t, adminToken, acts, nil)
}

// newFixtureOpts is newFixtureWith whose options edit changes before the
// config is written.
func newFixtureOpts(t *testing.T, adminToken string, acts []e2e.Activity, edit func(*e2e.Options)) *fixture {
	t.Helper()
	f := &fixture{redis: e2e.StartRedis(t), shop: e2e.StartShop(t)}
	f.opts = e2e.Options{Redis: f.redis.Addrs, ShopURL: f.shop.URL, Activities: acts}
	if edit != nil {
		edit(&f.opts)
	}
	cfg := f.opts.Config(t)
	f.cfg.Store(cfg)
	noCache := cfg.Redis
	noCache.ClientCache = false
	direct, err := store.OpenNow(noCache, zap.NewNop())
	if err != nil {
		t.Fatalf("store.OpenNow: %v", err)
	}
	f.direct = direct
	t.Cleanup(direct.Close)
	current := func() *config.Config { return f.cfg.Load() }

	log := zap.NewNop()
	st, err := store.Open(cfg.Redis, log)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	f.st = st
	f.m = metrics.New()
	pipe := admission.New(st, f.m, log, time.Now)
	pipe.Apply(cfg)
	srv, err := proxy.New(cfg, pipe, st, f.m, log)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f.proxy, f.srv = ln.Addr().String(), srv
	ctx, cancel := context.WithCancel(context.Background())
	served, refreshed := make(chan struct{}), make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	go func() { defer close(refreshed); pipe.Run(ctx) }()

	adm := admin.New(f.m, st, adminToken, log)
	rec := reservation.NewReconciler(st, f.m, log)
	// As serve's registerAdminAPI.
	admin.MountAll(adm, st, rec, f.m, current)
	f.adm = httptest.NewServer(adm)

	t.Cleanup(func() {
		f.adm.Close()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		<-served
		<-refreshed
		pipe.Close()
		st.Close()
	})
	return f
}

// call sends one admin request; auth is the whole Authorization header
// ("" sends none).
func (f *fixture) call(t *testing.T, method, path, auth string) (int, []byte) {
	t.Helper()
	code, _, body := f.callH(t, method, path, auth)
	return code, body
}

func (f *fixture) callH(t *testing.T, method, path, auth string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.adm.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.adm.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// admin sends an authorized admin call and wants status back, as JSON.
func (f *fixture) admin(t *testing.T, method, path string, want int, out any) []byte {
	t.Helper()
	code, body := f.call(t, method, path, "Bearer "+token)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, body, want)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, body)
		}
	}
	return body
}

func (f *fixture) flags(t *testing.T, act string) store.Flags {
	t.Helper()
	fl, err := f.direct.Flags(context.Background(), act)
	if err != nil {
		t.Fatalf("flags %s: %v", act, err)
	}
	return fl
}

func (f *fixture) sku(t *testing.T, act string) store.SKUStatus {
	t.Helper()
	s, err := f.st.Status(context.Background(), f.cfg.Load().Activity(act))
	if err != nil || len(s.SKUs) != 1 {
		t.Fatalf("status %s: %+v %v", act, s, err)
	}
	return s.SKUs[0]
}

// buyUntil buys as user (a fresh user per try when user ends in "*")
// until the answer's code is want.
func (f *fixture) buyUntil(t *testing.T, act, user, want string) e2e.Resp {
	t.Helper()
	var r e2e.Resp
	n := 0
	e2e.Eventually(t, 3*time.Second, act+" buy by "+user+" answered "+want, func() bool {
		u := user
		if p, ok := strings.CutSuffix(user, "*"); ok {
			n++
			u = p + strings.Repeat("x", n)
		}
		r = e2e.Buy(f.proxy, act, u)
		return r.Code == want
	})
	if r.Code == "WIN" {
		// A winner's confirm runs while its answer is written (issue 10):
		// the checks that follow read the store, so let it land.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.srv.WaitConfirms(ctx); err != nil {
			t.Fatalf("confirms: %v", err)
		}
	}
	return r
}

var adminCalls = []struct{ method, path string }{
	{"GET", "/admin/status"},
	{"POST", "/admin/preheat?activity=" + actOpen},
	{"POST", "/admin/pause?activity=" + actOpen},
	{"POST", "/admin/resume?activity=" + actOpen},
	{"POST", "/admin/release?token=open.sku1.0.AAAAAAAAAAAAAAAAAAAAAA"},
	{"POST", "/admin/reconcile"},
	{"POST", "/admin/blocklist/add?kind=user&value=mallory"},
	{"POST", "/admin/blocklist/remove?kind=user&value=mallory"},
	{"GET", "/admin/blocklist?kind=user"},
	{"POST", "/admin/eligible/add?activity=" + actElig + "&user=alice"},
	{"POST", "/admin/eligible/remove?activity=" + actElig + "&user=alice"},
}

// Every /admin/ call: 401 without the right bearer token, and nothing
// changes in Redis.
func TestAdminNeedsToken(t *testing.T) {
	f := newFixture(t, token)
	for _, c := range adminCalls {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer "} {
			code, h, body := f.callH(t, c.method, c.path, auth)
			var e map[string]string
			if code != http.StatusUnauthorized || h.Get("Content-Type") != "application/json" || h.Get("WWW-Authenticate") != "Bearer" ||
				json.Unmarshal(body, &e) != nil || !strings.Contains(e["error"], "bearer token") {
				t.Errorf("%s %s with Authorization %q: %d %s %s, want 401 with a JSON error", c.method, c.path, auth, code, h.Get("Content-Type"), body)
			}
		}
	}
	if fl := f.flags(t, actOpen); fl.Ready || fl.Paused {
		t.Errorf("refused calls changed flags: %+v", fl)
	}
	for _, kind := range store.BlockKinds {
		if m, err := f.st.Blocklist(context.Background(), kind, time.Now()); err != nil || len(m) != 0 {
			t.Errorf("refused calls changed blocklist %s: %v %v", kind, m, err)
		}
	}
	if m, err := f.st.Eligible(context.Background(), actElig, time.Now()); err != nil || len(m) != 0 {
		t.Errorf("refused calls changed eligibility: %v %v", m, err)
	}
}

// With no admin token configured the admin API is off (403), not open.
func TestAdminDisabledWithoutToken(t *testing.T) {
	f := newFixture(t, "")
	for _, c := range adminCalls {
		for _, auth := range []string{"", "Bearer ", "Bearer " + token} {
			code, h, body := f.callH(t, c.method, c.path, auth)
			var e map[string]string
			if code != http.StatusForbidden || h.Get("Content-Type") != "application/json" ||
				json.Unmarshal(body, &e) != nil || !strings.Contains(e["error"], "no admin token") {
				t.Errorf("%s %s with Authorization %q: %d %s %s, want 403 with a JSON error", c.method, c.path, auth, code, h.Get("Content-Type"), body)
			}
		}
	}
	if fl := f.flags(t, actOpen); fl.Ready || fl.Paused {
		t.Errorf("disabled API changed flags: %+v", fl)
	}
	// The read-only pages stay up.
	if code, _ := f.call(t, "GET", "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
}

func TestAdminPreheat(t *testing.T) {
	f := newFixture(t, token)
	var out map[string]string
	f.admin(t, "POST", "/admin/preheat", http.StatusBadRequest, nil)
	f.admin(t, "POST", "/admin/preheat?activity=nope", http.StatusNotFound, nil)

	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, &out)
	if out[actOpen] != store.PreheatCreated.String() || len(out) != 1 {
		t.Fatalf("first preheat: %v", out)
	}
	if fl := f.flags(t, actOpen); !fl.Ready || fl.Shards != 4 {
		t.Fatalf("flags after preheat: %+v", fl)
	}
	if k := f.sku(t, actOpen); !k.OK || k.Initial != stock || k.Remaining != stock {
		t.Fatalf("status after preheat: %+v", k)
	}
	out = nil
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, &out)
	if out[actOpen] != store.PreheatUnchanged.String() {
		t.Fatalf("second preheat: %v", out)
	}
	wantWin(t, f.buyUntil(t, actOpen, "early", "WIN"))

	// The config now says 20: inside the window that is refused without force.
	next := f.opts
	next.Activities = append([]e2e.Activity(nil), f.opts.Activities...)
	next.Activities[0].Stock = 20
	f.cfg.Store(next.Config(t))
	out = nil
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusConflict, &out)
	if !strings.HasPrefix(out[actOpen], "refused") {
		t.Fatalf("changed stock without force: %v", out)
	}
	if k := f.sku(t, actOpen); !k.OK || k.Initial != stock || k.Remaining != stock-1 || k.Confirmed != 1 {
		t.Fatalf("refused preheat changed stock: %+v", k)
	}
	out = nil
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen+"&force=1", http.StatusOK, &out)
	if out[actOpen] != store.PreheatOverwritten.String() {
		t.Fatalf("forced preheat: %v", out)
	}
	if k := f.sku(t, actOpen); !k.OK || k.Initial != 20 || k.Remaining != 20 || k.Confirmed != 0 {
		t.Fatalf("status after forced preheat: %+v", k)
	}

	// ?all=1 preheats every activity: the upcoming one is created, the
	// running one is unchanged.
	out = nil
	f.admin(t, "POST", "/admin/preheat?all=1", http.StatusOK, &out)
	if out[actOpen] != store.PreheatUnchanged.String() || out[actLater] != store.PreheatCreated.String() ||
		out[actElig] != store.PreheatCreated.String() {
		t.Fatalf("preheat all: %v", out)
	}
}

func TestAdminPauseResume(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?all=1", http.StatusOK, nil)
	f.admin(t, "POST", "/admin/pause", http.StatusBadRequest, nil)
	f.admin(t, "POST", "/admin/pause?activity=nope", http.StatusNotFound, nil)
	f.admin(t, "POST", "/admin/resume?activity=nope", http.StatusNotFound, nil)

	var out struct {
		Paused     bool `json:"paused"`
		Activities int  `json:"activities"`
	}
	f.admin(t, "POST", "/admin/pause?activity="+actOpen, http.StatusOK, &out)
	if !out.Paused || out.Activities != 1 {
		t.Fatalf("pause: %+v", out)
	}
	if !f.flags(t, actOpen).Paused || f.flags(t, actLater).Paused {
		t.Fatalf("pause of %s: flags %+v / %+v", actOpen, f.flags(t, actOpen), f.flags(t, actLater))
	}
	wantCode(t, f.buyUntil(t, actOpen, "p*", "PAUSED"), "PAUSED", http.StatusServiceUnavailable)

	f.admin(t, "POST", "/admin/resume?activity="+actOpen, http.StatusOK, &out)
	if out.Paused || out.Activities != 1 || f.flags(t, actOpen).Paused {
		t.Fatalf("resume: %+v, flags %+v", out, f.flags(t, actOpen))
	}
	wantWin(t, f.buyUntil(t, actOpen, "r*", "WIN"))

	f.admin(t, "POST", "/admin/pause?all=1", http.StatusOK, &out)
	if !out.Paused || out.Activities != 3 {
		t.Fatalf("pause all: %+v", out)
	}
	for _, a := range []string{actOpen, actElig, actLater} {
		if !f.flags(t, a).Paused {
			t.Errorf("pause all: %s not paused", a)
		}
	}
	f.admin(t, "POST", "/admin/resume?all=1", http.StatusOK, &out)
	for _, a := range []string{actOpen, actElig, actLater} {
		if f.flags(t, a).Paused {
			t.Errorf("resume all: %s still paused", a)
		}
	}
}

// TestAdminDurableWritesNotOnReplicas: with durable winners a pause and a
// block-list change the master's replica did not take are answered 503,
// saying so (decisions §64, §65), and land (200) once the replica is back.
func TestAdminDurableWritesNotOnReplicas(t *testing.T) {
	f := newFixtureOpts(t, token, []e2e.Activity{{ID: actOpen, Stock: stock}}, func(o *e2e.Options) {
		o.RedisExtra = []string{"durable_winners: { replicas: 1, timeout: 100ms }"}
	})
	r := redistest.StartReplica(t, f.redis.Node)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	r.Pause(t)
	if _, err := f.redis.Node.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/admin/pause?activity=" + actOpen, "/admin/blocklist/add?kind=user&value=mallory",
		"/admin/blocklist/remove?kind=ip&value=203.0.113.9", "/admin/eligible/add?activity=" + actOpen + "&user=vip"} {
		if body := f.admin(t, "POST", path, http.StatusServiceUnavailable, nil); !strings.Contains(string(body), "not acknowledged by its replicas") {
			t.Errorf("%s with the replica cut off: %s", path, body)
		}
	}
	r.Resume(t)
	e2e.Eventually(t, 10*time.Second, "the replica linked again", func() bool {
		return r.Info("replication", "master_link_status") == "up"
	})
	f.admin(t, "POST", "/admin/blocklist/add?kind=user&value=mallory", http.StatusOK, nil)
	f.admin(t, "POST", "/admin/pause?activity="+actOpen, http.StatusOK, nil)
}

func TestAdminRelease(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	r := f.buyUntil(t, actOpen, "buyer", "WIN")
	tok := r.Token()
	if k := f.sku(t, actOpen); k.Confirmed != 1 || k.Remaining != stock-1 {
		t.Fatalf("after the buy: %+v", k)
	}
	tests := []struct {
		name   string
		query  string
		status int
		result string
	}{
		{"release", "token=" + url.QueryEscape(tok) + "&reason=refund", http.StatusOK, "released"},
		{"again", "token=" + url.QueryEscape(tok), http.StatusOK, "already released"},
		{"unknown", "token=open.sku1.1.AAAAAAAAAAAAAAAAAAAAAA", http.StatusNotFound, ""},
		{"shard out of range", "token=open.sku1.9.AAAAAAAAAAAAAAAAAAAAAA", http.StatusNotFound, ""},
		{"activity not configured", "token=gone.sku1.0.AAAAAAAAAAAAAAAAAAAAAA", http.StatusNotFound, ""},
		{"malformed", "token=not-a-token", http.StatusBadRequest, ""},
		{"none", "", http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out map[string]string
			f.admin(t, "POST", "/admin/release?"+tt.query, tt.status, &out)
			if tt.result != "" && (out["result"] != tt.result || out["token"] != tok) {
				t.Fatalf("got %v, want result %q", out, tt.result)
			}
			if tt.result == "" && out["error"] == "" {
				t.Fatalf("got %v, want an error", out)
			}
		})
	}
	if k := f.sku(t, actOpen); !k.OK || k.Remaining != stock || k.Confirmed != 0 || k.Released != 1 {
		t.Fatalf("after release: %+v", k)
	}
	pt, _ := store.ParseToken(tok)
	if res, ok, err := f.st.Lookup(context.Background(), pt, 4); err != nil || !ok || res.Reason != "refund" {
		t.Fatalf("reservation after release: %+v %v %v", res, ok, err)
	}
}

func TestAdminReconcile(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	wantWin(t, f.buyUntil(t, actOpen, "buyer", "WIN"))
	f.admin(t, "POST", "/admin/reconcile?activity=nope", http.StatusNotFound, nil)

	var rep reservation.Report
	f.admin(t, "POST", "/admin/reconcile?activity="+actOpen, http.StatusOK, &rep)
	if rep.Repair || len(rep.Activities) != 1 || rep.Activities[0].ID != actOpen || rep.Alerting() {
		t.Fatalf("report: %+v", rep)
	}
	if len(rep.Activities[0].SKUs) != 1 || rep.Activities[0].SKUs[0].Confirmed != 1 {
		t.Fatalf("report SKUs: %+v", rep.Activities[0].SKUs)
	}
	rep = reservation.Report{}
	f.admin(t, "POST", "/admin/reconcile?repair=1", http.StatusOK, &rep)
	if !rep.Repair || len(rep.Activities) != 3 {
		t.Fatalf("repair report: %+v", rep)
	}
	if k := f.sku(t, actOpen); !k.OK || k.Confirmed != 1 || k.Remaining != stock-1 {
		t.Fatalf("after reconcile: %+v", k)
	}
}

// The status document is SPEC §2's `status --json`.
func TestAdminStatus(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	wantWin(t, f.buyUntil(t, actOpen, "buyer", "WIN"))
	f.admin(t, "GET", "/admin/status?activity=nope", http.StatusNotFound, nil)

	var doc map[string]any
	f.admin(t, "GET", "/admin/status?activity="+actOpen, http.StatusOK, &doc)
	acts, _ := doc["activities"].([]any)
	if len(acts) != 1 {
		t.Fatalf("status: %v", doc)
	}
	a, _ := acts[0].(map[string]any)
	skus, _ := a["skus"].([]any)
	if a["id"] != actOpen || len(skus) != 1 {
		t.Fatalf("status activity: %v", a)
	}
	k, _ := skus[0].(map[string]any)
	want := map[string]any{"id": e2e.SKU, "initial": 10.0, "remaining": 9.0, "pending": 0.0, "confirmed": 1.0, "released": 0.0, "ok": true}
	for name, v := range want {
		if k[name] != v {
			t.Errorf("status sku %s = %v (%T), want %v", name, k[name], k[name], v)
		}
	}

	var all struct {
		Activities []store.ActivityStatus `json:"activities"`
	}
	f.admin(t, "GET", "/admin/status", http.StatusOK, &all)
	if len(all.Activities) != 3 {
		t.Fatalf("status of all: %+v", all)
	}
	for _, a := range all.Activities {
		if a.ID != actOpen && (len(a.SKUs) != 1 || a.SKUs[0].Preheated || !a.SKUs[0].OK) {
			t.Errorf("never preheated %s: %+v", a.ID, a)
		}
	}
}

func TestAdminBlocklist(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	for _, q := range []string{
		"kind=nope&value=x", "kind=user", "kind=ip&value=not-an-ip", "kind=user&value=a%7Cb",
		"kind=user&value=x&ttl=-1s", "kind=user&value=x&ttl=soon",
	} {
		f.admin(t, "POST", "/admin/blocklist/add?"+q, http.StatusBadRequest, nil)
	}
	f.admin(t, "GET", "/admin/blocklist?kind=nope", http.StatusBadRequest, nil)

	var added struct {
		Kind  string   `json:"kind"`
		Added []string `json:"added"`
		TTL   string   `json:"ttl"`
	}
	f.admin(t, "POST", "/admin/blocklist/add?kind=user&value=mallory&value=trudy&ttl=10m", http.StatusOK, &added)
	if added.Kind != "user" || len(added.Added) != 2 || added.TTL != "10m0s" {
		t.Fatalf("add: %+v", added)
	}
	var list struct {
		Entries map[string]*string `json:"entries"`
	}
	f.admin(t, "GET", "/admin/blocklist?kind=user", http.StatusOK, &list)
	if e := list.Entries["mallory"]; len(list.Entries) != 2 || e == nil {
		t.Fatalf("list: %+v", list.Entries)
	} else if exp, err := time.Parse(time.RFC3339, *e); err != nil || exp.Before(time.Now()) || exp.After(time.Now().Add(11*time.Minute)) {
		t.Fatalf("mallory expires %q (%v)", *e, err)
	}
	// Trudy may win once before the proxy's snapshot has the list; from
	// then on both are refused, mallory at her first try.
	wantCode(t, f.buyUntil(t, actOpen, "trudy", "BLOCKED"), "BLOCKED", http.StatusForbidden)
	wantCode(t, e2e.Buy(f.proxy, actOpen, "mallory"), "BLOCKED", http.StatusForbidden)
	wantWin(t, e2e.Buy(f.proxy, actOpen, "alice"))

	f.admin(t, "POST", "/admin/blocklist/remove?kind=user&value=mallory", http.StatusOK, nil)
	wantWin(t, f.buyUntil(t, actOpen, "mallory", "WIN"))
	wantCode(t, e2e.Buy(f.proxy, actOpen, "trudy"), "BLOCKED", http.StatusForbidden)

	// An IP entry without TTL lasts until removed; IPv4-mapped IPv6 is
	// stored in its IPv4 form.
	f.admin(t, "POST", "/admin/blocklist/add?kind=ip&value=::ffff:127.0.0.1", http.StatusOK, &added)
	if len(added.Added) != 1 || added.Added[0] != "127.0.0.1" || added.TTL != "0s" {
		t.Fatalf("add ip: %+v", added)
	}
	list.Entries = nil
	f.admin(t, "GET", "/admin/blocklist?kind=ip", http.StatusOK, &list)
	if e, ok := list.Entries["127.0.0.1"]; !ok || e != nil {
		t.Fatalf("ip list: %+v", list.Entries)
	}
	wantCode(t, f.buyUntil(t, actOpen, "ip*", "BLOCKED"), "BLOCKED", http.StatusForbidden)
	f.admin(t, "POST", "/admin/blocklist/remove?kind=ip&value=127.0.0.1", http.StatusOK, nil)
	wantWin(t, f.buyUntil(t, actOpen, "ipfree*", "WIN"))
	if k := f.sku(t, actOpen); !k.OK || k.Pending != 0 {
		t.Fatalf("status: %+v", k)
	}
}

func TestAdminEligible(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actElig, http.StatusOK, nil)
	f.admin(t, "POST", "/admin/eligible/add?activity=nope&user=alice", http.StatusNotFound, nil)
	f.admin(t, "POST", "/admin/eligible/add?activity="+actElig, http.StatusBadRequest, nil)
	f.admin(t, "POST", "/admin/eligible/add?activity="+actElig+"&user=alice&ttl=0s", http.StatusBadRequest, nil)

	wantCode(t, f.buyUntil(t, actElig, "alice", "BLOCKED"), "BLOCKED", http.StatusForbidden)
	f.admin(t, "POST", "/admin/eligible/add?activity="+actElig+"&user=alice&user=bob&ttl=1h", http.StatusOK, nil)
	m, err := f.st.Eligible(context.Background(), actElig, time.Now())
	if err != nil || len(m) != 2 {
		t.Fatalf("eligible: %v %v", m, err)
	}
	wantWin(t, f.buyUntil(t, actElig, "alice", "WIN"))
	wantCode(t, e2e.Buy(f.proxy, actElig, "carol"), "BLOCKED", http.StatusForbidden)

	f.admin(t, "POST", "/admin/eligible/remove?activity="+actElig+"&user=bob", http.StatusOK, nil)
	if m, _ := f.st.Eligible(context.Background(), actElig, time.Now()); len(m) != 1 {
		t.Fatalf("after remove: %v", m)
	}
	// Bob may win once before the proxy's snapshot loses him.
	wantCode(t, f.buyUntil(t, actElig, "bob", "BLOCKED"), "BLOCKED", http.StatusForbidden)
	if k := f.sku(t, actElig); !k.OK || k.Confirmed < 1 || k.Confirmed > 2 || k.Remaining+k.Confirmed != stock {
		t.Fatalf("status: %+v", k)
	}
}

// The read-only pages: health, readiness (and its loss with Redis),
// metrics, pprof and the dashboard.
func TestAdminPages(t *testing.T) {
	f := newFixture(t, token)
	f.admin(t, "POST", "/admin/preheat?activity="+actOpen, http.StatusOK, nil)
	wantWin(t, f.buyUntil(t, actOpen, "buyer", "WIN"))

	get := func(path string) (int, string) {
		t.Helper()
		code, body := f.call(t, "GET", path, "")
		return code, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `seckill_buy_outcomes_total{activity="open",code="ADMITTED"} 1`) {
		t.Errorf("/metrics: %d, no admitted buy in\n%s", code, body)
	}
	if code, _ := get("/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/: %d", code)
	}
	resp, err := f.adm.Client().Get(f.adm.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(page), "dashboard.json") {
		t.Errorf("/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}

	type dash struct {
		Activities []struct {
			ID    string            `json:"id"`
			State string            `json:"state"`
			SKUs  []store.SKUStatus `json:"skus"`
			Codes map[string]int64  `json:"codes"`
			Error string            `json:"error"`
		} `json:"activities"`
	}
	var d dash
	code, body := get("/dashboard.json")
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || len(d.Activities) != 3 {
		t.Fatalf("/dashboard.json: %d %v %s", code, err, body)
	}
	states := map[string]string{}
	for _, a := range d.Activities {
		states[a.ID] = a.State
		if a.ID != actOpen {
			continue
		}
		if len(a.SKUs) != 1 || a.SKUs[0].ID != e2e.SKU || a.SKUs[0].Remaining != stock-1 || a.SKUs[0].Confirmed != 1 ||
			a.Codes["ADMITTED"] != 1 || a.Error != "" {
			t.Errorf("dashboard %s: %+v", a.ID, a)
		}
	}
	if states[actOpen] != "open" || states[actLater] != "upcoming" {
		t.Errorf("dashboard states: %v", states)
	}

	// Redis gone: not ready, still healthy, and the dashboard still answers
	// (after its own 2 s deadline) and names the error, once its last read
	// (kept up to 1 s, shared by every poll) is replaced. (/admin/status would
	// answer 503 only after Status' 10*timeout+5 s deadline: not waited for.)
	f.redis.Node.Kill()
	e2e.Eventually(t, 5*time.Second, "/readyz 503", func() bool {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "redis")
	})
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with Redis down: %d", code)
	}
	e2e.Eventually(t, 10*time.Second, "/dashboard.json naming the error", func() bool {
		d = dash{}
		code, body = get("/dashboard.json")
		err := json.Unmarshal([]byte(body), &d)
		if code != http.StatusOK || err != nil || len(d.Activities) != 3 {
			t.Fatalf("/dashboard.json with Redis down: %d %v %s", code, err, body)
		}
		return d.Activities[0].Error != ""
	})
}

func wantCode(t *testing.T, r e2e.Resp, code string, status int) {
	t.Helper()
	if r.Err != nil || r.Code != code || r.Status != status {
		t.Fatalf("got %d %s (err %v), want %d %s", r.Status, r.Body, r.Err, status, code)
	}
}

func wantWin(t *testing.T, r e2e.Resp) {
	t.Helper()
	if r.Err != nil || r.Code != "WIN" {
		t.Fatalf("want a win, got %d %s (err %v)", r.Status, r.Body, r.Err)
	}
}
