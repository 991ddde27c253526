package preflight

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const (
	secretEnv = "PREFLIGHT_TEST_SIGNING"
	tokenEnv  = "PREFLIGHT_TEST_ADMIN"
)

// shop is a fake shop: / answers home, verify answers verifyCode.
func shop(t *testing.T, home, verifyCode int) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/internal/orders" {
			w.WriteHeader(verifyCode)
			return
		}
		w.WriteHeader(home)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// env is one test's config, built from parts.
type env struct {
	addrs     []string
	cluster   bool
	shopURL   string
	stock     int64
	shards    int
	start     time.Time
	end       time.Time
	preheatAt string
	extra     string // more redis: lines
	// redis replaces the addrs and cluster lines (e.g. a sentinel block).
	redis string
}

func (e env) config(t *testing.T) *config.Config {
	t.Helper()
	t.Setenv(secretEnv, "s3cret")
	t.Setenv(tokenEnv, "t0ken")
	if e.start.IsZero() {
		e.start = time.Now().Add(time.Hour)
	}
	if e.end.IsZero() {
		e.end = e.start.Add(time.Hour)
	}
	if e.stock == 0 {
		e.stock = 1000
	}
	if e.shards == 0 {
		e.shards = 4
	}
	addrs := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		addrs[i] = strconv.Quote(a)
	}
	redis := fmt.Sprintf("  addrs: [%s]\n  cluster: %v\n", strings.Join(addrs, ", "), e.cluster)
	if e.redis != "" {
		redis = e.redis
	}
	y := fmt.Sprintf(`admin: { token_env: %s }
upstream: { url: %q, signing_secret_env: %s }
redis:
%s  timeout: 1s
%sactivities:
  - id: pfact
    start: %s
    end: %s
    skus: [{ id: sku1, stock: %d }, { id: sku2, stock: 5 }]
    shards: %d
    verify: { url: "%s/internal/orders?token={token}" }
`, tokenEnv, e.shopURL, secretEnv, redis, e.extra,
		e.start.Format(time.RFC3339Nano), e.end.Format(time.RFC3339Nano), e.stock, e.shards, e.shopURL)
	if e.preheatAt != "" {
		y += "    preheat_at: " + e.preheatAt + "\n"
	}
	cfg, err := config.Parse("pf.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func runOpts(t *testing.T, cfg *config.Config, opt Options) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Run(ctx, cfg, opt)
}

func run1(t *testing.T, cfg *config.Config) Report { return runOpts(t, cfg, Options{}) }

func dump(rep Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "  %s %s: %s | %s\n", c.Result, c.Name, c.Detail, c.Fix)
	}
	return b.String()
}

// want finds the check named name (exactly) and checks its result, that
// its detail holds detail, and that a warn or fail has a one-line fix.
func want(t *testing.T, rep Report, name string, res Result, detail string) Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name != name {
			continue
		}
		if c.Result != res || !strings.Contains(c.Detail, detail) {
			t.Fatalf("%s: %s %q, want %s containing %q\n%s", name, c.Result, c.Detail, res, detail, dump(rep))
		}
		if res != Pass && (c.Fix == "" || strings.Contains(c.Fix, "\n")) {
			t.Fatalf("%s: fix %q is not one line", name, c.Fix)
		}
		if strings.Contains(c.Detail, "\n") {
			t.Fatalf("%s: detail %q is not one line", name, c.Detail)
		}
		return c
	}
	t.Fatalf("no check %q\n%s", name, dump(rep))
	return Check{}
}

// goodRedis is a Redis as a sale wants it: AOF every second, no RDB
// saves, noeviction, a maxmemory with room.
func goodRedis(t *testing.T, extra ...string) *redistest.Server {
	return redistest.Start(t, append([]string{"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory", "256mb"}, extra...)...)
}

// Everything right: every check passes.
func TestPreflightAllPass(t *testing.T) {
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t)
	rep := run1(t, cfg)
	if rep.Failed() || rep.Count(Warn) != 0 {
		t.Fatalf("not all pass:\n%s", dump(rep))
	}
	for _, name := range []string{"signing-secret default", "admin-token", "window pfact", "redis-reachable " + srv.Addr,
		"redis-mode " + srv.Addr, "redis-acl", "maxmemory-policy " + srv.Addr, "persistence " + srv.Addr, "rdb-save " + srv.Addr,
		"memory-headroom " + srv.Addr, "clock " + srv.Addr, "scripts " + srv.Addr, "preheat pfact", "shop", "verify-url pfact"} {
		want(t, rep, name, Pass, "")
	}
	// Preheated: the keys' lifetimes are checked too.
	st := openStore(t, cfg)
	if _, err := st.Preheat(context.Background(), &cfg.Activities[0], false, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep = run1(t, cfg)
	want(t, rep, "preheat pfact", Pass, "preheated at")
	want(t, rep, "key-ttl pfact", Pass, "keys expire after end")
	if rep.Failed() || rep.Count(Warn) != 0 {
		t.Fatalf("not all pass after preheat:\n%s", dump(rep))
	}
}

