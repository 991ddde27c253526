package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// openStore connects to the Redis of the config at path, as an operator's
// second terminal would, to check what a command did. Client-side caching
// is off: a read right after a command must not see a value cached before
// it, waiting for Redis' invalidation.
func openStore(t *testing.T, path string) (*config.Config, *store.Store) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Redis
	rc.ClientCache = false
	st, err := store.OpenNow(rc, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return cfg, st
}

func skuStatus(t *testing.T, st *store.Store, a *config.Activity) store.SKUStatus {
	t.Helper()
	s, err := st.Status(context.Background(), a)
	if err != nil || len(s.SKUs) != 1 {
		t.Fatalf("status: %+v %v", s, err)
	}
	return s.SKUs[0]
}

// want runs one command and checks its exit code and that want appears in
// stdout+stderr.
func want(t *testing.T, wantCode int, want string, args ...string) (string, string) {
	t.Helper()
	code, out, errs := cliRun(args...)
	if code != wantCode || !strings.Contains(out+errs, want) {
		t.Fatalf("%v: exit %d (want %d)\nstdout %q\nstderr %q\n(want %q)", args, code, wantCode, out, errs, want)
	}
	return out, errs
}

var allCommands = []string{"serve", "validate", "preheat", "preflight", "pause", "resume", "release", "reconcile", "status", "block", "unblock", "eligible", "shadow-report"}

