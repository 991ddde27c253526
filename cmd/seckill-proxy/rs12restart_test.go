package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

const rs12SecretEnv = "SECKILL_RS12_TEST_SECRET"

// rs12Act is one activity of an rs12 config file.
type rs12Act struct {
	id, path, bundle, mode string
	start, end             time.Time
}

// rs12File writes a config file naming acts (stock 1, one shard,
// pending_timeout 3s), listening on free ports.
func rs12File(t *testing.T, redisAddr, shopURL string, acts ...rs12Act) string {
	t.Helper()
	os.Setenv(rs12SecretEnv, e2e.Secret)
	var b strings.Builder
	fmt.Fprintf(&b, `listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: 1s }
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
`, redistest.FreePort(t), redistest.FreePort(t), shopURL, rs12SecretEnv, redisAddr)
	for _, a := range acts {
		fmt.Fprintf(&b, "  - id: %s\n    route: { path: %q }\n", a.id, a.path)
		if a.bundle != "" {
			fmt.Fprintf(&b, "    bundle_route: { path: %q }\n", a.bundle)
		}
		if a.mode != "" {
			fmt.Fprintf(&b, "    mode: %s\n", a.mode)
		}
		fmt.Fprintf(&b, "    start: %s\n    end: %s\n    skus: [{ id: \"sku1\", stock: 1 }]\n    shards: 1\n    pending_timeout: 3s\n",
			a.start.Format(time.RFC3339), a.end.Format(time.RFC3339))
	}
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rs12Serve starts `serve -c path` and waits until it either listens
// (started: its listen address, stopped when the test ends) or exits
// (its exit code and log).
func rs12Serve(t *testing.T, bin, path string) (listen string, code int, logs string) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-c", path)
	cmd.Env = os.Environ()
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("serve exited: %v\n%s", err, out.String())
			}
			return "", ee.ExitCode(), out.String()
		default:
		}
		resp, err := http.Get("http://" + cfg.Listen + "/_seckill/time")
		if err == nil {
			resp.Body.Close()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
			return cfg.Listen, 0, ""
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("serve neither came up nor exited: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rs12Buy posts one buy (or bundle) to uri as user.
func rs12Buy(t *testing.T, listen, uri, user, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+listen+uri, strings.NewReader(body))
	req.Header.Set("X-User-Id", user)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// rs12Untokened counts the requests on path the shop got with no
// X-Seckill-Token: buys no admission saw.
func rs12Untokened(shop *e2e.Shop, path string) int {
	n := 0
	for _, rq := range shop.Requests() {
		if rq.Path == path && rq.Header.Get("X-Seckill-Token") == "" {
			n++
		}
	}
	return n
}

// TestRS12RestartOpeningRunningSaleRefused: README "Failure behaviour and
// limits" said a restart cannot tell whether a dropped activity's sale is
// still running, so unlike a reload (keepsRunningSales) `serve` started
// with a file that drops a preheated, running sale, moves its buy or
// bundle route, or switches it to shadow, and that sale's buy path became
// ordinary traffic: passed to the shop with no admission and no token
// (oversell). Want: serve refuses to start, exit 1, naming the activity,
// its route, until when it runs and the kill switch; with nothing in its
// path reaching the shop.
func TestRS12RestartOpeningRunningSaleRefused(t *testing.T) {
	r := redistest.Start(t)
	shop := e2e.StartShop(t)
	bin := buildBinary(t)
	now := time.Now()
	keep := rs12Act{id: "rs12keep", path: "/api/seckill/{activity}/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	sale := rs12Act{id: "rs12d", path: "/rs12d/{sku}/buy", bundle: "/rs12d/bundle", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	plain := rs12Act{id: "rs12s", path: "/rs12s/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	full := rs12File(t, r.Addr, shop.URL, keep, sale, plain)
	if code, _, errs := cliRun("preheat", "-c", full); code != 0 {
		t.Fatalf("preheat: %d %s", code, errs)
	}
	listen, code, logs := rs12Serve(t, bin, full)
	if listen == "" {
		t.Fatalf("serve with the file as preheated: exit %d\n%s", code, logs)
	}
	if got := rs12Buy(t, listen, "/rs12d/sku1/buy", "u0", "{}"); got != http.StatusOK {
		t.Fatalf("first buy: %d, want 200 (won)", got)
	}
	until := sale.end.Add(3 * time.Second).Format(time.RFC3339)

	moved, bundleMoved, shadow := sale, sale, plain
	moved.path = "/rs12moved/{sku}/buy"
	bundleMoved.bundle = "/rs12moved/bundle"
	shadow.mode = "shadow"
	for _, tc := range []struct {
		name  string
		id    string
		acts  []rs12Act
		route string // the path that would open
		uri   string
		want  []string
	}{
		{"dropped", "rs12d", []rs12Act{keep, plain}, "POST /rs12d/{sku}/buy", "/rs12d/sku1/buy",
			[]string{`activity "rs12d" is no longer in the file`, "POST /rs12d/{sku}/buy", "POST /rs12d/bundle (bundle_route)"}},
		{"route moved", "rs12d", []rs12Act{keep, moved, plain}, "POST /rs12d/{sku}/buy", "/rs12d/sku1/buy",
			[]string{`activity "rs12d": POST /rs12d/{sku}/buy is no longer a buy route`}},
		{"bundle_route moved", "rs12d", []rs12Act{keep, bundleMoved, plain}, "POST /rs12d/bundle", "/rs12d/bundle",
			[]string{`activity "rs12d": POST /rs12d/bundle (bundle_route) is no longer a buy route`}},
		{"to shadow", "rs12s", []rs12Act{keep, sale, shadow}, "", "/rs12s/sku1/buy",
			[]string{`activity "rs12s": mode: shadow, but its sale is running`, "keep its mode: sync"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := rs12File(t, r.Addr, shop.URL, tc.acts...)
			listen, code, logs := rs12Serve(t, bin, next)
			if listen != "" {
				before := rs12Untokened(shop, strings.SplitN(tc.uri, "?", 2)[0])
				body := "{}"
				if strings.HasSuffix(tc.uri, "/bundle") {
					body = `{"items":[{"sku":"sku1"}]}`
				}
				for _, u := range []string{"u1", "u2", "u3"} {
					rs12Buy(t, listen, tc.uri, u, body)
				}
				t.Fatalf("serve started with a file that opens running sale %s (preheated; ends %s): %d requests on %s then reached the shop with no admission and no token",
					tc.id, sale.end.Format(time.RFC3339), rs12Untokened(shop, tc.uri)-before, tc.uri)
			}
			if code != exitFailed {
				t.Fatalf("serve exit %d, want %d\n%s", code, exitFailed, logs)
			}
			want := append(tc.want, "serve does not start", "pending_timeout until "+until, "pause -c "+next+" "+tc.id)
			for _, w := range want {
				if !strings.Contains(logs, w) {
					t.Errorf("refusal does not say %q:\n%s", w, logs)
				}
			}
			if tc.route != "" && !strings.Contains(strings.ToLower(logs), "keep "+strings.ToLower(tc.route)) {
				t.Errorf("refusal does not say to keep %s:\n%s", tc.route, logs)
			}
		})
	}
}

// TestRS12RestartDroppingIdleSalesStarts: what a restart may drop, as a
// reload may (keepsRunningSales): an activity never preheated, and one
// preheated whose end + pending_timeout is past; and the file as
// preheated starts, its sale admitted.
func TestRS12RestartDroppingIdleSalesStarts(t *testing.T) {
	r := redistest.Start(t)
	shop := e2e.StartShop(t)
	bin := buildBinary(t)
	now := time.Now()
	keep := rs12Act{id: "rs12keep", path: "/rs12keep/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	never := rs12Act{id: "rs12never", path: "/rs12never/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	over := rs12Act{id: "rs12over", path: "/rs12over/{sku}/buy", start: now.Add(-2 * time.Hour), end: now.Add(-time.Hour)}
	full := rs12File(t, r.Addr, shop.URL, keep, never, over)
	for _, id := range []string{"rs12keep", "rs12over"} {
		if code, _, errs := cliRun("preheat", "-c", full, "--activity", id); code != 0 {
			t.Fatalf("preheat %s: %d %s", id, code, errs)
		}
	}
	if listen, code, logs := rs12Serve(t, bin, full); listen == "" {
		t.Fatalf("serve with the file as preheated: exit %d\n%s", code, logs)
	}
	listen, code, logs := rs12Serve(t, bin, rs12File(t, r.Addr, shop.URL, keep))
	if listen == "" {
		t.Fatalf("serve with a file dropping a never-preheated and an ended activity: exit %d, want it to start\n%s", code, logs)
	}
	if got := rs12Buy(t, listen, "/rs12keep/sku1/buy", "u0", "{}"); got != http.StatusOK {
		t.Errorf("buy of the kept sale: %d, want 200", got)
	}
}

// TestRS12RestartOldMetaWarns: an activity preheated by an older build
// (its meta without the sale's end and routes) cannot be judged: serve
// starts, and says so naming it.
func TestRS12RestartOldMetaWarns(t *testing.T) {
	r := redistest.Start(t)
	shop := e2e.StartShop(t)
	bin := buildBinary(t)
	now := time.Now()
	keep := rs12Act{id: "rs12keep", path: "/rs12keep/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	old := rs12Act{id: "rs12old", path: "/rs12old/{sku}/buy", start: now.Add(-time.Minute), end: now.Add(time.Hour)}
	full := rs12File(t, r.Addr, shop.URL, keep, old)
	if code, _, errs := cliRun("preheat", "-c", full); code != 0 {
		t.Fatalf("preheat: %d %s", code, errs)
	}
	// What an older build's preheat left: the meta without the sale's fields.
	fields, err := r.Do("HKEYS", "seckill:{rs12old}:meta")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(fields) {
		if strings.HasPrefix(f, "sale_") {
			if _, err := r.Do("HDEL", "seckill:{rs12old}:meta", f); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := rs12File(t, r.Addr, shop.URL, keep)
	cmd := exec.Command(bin, "serve", "-c", path)
	cmd.Env = os.Environ()
	var out lockedBuffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), `"serving"`) {
		if time.Now().After(deadline) {
			t.Fatalf("serve with an old-meta activity dropped did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := out.String(); !strings.Contains(s, "rs12old") || !strings.Contains(s, "older build") {
		t.Errorf("serve started without a word about rs12old, preheated by an older build:\n%s", s)
	}
}