func openStore(t *testing.T, cfg *config.Config) *store.Store {
	t.Helper()
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// The example: a Redis that may evict keys fails.
func TestPreflightEvictionPolicy(t *testing.T) {
	srv := goodRedis(t, "--maxmemory-policy", "allkeys-lru")
	rep := run1(t, env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t))
	c := want(t, rep, "maxmemory-policy "+srv.Addr, Fail, "maxmemory-policy is allkeys-lru")
	if !strings.Contains(c.Fix, "noeviction") || !rep.Failed() {
		t.Fatalf("fix %q", c.Fix)
	}
	// Without maxmemory too: someone may set one later.
	srv2 := redistest.Start(t, "--maxmemory-policy", "volatile-lru")
	rep = run1(t, env{addrs: []string{srv2.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t))
	want(t, rep, "maxmemory-policy "+srv2.Addr, Fail, "volatile-lru")
}

// Stock that does not fit in maxmemory fails; close to it warns.
func TestPreflightMemory(t *testing.T) {
	srv := goodRedis(t, "--maxmemory", "4mb")
	shopURL := shop(t, 200, 404)
	// 10,000 units × 329 B × 2 = 6.3 MiB > 4 MiB.
	rep := run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m", stock: 10_000}.config(t))
	c := want(t, rep, "memory-headroom "+srv.Addr, Fail, "10005 units × 329 B × 2")
	if !strings.Contains(c.Fix, "maxmemory") {
		t.Fatalf("fix %q", c.Fix)
	}
	// 4,000 units: 2.5 MiB + ~1 MiB used is above 70 % of 4 MiB.
	rep = run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m", stock: 4_000}.config(t))
	want(t, rep, "memory-headroom "+srv.Addr, Warn, "above 70 %")
	// No maxmemory at all: warned.
	srv2 := redistest.Start(t, "--appendonly", "yes")
	rep = run1(t, env{addrs: []string{srv2.Addr}, shopURL: shopURL, preheatAt: "-5m"}.config(t))
	want(t, rep, "memory-headroom "+srv2.Addr, Warn, "no maxmemory")
}

// AOF off, fsync other than everysec and RDB save points warn.
func TestPreflightPersistence(t *testing.T) {
	shopURL := shop(t, 200, 404)
	for _, tt := range []struct {
		args   []string
		check  string
		detail string
	}{
		{[]string{"--appendonly", "no"}, "persistence", "appendonly is no"},
		{[]string{"--appendfsync", "always"}, "persistence", "waits for the disk"},
		{[]string{"--save", "3600 1"}, "rdb-save", `save is "3600 1"`},
	} {
		srv := goodRedis(t, tt.args...)
		rep := run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m"}.config(t))
		want(t, rep, tt.check+" "+srv.Addr, Warn, tt.detail)
		if rep.Failed() {
			t.Fatalf("a warning failed preflight:\n%s", dump(rep))
		}
	}
}

// A node that is down, or refuses the password, fails.
func TestPreflightUnreachable(t *testing.T) {
	shopURL := shop(t, 200, 404)
	srv := goodRedis(t)
	addr := srv.Addr
	srv.Kill()
	rep := run1(t, env{addrs: []string{addr}, shopURL: shopURL, preheatAt: "-5m"}.config(t))
	want(t, rep, "redis-reachable "+addr, Fail, "not reachable")
	if len(rep.Find("maxmemory-policy")) != 0 || len(rep.Find("redis-acl")) != 0 {
		t.Fatalf("checks of an unreachable node:\n%s", dump(rep))
	}

	locked := goodRedis(t)
	if _, err := locked.Do("CONFIG", "SET", "requirepass", "right"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PREFLIGHT_TEST_REDIS_PW", "wrong")
	cfg := env{addrs: []string{locked.Addr}, shopURL: shopURL, preheatAt: "-5m", extra: "  password_env: PREFLIGHT_TEST_REDIS_PW\n"}.config(t)
	rep = run1(t, cfg)
	c := want(t, rep, "redis-reachable "+locked.Addr, Fail, "")
	if !strings.Contains(c.Fix, "$PREFLIGHT_TEST_REDIS_PW") {
		t.Fatalf("fix %q", c.Fix)
	}
	t.Setenv("PREFLIGHT_TEST_REDIS_PW", "right")
	want(t, run1(t, cfg), "redis-reachable "+locked.Addr, Pass, "")
}

// An ACL user that may not touch the proxy's keys, or may not load
// scripts, fails.
func TestPreflightACL(t *testing.T) {
	shopURL := shop(t, 200, 404)
	srv := goodRedis(t)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "otherkeys", "on", ">pw", "~other:*", "+@all"},
		{"ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-script"},
	} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PREFLIGHT_TEST_REDIS_PW", "pw")
	cfg := func(user string) *config.Config {
		return env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m",
			extra: "  username: " + user + "\n  password_env: PREFLIGHT_TEST_REDIS_PW\n  client_cache: false\n"}.config(t)
	}
	rep := run1(t, cfg("otherkeys"))
	want(t, rep, "redis-reachable "+srv.Addr, Pass, "as ACL user otherkeys")
	c := want(t, rep, "redis-acl", Fail, "NOPERM")
	if !strings.Contains(c.Fix, "ACL SETUSER otherkeys ~seckill:*") {
		t.Fatalf("fix %q", c.Fix)
	}
	rep = run1(t, cfg("noscripts"))
	n := len(lua.All())
	c = want(t, rep, "scripts "+srv.Addr, Fail, fmt.Sprintf("%d of %d scripts do not load", n, n))
	if !strings.Contains(c.Fix, "+@scripting") {
		t.Fatalf("fix %q", c.Fix)
	}
}

