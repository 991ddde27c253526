package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Red team, round "ops 2": a tired operator's CLI and admin calls on sale day.

// cliRTTwoActs writes a config with two upcoming activities, t1 and t2.
func cliRTTwoActs(t *testing.T, redisAddr string) string {
	t.Helper()
	start := time.Now().Add(time.Hour)
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: "http://127.0.0.1:1" }
redis: { addrs: [%q] }
activities:
  - id: t1
    start: %s
    end: %s
    skus: [{ id: s1, stock: 5 }]
  - id: t2
    start: %s
    end: %s
    skus: [{ id: s1, stock: 5 }]
`, redistest.FreePort(t), redistest.FreePort(t), redisAddr,
		start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339),
		start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// An empty activity id ("$ACT" unset in a runbook script) is not "every
// activity": the usage is `pause -c FILE (ID | --all)`, and TestUsage
// already guards `preheat -c FILE ID --force` against force-preheating
// everything. Today `pause -c FILE ""` / `resume -c FILE ""` act on every
// activity and `preheat --activity "" --force` overwrites every activity's
// stock, deleting its reservations (activities() in main.go treats "" as
// "all"). Each must be exit 2 and change nothing.
func TestRedTeamOps2EmptyActivityIDIsNotAll(t *testing.T) {
	srv := redistest.Start(t)
	path := cliRTTwoActs(t, srv.Addr)
	want(t, 0, "t2: created", "preheat", "-c", path)
	want(t, 0, "t1: paused", "pause", "-c", path, "t1")

	_, st := openStore(t, path)
	paused := func(id string) bool {
		t.Helper()
		f, err := st.Flags(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return f.Paused
	}
	for _, args := range [][]string{
		{"resume", "-c", path, ""},
		{"pause", "-c", path, ""},
		{"preheat", "-c", path, "--activity", "", "--force"},
		{"preheat", "-c", path, "--activity=", "--force"},
		{"reconcile", "-c", path, "--activity", "", "--repair"},
	} {
		code, out, errs := cliRun(args...)
		if code != exitUsage || strings.Contains(out, "resumed") || strings.Contains(out, "overwritten") || strings.Contains(out, "t2: paused") {
			t.Errorf("%q: exit %d (want 2, nothing done)\nstdout %q\nstderr %q", args, code, out, errs)
		}
		if args[0] == "resume" && !paused("t1") {
			t.Errorf(`resume -c FILE "": t1, paused before, is on sale again`)
		}
		if args[0] == "pause" && paused("t2") {
			t.Errorf(`pause -c FILE "": t2 was paused`)
		}
	}
}

// README: "The `server.*` limits are read at start only", and restartOnly
// exists so "a reload that changes them says so instead of silently
// keeping the old values". A reload changing server.max_conns (or
// reconcile.exceptions_max, "read at start by serve") logs nothing.
func TestRedTeamOps2RestartOnlyNamesServer(t *testing.T) {
	a := &config.Config{Listen: ":1", Redis: config.Redis{Addrs: []string{"x:1"}}}
	a.Server.MaxConns = 40000
	a.Server.ReadTimeout = 30 * time.Second
	a.Reconcile.ExceptionsMax = 10000

	b := *a
	b.Server.MaxConns = 100
	if got := restartOnly(a, &b); len(got) == 0 {
		t.Errorf("server.max_conns 40000 → 100 on reload: restartOnly says nothing, the change is silently ignored")
	}
	c := *a
	c.Server.ReadTimeout = time.Second
	if got := restartOnly(a, &c); len(got) == 0 {
		t.Errorf("server.read_timeout 30s → 1s on reload: restartOnly says nothing")
	}
	d := *a
	d.Reconcile.ExceptionsMax = 100
	if got := restartOnly(a, &d); len(got) == 0 {
		t.Errorf("reconcile.exceptions_max 10000 → 100 on reload: restartOnly says nothing")
	}
}

// cliRTAdmin serves the admin API of the config at path, as serve mounts it.
func cliRTAdmin(t *testing.T, path, token string) (*httptest.Server, func(method, url string) (int, string)) {
	t.Helper()
	cfg, st := openStore(t, path)
	m := metrics.New()
	rec := reservation.NewReconciler(st, m, zap.NewNop())
	adm := admin.New(m, st, token, zap.NewNop())
	admin.MountAll(adm, st, rec, m, func() *config.Config { return cfg })
	hs := httptest.NewServer(adm)
	t.Cleanup(hs.Close)
	do := func(method, url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	return hs, do
}

// Admin calls with parameters the API does not understand must be refused
// with a message (as `?all=yes` already is: 400 "give ?activity=ID or
// ?all=1"), never half-done with 200:
//   - `reconcile?repair=true` runs a report-only pass (200, "repair":false);
//   - `preheat?force=true` is an unforced preheat (200 "unchanged");
//   - `pause?activity=t1&all=1` pauses t1 only (the CLI refuses ID + --all);
//   - `release` without `token` is 404 "no such reservation", not a 400
//     saying what to give.
func TestRedTeamOps2AdminBadParams(t *testing.T) {
	srv := redistest.Start(t)
	path := cliRTTwoActs(t, srv.Addr)
	want(t, 0, "t2: created", "preheat", "-c", path)
	_, do := cliRTAdmin(t, path, "tok")

	if code, body := do(http.MethodPost, "/admin/reconcile?activity=t1&repair=true"); code == http.StatusOK {
		var rep struct {
			Repair bool `json:"repair"`
		}
		_ = json.Unmarshal([]byte(body), &rep)
		if !rep.Repair {
			t.Errorf("reconcile?repair=true: %d %s: a report-only pass answered 200; want 400 or a repairing pass", code, body)
		}
	}
	if code, body := do(http.MethodPost, "/admin/preheat?activity=t1&force=true"); code == http.StatusOK && strings.Contains(body, "unchanged") {
		t.Errorf("preheat?force=true: %d %s: not forced, answered 200; want 400 or a forced preheat", code, body)
	}
	if code, body := do(http.MethodPost, "/admin/pause?activity=t1&all=1"); code == http.StatusOK {
		t.Errorf("pause?activity=t1&all=1: %d %s: one of the two silently ignored; want 400 as the CLI (exactly one activity ID, or --all)", code, body)
	}
	if code, body := do(http.MethodPost, "/admin/release"); code != http.StatusBadRequest || !strings.Contains(body, "token") {
		t.Errorf("release without ?token=: %d %s; want 400 saying to give ?token=T", code, body)
	}
}

// What held in the admin API: unknown activity 404, bad kind / IP / ttl
// 400, missing or wrong token 401, GET on a POST call 405.
func TestRedTeamOps2AdminHeld(t *testing.T) {
	srv := redistest.Start(t)
	path := cliRTTwoActs(t, srv.Addr)
	hs, do := cliRTAdmin(t, path, "tok")
	for _, tt := range []struct {
		method, url string
		code        int
		text        string
	}{
		{http.MethodPost, "/admin/pause", 400, "give ?activity=ID or ?all=1"},
		{http.MethodPost, "/admin/pause?activity=nope", 404, "no activity nope"},
		{http.MethodPost, "/admin/resume?all=yes", 400, "?all must be 1 or 0"},
		{http.MethodPost, "/admin/preheat?activity=nope", 404, "no activity nope"},
		{http.MethodPost, "/admin/blocklist/add?kind=ip&value=1.2.3.4&ttl=-5m", 400, "ttl must be a positive"},
		{http.MethodPost, "/admin/blocklist/add?kind=ip&value=1.2.3.4&ttl=500", 400, "ttl must be a positive"},
		{http.MethodPost, "/admin/blocklist/add?kind=foo&value=x", 400, "kind must be ip, device or user"},
		{http.MethodPost, "/admin/blocklist/add?kind=ip&value=999.1.1.1", 400, "not an IP address"},
		{http.MethodPost, "/admin/eligible/add?activity=nope&user=u", 404, "no activity nope"},
		{http.MethodGet, "/admin/pause?activity=t1", 405, ""},
	} {
		if code, body := do(tt.method, tt.url); code != tt.code || !strings.Contains(body, tt.text) {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.url, code, body, tt.code, tt.text)
		}
	}
	for _, auth := range []string{"", "Bearer wrong", "tok"} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/admin/pause?activity=t1", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}
}

// What held on the CLI: a directory, a missing file, an unknown activity,
// a malformed token, a foreign token and status --json.
func TestRedTeamOps2CLIHeld(t *testing.T) {
	srv := redistest.Start(t)
	path := cliRTTwoActs(t, srv.Addr)
	dir := t.TempDir()
	want(t, 2, "is a directory", "validate", "-c", dir)
	want(t, 2, "no such file", "status", "-c", filepath.Join(dir, "nope.yaml"))
	want(t, 2, `no activity "nope"`, "preheat", "-c", path, "--activity", "nope")
	want(t, 2, `no activity "nope"`, "pause", "-c", path, "nope")
	want(t, 2, "is not a reservation token", "release", "-c", path, "garbage")
	want(t, 1, `activity "other" of the token is not in`, "release", "-c", path, "other.s1.0.AAAAAAAAAAAAAAAAAAAAAA")
	want(t, 2, "invalid boolean value", "status", "-c", path, "-json=maybe")
	want(t, 0, "t1: created", "preheat", "-c", path)
	out, _ := want(t, 0, `"activities"`, "status", "-c", path, "--json")
	var doc struct {
		Activities []struct {
			ID   string `json:"id"`
			SKUs []struct {
				ID                                               string `json:"id"`
				Initial, Remaining, Pending, Confirmed, Released *int64
				OK                                               *bool `json:"ok"`
			} `json:"skus"`
		} `json:"activities"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	if len(doc.Activities) != 2 || len(doc.Activities[0].SKUs) != 1 {
		t.Fatalf("status --json: %s", out)
	}
	k := doc.Activities[0].SKUs[0]
	if k.Initial == nil || *k.Initial != 5 || k.Remaining == nil || k.Pending == nil || k.Confirmed == nil || k.Released == nil || k.OK == nil || !*k.OK {
		t.Fatalf("status --json SKU lacks a SPEC field: %s", out)
	}
}