func TestUsage(t *testing.T) {
	// Usage errors are found before any config or Redis is touched.
	noFile := filepath.Join(t.TempDir(), "missing.yaml")
	tests := []struct {
		name string
		args []string
		code int
		text string
	}{
		{"no command", nil, 2, "Usage:"},
		{"help", []string{"--help"}, 0, "Exit codes"},
		{"help word", []string{"help"}, 0, "Usage:"},
		{"unknown command", []string{"launch", "-c", noFile}, 2, `unknown command "launch"`},
		{"unknown flag", []string{"status", "-c", noFile, "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"bad log format", []string{"status", "-c", noFile, "--log-format", "xml"}, 2, "--log-format must be json or console"},
		{"missing config file", []string{"validate", "-c", noFile}, 2, "no such file"},
		{"pause without ID", []string{"pause", "-c", noFile}, 2, "exactly one activity ID, or --all"},
		{"pause ID and --all", []string{"pause", "-c", noFile, "kact", "--all"}, 2, "exactly one activity ID, or --all"},
		{"resume two IDs", []string{"resume", "-c", noFile, "a", "b"}, 2, "exactly one activity ID, or --all"},
		{"release two tokens", []string{"release", "-c", noFile, "a", "b"}, 2, "exactly one TOKEN"},
		{"block nothing", []string{"block", "-c", noFile, "--ttl", "1m"}, 2, "at least one --ip, --device or --user"},
		{"block bad IP", []string{"block", "-c", noFile, "--ip", "300.1.2.3"}, 2, "not an IP address or CIDR prefix: 300.1.2.3"},
		{"block bad user", []string{"block", "-c", noFile, "--user", "a|b"}, 2, "not a valid id"},
		{"block negative ttl", []string{"block", "-c", noFile, "--user", "u", "--ttl", "-1m"}, 2, "--ttl must be positive"},
		{"unblock takes no ttl", []string{"unblock", "-c", noFile, "--user", "u", "--ttl", "1m"}, 2, "flag provided but not defined: -ttl"},
		{"unblock nothing", []string{"unblock", "-c", noFile}, 2, "at least one --ip, --device or --user"},
		{"eligible without activity", []string{"eligible", "-c", noFile, "--add", "u"}, 2, "give --activity and at least one --add or --remove"},
		{"eligible without users", []string{"eligible", "-c", noFile, "--activity", "kact"}, 2, "give --activity and at least one --add or --remove"},
		// `preheat -c FILE ID --force` must not force-preheat every activity.
		{"preheat with an ID", []string{"preheat", "-c", noFile, "kact", "--force"}, 2, `preheat: unexpected argument "kact"`},
		{"status with an ID", []string{"status", "-c", noFile, "kact"}, 2, `status: unexpected argument "kact"`},
		{"reconcile with an ID", []string{"reconcile", "kact", "--repair", "-c", noFile}, 2, `reconcile: unexpected argument "kact"`},
		{"validate with two files", []string{"validate", "-c", noFile, "other.yaml"}, 2, `validate: unexpected argument "other.yaml"`},
		{"block with a bare value", []string{"block", "-c", noFile, "--user", "u", "v"}, 2, `block: unexpected argument "v"`},
		{"eligible with a bare value", []string{"eligible", "-c", noFile, "--activity", "kact", "--add", "u", "v"}, 2, `eligible: unexpected argument "v"`},
		{"flag after --", []string{"status", "-c", noFile, "--", "--json"}, 2, `status: unexpected argument "--json"`},
		{"release: after -- is the token", []string{"release", "-c", noFile, "--", "--weird"}, 2, `"--weird" is not a reservation token`},
	}
	for _, cmd := range allCommands {
		tests = append(tests,
			struct {
				name string
				args []string
				code int
				text string
			}{cmd + " --help", []string{cmd, "--help"}, 0, "Usage: seckill-proxy " + cmd + " -c FILE"},
			struct {
				name string
				args []string
				code int
				text string
			}{cmd + " without -c", []string{cmd}, 2, "seckill-proxy " + cmd + ": -c FILE is required"},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want(t, tt.code, tt.text, tt.args...)
		})
	}
}

func TestValidate(t *testing.T) {
	good := lifeConfig(t, "127.0.0.1:1", "http://127.0.0.1:1", 5, "")
	want(t, 0, good+": ok (1 activities)", "validate", "-c", good)
	want(t, 0, "ok", "validate", "--config", good, "--log-format", "console")

	// Two errors, each reported as FILE:LINE.
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var stockLine, shardsLine int
	for i, l := range lines {
		switch {
		case strings.Contains(l, "stock: 5"):
			lines[i], stockLine = strings.Replace(l, "stock: 5", "stock: -5", 1), i+1
		case strings.Contains(l, "shards: 4"):
			lines[i], shardsLine = strings.Replace(l, "shards: 4", "shards: many", 1), i+1
		}
	}
	if stockLine == 0 || shardsLine == 0 {
		t.Fatalf("config template changed:\n%s", raw)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("validate", "-c", bad)
	if code != 2 || out != "" {
		t.Fatalf("bad config: exit %d, stdout %q", code, out)
	}
	for _, line := range []int{stockLine, shardsLine} {
		if !strings.Contains(errs, bad+":"+strconv.Itoa(line)+": ") {
			t.Errorf("bad config: no %s:%d: in %q", bad, line, errs)
		}
	}
	// Every command that reads the config refuses a bad one the same way.
	for _, cmd := range []string{"preheat", "status", "reconcile"} {
		want(t, 2, bad+":"+strconv.Itoa(stockLine)+": ", cmd, "-c", bad)
	}
}

func TestPreheatCommand(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact: created (1 SKUs, 5 units, 4 shards)", "preheat", "-c", cfgPath)
	want(t, 0, "kact: unchanged", "preheat", "-c", cfgPath, "--activity", "kact")
	want(t, 2, `no activity "nope"`, "preheat", "-c", cfgPath, "--activity", "nope")

	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: "u1", Qty: 1, Limit: 1,
		Shards: 4, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}

	// The config now says 7 units, and the sale is running.
	changed := filepath.Join(t.TempDir(), "changed.yaml")
	raw, _ := os.ReadFile(cfgPath)
	if err := os.WriteFile(changed, []byte(strings.Replace(string(raw), "stock: 5", "stock: 7", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	want(t, 1, "kact: refused", "preheat", "-c", changed)
	if k := skuStatus(t, st, a); !k.OK || k.Initial != 5 || k.Pending != 1 {
		t.Fatalf("refused preheat changed stock: %+v", k)
	}
	want(t, 0, "kact: overwritten (1 SKUs, 7 units, 4 shards)", "preheat", "-c", changed, "--force")
	if k := skuStatus(t, st, a); !k.OK || k.Initial != 7 || k.Remaining != 7 || k.Pending != 0 {
		t.Fatalf("forced preheat: %+v", k)
	}
	if _, ok, err := st.Lookup(context.Background(), r.Token, 4); ok || err != nil {
		t.Fatalf("forced preheat kept reservation %s (%v)", r.Token, err)
	}
}

func TestStatusCommand(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	// Never preheated: reported, not broken.
	want(t, 0, "not preheated", "status", "-c", cfgPath)
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	want(t, 2, `no activity "nope"`, "status", "-c", cfgPath, "--activity", "nope")

	code, out, errs := cliRun("status", "-c", cfgPath, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d %s", code, errs)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	acts, _ := doc["activities"].([]any)
	if len(acts) != 1 {
		t.Fatalf("status --json: %s", out)
	}
	act, _ := acts[0].(map[string]any)
	skus, _ := act["skus"].([]any)
	if act["id"] != "kact" || len(skus) != 1 {
		t.Fatalf("status --json: %s", out)
	}
	k, _ := skus[0].(map[string]any)
	for name, v := range map[string]any{"id": "sku1", "initial": 5.0, "remaining": 5.0, "pending": 0.0, "confirmed": 0.0, "released": 0.0, "ok": true} {
		if k[name] != v {
			t.Errorf("status --json: %s = %v, want %v\n%s", name, k[name], v, out)
		}
	}

	// A unit appears from nowhere in shard 0: the invariant is broken.
	if _, err := srv.Do("HINCRBY", "seckill:{kact:0}:stock:sku1", "r", "1"); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cliRun("status", "-c", cfgPath, "--json", "--activity", "kact")
	var broken struct {
		Activities []store.ActivityStatus `json:"activities"`
	}
	if err := json.Unmarshal([]byte(out), &broken); err != nil || code != 1 || !strings.Contains(errs, "stock invariant broken") {
		t.Fatalf("broken status --json: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	if s := broken.Activities[0].SKUs[0]; s.OK || s.Remaining != 6 || s.Problem == "" {
		t.Fatalf("broken status: %+v", s)
	}
	want(t, 1, "BROKEN: ", "status", "-c", cfgPath)
}

func TestPauseResumeCommands(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	_, st := openStore(t, cfgPath)
	paused := func() bool {
		t.Helper()
		f, err := st.Flags(context.Background(), "kact")
		if err != nil {
			t.Fatal(err)
		}
		return f.Paused
	}
	want(t, 0, "kact: paused", "pause", "-c", cfgPath, "kact")
	if !paused() {
		t.Fatal("pause: not paused")
	}
	// Flags may come after the positional argument.
	want(t, 0, "kact: resumed", "resume", "kact", "-c", cfgPath, "--log-format", "console")
	if paused() {
		t.Fatal("resume: still paused")
	}
	want(t, 0, "kact: paused", "pause", "-c", cfgPath, "--all")
	if !paused() {
		t.Fatal("pause --all: not paused")
	}
	want(t, 0, "kact: resumed", "resume", "--all", "-c", cfgPath)
	if paused() {
		t.Fatal("resume --all: still paused")
	}
	want(t, 2, `no activity "nope"`, "pause", "-c", cfgPath, "nope")
	want(t, 2, "exactly one activity ID, or --all", "pause", "-c", cfgPath)
	if paused() {
		t.Fatal("a refused pause paused")
	}
}

// release with its flags after the token (the happy paths are in
// TestReleaseCommand).
func TestReleaseFlagsAfterToken(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: "u1", Qty: 1, Limit: 1,
		Shards: 4, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(&cfg.Activities[0])})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	// Pending and just made: the release waits until the shop could no
	// longer take its buy (2 x upstream.timeout + 2s), unless --force.
	r2, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: "u2", Qty: 1, Limit: 1,
		Shards: 4, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(&cfg.Activities[0])})
	if err != nil || r2.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r2.Code, err)
	}
	if _, errs := want(t, 0, "released (unpaid)", "release", r2.Token.String(), "-c", cfgPath, "--force", "--reason", "unpaid"); errs != "" {
		t.Errorf("--force waited: %q", errs)
	}
	want(t, 0, "pending: waited", "release", r.Token.String(), "-c", cfgPath, "--reason", "unpaid")
	if res, _, _ := st.Lookup(context.Background(), r.Token, 4); res.Reason != "unpaid" {
		t.Fatalf("record: %+v", res)
	}
	want(t, 1, `activity "other" of the token is not in`, "release", "other.sku1.0.AAAAAAAAAAAAAAAAAAAAAA", "-c", cfgPath)
}