// This host's clock against Redis' TIME: warn beyond 50 ms, fail beyond
// 500 ms (the host clock is injected).
func TestPreflightClock(t *testing.T) {
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t)
	skewed := func(d time.Duration) Options { return Options{Now: func() time.Time { return time.Now().Add(d) }} }
	want(t, runOpts(t, cfg, skewed(200*time.Millisecond)), "clock "+srv.Addr, Warn, "behind this host")
	want(t, runOpts(t, cfg, skewed(-200*time.Millisecond)), "clock "+srv.Addr, Warn, "ahead of this host")
	rep := runOpts(t, cfg, skewed(2*time.Second))
	want(t, rep, "clock "+srv.Addr, Fail, "more than 500ms")
	if !rep.Failed() {
		t.Fatal("a clock 2 s off passed")
	}
}

// Keys of a preheated activity that never expire, or expire before end,
// fail; so does a stock key that is gone.
func TestPreflightKeyTTL(t *testing.T) {
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t)
	st := openStore(t, cfg)
	a := &cfg.Activities[0]
	if _, err := st.Preheat(context.Background(), a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	stock := st.SKUKeys(a.ID, "sku1", a.Shards).Shards[2].Stock
	if _, err := srv.Do("PERSIST", stock); err != nil {
		t.Fatal(err)
	}
	c := want(t, run1(t, cfg), "key-ttl pfact", Fail, "1 keys never expire, e.g. "+stock)
	if !strings.Contains(c.Fix, "PEXPIREAT") {
		t.Fatalf("fix %q", c.Fix)
	}
	if _, err := srv.Do("PEXPIRE", stock, "60000"); err != nil {
		t.Fatal(err)
	}
	want(t, run1(t, cfg), "key-ttl pfact", Fail, "expire before end")
	if _, err := srv.Do("DEL", stock); err != nil {
		t.Fatal(err)
	}
	want(t, run1(t, cfg), "key-ttl pfact", Fail, "1 stock keys are gone")
}

// The shop down fails; a shop answering 5xx warns.
func TestPreflightShop(t *testing.T) {
	srv := goodRedis(t)
	// A port nothing listens on.
	cfg := env{addrs: []string{srv.Addr}, shopURL: "http://127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), preheatAt: "-5m"}.config(t)
	rep := run1(t, cfg)
	want(t, rep, "shop", Fail, "connection refused")
	want(t, rep, "verify-url pfact", Fail, "connection refused")
	want(t, run1(t, env{addrs: []string{srv.Addr}, shopURL: shop(t, 503, 404), preheatAt: "-5m"}.config(t)), "shop", Warn, "answered 503")
}

// verify.url must answer 404 for a token nobody was given.
func TestPreflightVerifyURL(t *testing.T) {
	srv := goodRedis(t)
	c := want(t, run1(t, env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 200), preheatAt: "-5m"}.config(t)),
		"verify-url pfact", Fail, "200 for a made-up token pfact.sku1.0.")
	if !strings.Contains(c.Fix, "404") {
		t.Fatalf("fix %q", c.Fix)
	}
	want(t, run1(t, env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 500), preheatAt: "-5m"}.config(t)),
		"verify-url pfact", Fail, "500 for a made-up token")
}

// Secrets unset: the signing secret fails, the admin token warns.
func TestPreflightSecrets(t *testing.T) {
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t)
	os.Unsetenv(secretEnv)
	os.Unsetenv(tokenEnv)
	rep := run1(t, cfg)
	want(t, rep, "signing-secret default", Fail, "$"+secretEnv+" is empty")
	want(t, rep, "admin-token", Warn, "$"+tokenEnv+" is empty")
}

// An activity that is over fails; one running and not preheated fails;
// one with preheat_at passed and nobody preheating warns; one without
// preheat_at warns.
func TestPreflightWindows(t *testing.T) {
	srv := goodRedis(t)
	shopURL := shop(t, 200, 404)
	now := time.Now()
	rep := run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, start: now.Add(-2 * time.Hour), end: now.Add(-time.Hour)}.config(t))
	want(t, rep, "window pfact", Fail, "ended at")
	if len(rep.Find("preheat pfact")) != 0 || len(rep.Find("verify-url")) != 0 {
		t.Fatalf("an ended activity checked further:\n%s", dump(rep))
	}
	rep = run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, start: now.Add(-time.Minute), preheatAt: "-5m"}.config(t))
	want(t, rep, "window pfact", Pass, "running since")
	want(t, rep, "preheat pfact", Fail, "NOT_READY")
	rep = run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL, start: now.Add(time.Minute), preheatAt: "-5m"}.config(t))
	want(t, rep, "preheat pfact", Warn, "no serve instance has run it")
	rep = run1(t, env{addrs: []string{srv.Addr}, shopURL: shopURL}.config(t))
	want(t, rep, "preheat pfact", Warn, "no preheat_at")
	// Validation refuses end before start in a file; a config built in
	// code is still checked.
	cfg := env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m"}.config(t)
	cfg.Activities[0].End = cfg.Activities[0].Start
	want(t, run1(t, cfg), "window pfact", Fail, "is not before end")
}

// A single-node config pointing at a replica fails.
func TestPreflightReplica(t *testing.T) {
	master := goodRedis(t)
	replica := goodRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	rep := run1(t, env{addrs: []string{replica.Addr}, shopURL: shop(t, 200, 404), preheatAt: "-5m"}.config(t))
	want(t, rep, "redis-mode "+replica.Addr, Fail, "replica")
}