func TestBlockCommands(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	_, st := openStore(t, cfgPath)
	list := func(kind string) map[string]int64 {
		t.Helper()
		m, err := st.Blocklist(context.Background(), kind, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := time.Now()
	want(t, 0, "blocked for 10m0s user: mallory, trudy", "block", "-c", cfgPath, "--user", "mallory,trudy", "--ttl", "10m")
	users := list(store.BlockUser)
	if len(users) != 2 || users["mallory"] < before.Add(10*time.Minute).UnixMilli() || users["mallory"] > time.Now().Add(10*time.Minute).UnixMilli() {
		t.Fatalf("user blocklist: %v", users)
	}
	out, _ := want(t, 0, "blocked ip: 10.0.0.1, 2001:db8::1", "block", "--ip", "::ffff:10.0.0.1", "--ip", "2001:db8::1", "--device", "d1", "-c", cfgPath)
	if !strings.Contains(out, "blocked device: d1") {
		t.Fatalf("block output: %q", out)
	}
	if ips := list(store.BlockIP); len(ips) != 2 || ips["10.0.0.1"] != store.Forever {
		t.Fatalf("ip blocklist: %v", ips)
	}
	want(t, 0, "unblocked user: mallory", "unblock", "-c", cfgPath, "--user", "mallory")
	if users := list(store.BlockUser); len(users) != 1 || users["trudy"] == 0 {
		t.Fatalf("after unblock: %v", users)
	}
	want(t, 0, "unblocked ip: 10.0.0.1", "unblock", "-c", cfgPath, "--ip", "10.0.0.1")
	if ips := list(store.BlockIP); len(ips) != 1 {
		t.Fatalf("after unblock ip: %v", ips)
	}
	want(t, 2, "not an IP address", "unblock", "-c", cfgPath, "--ip", "nope")
	// Entries are stored as the proxy spells ids (NFC), or they match nobody.
	want(t, 0, "blocked user: \u00e9lodie", "block", "-c", cfgPath, "--user", "e\u0301lodie")
	if users := list(store.BlockUser); users["\u00e9lodie"] != store.Forever {
		t.Fatalf("NFD user blocked as: %v", users)
	}
}

func TestEligibleCommand(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "    eligible_only: true\n")
	_, st := openStore(t, cfgPath)
	list := func() map[string]int64 {
		t.Helper()
		m, err := st.Eligible(context.Background(), "kact", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	want(t, 0, "eligible for kact: alice, bob, carol", "eligible", "-c", cfgPath, "--activity", "kact", "--add", "alice,bob", "--add", "carol", "--ttl", "1h")
	if m := list(); len(m) != 3 || m["alice"] > time.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("eligible: %v", m)
	}
	want(t, 0, "no longer eligible for kact: bob", "eligible", "--remove", "bob", "-c", cfgPath, "--activity", "kact")
	if m := list(); len(m) != 2 || m["bob"] != 0 {
		t.Fatalf("after remove: %v", m)
	}
	want(t, 2, `no activity "nope"`, "eligible", "-c", cfgPath, "--activity", "nope", "--add", "dave")
	want(t, 2, "not a valid id", "eligible", "-c", cfgPath, "--activity", "kact", "--add", "x|y")
	if m := list(); len(m) != 2 {
		t.Fatalf("refused commands changed the list: %v", m)
	}
}

// Without verify.url a reconcile reports a stale reservation and never
// guesses: report-only and --repair both leave Redis as it was.
func TestReconcileWithoutVerify(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	// Created an hour ago by the proxy's clock: long past pending_timeout.
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: "u1", Qty: 1, Limit: 1,
		Shards: 4, NowMs: time.Now().Add(-time.Hour).UnixMilli(), ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	before := skuStatus(t, st, a)
	want(t, 2, `no activity "nope"`, "reconcile", "-c", cfgPath, "--activity", "nope")

	for _, args := range [][]string{{"--json"}, {"--json", "--repair"}} {
		code, out, errs := cliRun(append([]string{"reconcile", "-c", cfgPath}, args...)...)
		var rep reservation.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("reconcile %v: exit %d, %v\n%s\n%s", args, code, err, out, errs)
		}
		if len(rep.Activities) != 1 || len(rep.Activities[0].Stale) != 1 || rep.Alerting() {
			t.Fatalf("reconcile %v: %s", args, out)
		}
		if f := rep.Activities[0].Stale[0]; f.Token != r.Token.String() || f.Verdict != reservation.Unverified || f.Action != "left" {
			t.Fatalf("reconcile %v finding: %+v", args, f)
		}
		if after := skuStatus(t, st, a); after != before {
			t.Fatalf("reconcile %v changed stock: %+v -> %+v", args, before, after)
		}
		if res, ok, _ := st.Lookup(context.Background(), r.Token, 4); !ok || res.State != store.StatePending {
			t.Fatalf("reconcile %v: reservation %+v", args, res)
		}
	}
	out, _ := want(t, 0, "1 stale pending", "reconcile", "-c", cfgPath)
	if !regexp.MustCompile(`verdict=unknown action=left`).MatchString(out) {
		t.Fatalf("reconcile text: %q", out)
	}
}

// Redis down: every command that needs it exits 1 and says Redis.
func TestRedisDown(t *testing.T) {
	dead := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	cfgPath := lifeConfig(t, dead, "http://127.0.0.1:1", 5, "")
	for _, args := range [][]string{
		{"preheat"}, {"status"}, {"status", "--json"}, {"pause", "kact"}, {"resume", "--all"},
		{"release", "kact.sku1.0.AAAAAAAAAAAAAAAAAAAAAA"}, {"reconcile"},
		{"block", "--user", "u"}, {"unblock", "--user", "u"}, {"eligible", "--activity", "kact", "--add", "u"},
	} {
		code, out, errs := cliRun(append(append([]string{}, args[0], "-c", cfgPath), args[1:]...)...)
		if code != 1 || !strings.Contains(errs, "redis "+dead) || !strings.Contains(errs, "unavailable") {
			t.Errorf("%v with Redis down: exit %d\nstdout %q\nstderr %q", args, code, out, errs)
		}
	}
	// validate needs no Redis.
	want(t, 0, "ok", "validate", "-c", cfgPath)
}

func TestRestartOnlySettings(t *testing.T) {
	a := &config.Config{Listen: ":1", Redis: config.Redis{Addrs: []string{"x:1"}}}
	b := *a
	if got := restartOnly(a, &b); len(got) != 0 {
		t.Fatalf("same config: %v", got)
	}
	b.Listen = ":2"
	b.Redis = config.Redis{Addrs: []string{"y:1"}}
	if got := restartOnly(a, &b); len(got) != 2 || got[0] != "listen" || got[1] != "redis" {
		t.Fatalf("changed listen and redis: %v", got)
	}
}

func TestSecretWarnings(t *testing.T) {
	cfg := &config.Config{Upstream: config.Upstream{SigningSecretEnv: "SECKILL_TEST_NO_SUCH_SECRET"},
		Admin: config.Admin{TokenEnv: "SECKILL_TEST_NO_SUCH_TOKEN"}}
	if got := secretWarnings(cfg); len(got) != 2 {
		t.Fatalf("both unset: %q", got)
	}
	t.Setenv("SECKILL_TEST_NO_SUCH_SECRET", "s")
	t.Setenv("SECKILL_TEST_NO_SUCH_TOKEN", "t")
	if got := secretWarnings(cfg); len(got) != 0 {
		t.Fatalf("both set: %q", got)
	}
}