// Cluster: missing slots fail, full-coverage mode warns, shards on too
// few masters warn (with the shards that fix it), a single-node config
// pointing at a cluster node fails, and the local CRC16 agrees with
// CLUSTER KEYSLOT.
func TestPreflightCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	shopURL := shop(t, 200, 404)
	for _, n := range cl.Nodes {
		for _, kv := range [][]string{{"maxmemory", "256mb"}, {"appendonly", "yes"}} {
			if _, err := n.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, key := range []string{"seckill:{pfact:0}:stock:sku1", "seckill:{pfact:7}:users", "plain", "a{}b", "{}{x}", "x{y}z{w}", "seckill:{lease}:preheat:pfact"} {
		slot, err := cl.Slot(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); got != slot {
			t.Fatalf("keySlot(%q) = %d, CLUSTER KEYSLOT %d", key, got, slot)
		}
	}
	cfg := env{addrs: cl.Addrs()[:1], cluster: true, shopURL: shopURL, preheatAt: "-5m", shards: 8}.config(t)
	rep := run1(t, cfg)
	want(t, rep, "cluster-slots", Pass, "all 16384 slots served by 3 masters")
	for _, n := range cl.Nodes {
		// Found through CLUSTER NODES though only one seed is configured.
		want(t, rep, "redis-reachable "+n.Addr, Pass, "master")
		want(t, rep, "scripts "+n.Addr, Pass, "")
		want(t, rep, "cluster-require-full-coverage "+n.Addr, Warn, "cluster-require-full-coverage is yes")
	}
	if rep.Failed() {
		t.Fatalf("a healthy cluster failed:\n%s", dump(rep))
	}

	// Shards on too few masters: one shard is on one master, whatever
	// preheat places (store placement, issue 11 §3).
	rep = run1(t, env{addrs: cl.Addrs(), cluster: true, shopURL: shopURL, preheatAt: "-5m", shards: 1}.config(t))
	c := want(t, rep, "shard-spread pfact", Warn, "1 shards for 3 masters")
	m := regexp.MustCompile(`shards: (\d+)`).FindStringSubmatch(c.Fix)
	if m == nil {
		t.Fatalf("fix %q names no shards", c.Fix)
	}
	n, _ := strconv.Atoi(m[1])
	want(t, run1(t, env{addrs: cl.Addrs(), cluster: true, shopURL: shopURL, preheatAt: "-5m", shards: n}.config(t)),
		"shard-spread pfact", Pass, "preheat will spread its 3 shards evenly over the 3 masters")

	// The cluster named as a single node.
	rep = run1(t, env{addrs: cl.Addrs()[:1], shopURL: shopURL, preheatAt: "-5m", shards: 1}.config(t))
	want(t, rep, "redis-mode "+cl.Nodes[0].Addr, Fail, "part of a Redis Cluster")

	// Slots 0-99 lose their master (every node forgets it).
	for _, n := range cl.Nodes {
		if _, err := n.Do("CONFIG", "SET", "cluster-require-full-coverage", "no"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Do("CLUSTER", "DELSLOTSRANGE", "0", "99"); err != nil && !strings.Contains(err.Error(), "already unassigned") {
			t.Fatal(err)
		}
	}
	rep = run1(t, cfg)
	want(t, rep, "cluster-slots", Fail, "100 of 16384 slots have no live master (0-99)")
	want(t, rep, "cluster-require-full-coverage "+cl.Nodes[0].Addr, Pass, "")
}

// BytesPerUnit is BENCHMARKS.md's measured cost of a pending reservation.
func TestBytesPerUnitMatchesBenchmarks(t *testing.T) {
	b, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\| pending reservation \([^|]*\| (\d+) B \|`).FindSubmatch(b)
	if m == nil {
		t.Fatal("BENCHMARKS.md has no \"pending reservation\" row in \"Redis memory per reservation\"")
	}
	if got, _ := strconv.Atoi(string(m[1])); got != BytesPerUnit {
		t.Fatalf("BENCHMARKS.md says %d B per pending reservation, BytesPerUnit is %d: update one", got, BytesPerUnit)
	}
}

// redis.durable_winners: a master without the replicas winners wait for
// fails; with them it passes; fsync on a Redis without WAITAOF warns.
func TestPreflightDurableWinners(t *testing.T) {
	shopURL := shop(t, 200, 404)
	srv := goodRedis(t)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shopURL, preheatAt: "-5m"}.config(t)
	cfg.Redis.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: 50 * time.Millisecond, OnTimeout: config.DurableRefuse}
	rep := run1(t, cfg)
	c := want(t, rep, "durable-winners "+srv.Addr, Fail, "0 connected replica(s), redis.durable_winners.replicas is 1")
	if !strings.Contains(c.Detail, "refused (STORE_UNAVAILABLE)") {
		t.Fatalf("detail %q", c.Detail)
	}
	redistest.StartReplica(t, srv)
	rep = run1(t, cfg)
	want(t, rep, "durable-winners "+srv.Addr, Pass, "1 connected replica(s) for 1 wanted")
	cfg.Redis.DurableWinners.FSync = true
	rep = run1(t, cfg)
	if versionAtLeast(srv.Info("server", "redis_version"), 7, 2) {
		want(t, rep, "durable-winners "+srv.Addr, Pass, "1 connected replica(s)")
	} else {
		want(t, rep, "durable-winners "+srv.Addr, Warn, "needs WAITAOF (Redis 7.2+)")
	}
	// Off: no check at all.
	cfg.Redis.DurableWinners = config.DurableWinners{}
	for _, c := range run1(t, cfg).Checks {
		if strings.HasPrefix(c.Name, "durable-winners") {
			t.Fatalf("a durable-winners check with durable winners off: %+v", c)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{{"7.0.15", false}, {"7.2.0", true}, {"7.10.1", true}, {"8.0.0", true}, {"6.2.14", false}, {"", false}, {"x.y", false}} {
		if got := versionAtLeast(tt.v, 7, 2); got != tt.want {
			t.Errorf("versionAtLeast(%q) = %v", tt.v, got)
		}
	}
}
