package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// okAct is the smallest valid config; tests append to it so the first added
// line is always line 8. Activity-level additions are indented four spaces,
// top-level ones not at all.
const (
	head   = "upstream:\n  url: http://127.0.0.1:8081\nactivities:\n  - id: a1\n"         // lines 1-4
	window = "    start: 2026-01-01T00:00:00+08:00\n    end: 2030-01-01T00:00:00+08:00\n" // lines 5-6
	skus1  = "    skus: [{id: s1, stock: 1}]\n"                                           // line 7
	okAct  = head + window + skus1
)

// wantErr is one expected message: its line and a fragment of its text.
type wantErr struct {
	line int
	msg  string
}

func parseErrors(t *testing.T, give string) []Error {
	t.Helper()
	cfg, err := Parse("t.yaml", []byte(give))
	if err == nil {
		return nil
	}
	if cfg != nil {
		t.Errorf("Parse returned a config together with an error")
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want *Errors: %v", err, err)
	}
	return errs.List
}

func checkErrors(t *testing.T, give string, want []wantErr) {
	t.Helper()
	got := parseErrors(t, give)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), (&Errors{List: got}).Error())
	}
	for i, w := range want {
		s := got[i].Error()
		prefix := fmt.Sprintf("t.yaml:%d: ", w.line)
		if !strings.HasPrefix(s, prefix) || !strings.Contains(s, w.msg) {
			t.Errorf("error %d = %q, want prefix %q containing %q", i, s, prefix, w.msg)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 8*3600))
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.FixedZone("", 8*3600))
	want := &Config{
		Path:         "t.yaml",
		Listen:       ":8080",
		PublicPrefix: "/_seckill",
		Admin:        Admin{Listen: "127.0.0.1:9090", TokenEnv: "SECKILL_ADMIN_TOKEN"},
		Upstream: Upstream{
			URL:              "http://127.0.0.1:8081",
			Timeout:          3 * time.Second,
			MaxConns:         1024,
			SigningSecretEnv: "SECKILL_SIGNING_SECRET",
			PassTimeout:      time.Minute,
			IdleTimeout:      4 * time.Second,
			WarmConns:        DefaultWarmConns,
			ReplayMaxBytes:   DefaultReplayMaxBytes,
			ReleaseStatuses:  []string{"4xx"},
			Overflow:         OverflowQueue, // unused without max_inflight
			MinInflight:      1,
		},
		Server: Server{MaxConns: DefaultServerMaxConns, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second,
			DrainDelay: DefaultDrainDelay, MaxClockSkew: DefaultMaxClockSkew, ShutdownTimeout: 11 * time.Second, FairStartMaxHeld: DefaultFairStartMaxHeld, WarmWorkers: DefaultWarmWorkers},
		Redis: Redis{
			Addrs:       []string{"127.0.0.1:6379"},
			Timeout:     200 * time.Millisecond,
			ClientCache: true,
			KeyPrefix:   "seckill",
			BuyerMemo:   DefaultBuyerMemo,
		},
		TrustedProxies: []string{"127.0.0.1/32"},
		Reconcile:      Reconcile{ExceptionsMax: DefaultExceptionsMax},
		Identity: Identity{
			User:      Source{Header: "X-User-Id"},
			Device:    Source{Header: "X-Device-Id"},
			RequestID: Source{Header: "X-Request-Id"},
		},
		Limits: Limits{
			PerIP:      Rate{Rate: 10, Burst: 20},
			IPv4Prefix: 32, IPv6Prefix: 64,
			PerDevice: Rate{Rate: 5, Burst: 10},
			PerUser:   Rate{Rate: 2, Burst: 5},
			Fleet:     true,
		},
		Activities: []Activity{{
			ID:             "a1",
			Route:          Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy", SkuFrom: "path"},
			Start:          start,
			End:            end,
			SKUs:           []SKU{{ID: "s1", Stock: 1}},
			PerUserLimit:   1,
			MaxQty:         1,
			Shards:         1, // single Redis node: one shard
			AdmissionRate:  Rate{Rate: 20000, Burst: 30000},
			Mode:           ModeSync,
			Queue:          Queue{Workers: 32, Rate: 2000, MaxBacklog: 100000, MaxRequestBytes: DefaultQueueRequestBytes},
			PendingTimeout: 10 * time.Minute,
			OrderIDFrom:    "json:/order_id",
			KeyTTLAfterEnd: 24 * time.Hour,
		}},
	}
	assertConfig(t, cfg, want)
}

// assertConfig compares configs, times by instant: each parse of "+08:00"
// builds its own *time.Location, which reflect.DeepEqual would tell apart.
func assertConfig(t *testing.T, got, want *Config) {
	t.Helper()
	if len(got.Activities) == len(want.Activities) {
		for i := range got.Activities {
			g, w := &got.Activities[i], &want.Activities[i]
			if !g.Start.Equal(w.Start) || !g.End.Equal(w.End) {
				t.Errorf("activity %d window = %v..%v, want %v..%v", i, g.Start, g.End, w.Start, w.End)
			}
			g.Start, g.End = w.Start, w.End
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config mismatch\n got: %+v\nwant: %+v", got, want)
	}
}

func TestParseExplicitValues(t *testing.T) {
	give := `listen: "0.0.0.0:80"
public_prefix: /flash
watch: true
admin: {listen: ":9999", token_env: ADMIN_TOK}
upstream: {url: "https://shop.example/base", timeout: 1500ms, max_conns: 7, signing_secret_env: SIG,
  pass_timeout: 9s, idle_timeout: 2s, replay_max_bytes: 0, release_statuses: [4xx, "502", 3xx]}
server: {max_conns: 100, max_conns_per_ip: 4, read_timeout: 5s, write_timeout: 6s, idle_timeout: 7s}
redis:
  addrs: [r1:6379, r2:6379]
  username: u
  password_env: REDIS_PW
  timeout: 50ms
  client_cache: false
  key_prefix: sk
trusted_proxies: [10.0.0.0/8, 192.168.1.7, "::1"]
identity:
  user: {cookie: uid}
  device: {query: dev}
  request_id: {}
limits:
  per_ip: {rate: 1.5}
  per_device: {burst: 3}
  per_user: {rate: 4, burst: 4}
messages: {SOLD_OUT: gone}
activities:
  - &base
    id: q1
    route: {method: PUT, path: "/buy/{activity}", sku_from: "json:/sku", qty_from: "form:qty"}
    start: 2026-12-01T10:00:00Z
    end: 2026-12-01T20:30:00+08:00
    skus: [{id: "30021", stock: 1000000000}, {id: 7, stock: 0}]
    per_user_limit: 3
    shards: 1024
    admission_rate: {rate: 1, burst: 1}
    mode: queue
    queue: {workers: 1, rate: 0.5, max_backlog: 7}
    pending_timeout: 5s # the least: 2 × 1500ms + 2s
    verify: {url: "http://shop/orders/{token}"}
    order_id_from: "header:X-Order-Id"
    key_ttl_after_end: 1h
  - <<: *base
    id: q2
    max_qty: 2
`
	cfg, err := Parse("t.yaml", []byte(give))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	end := time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)
	act := Activity{
		ID:             "q1",
		Route:          Route{Method: "PUT", Path: "/buy/{activity}", SkuFrom: "json:/sku", QtyFrom: "form:qty"},
		Start:          start,
		End:            end,
		SKUs:           []SKU{{ID: "30021", Stock: 1e9}, {ID: "7", Stock: 0}},
		PerUserLimit:   3,
		MaxQty:         3,
		Shards:         1024,
		AdmissionRate:  Rate{Rate: 1, Burst: 1},
		Mode:           ModeQueue,
		Queue:          Queue{Workers: 1, Rate: 0.5, MaxBacklog: 7, MaxRequestBytes: DefaultQueueRequestBytes},
		PendingTimeout: 5 * time.Second,
		Verify:         Verify{URL: "http://shop/orders/{token}"},
		OrderIDFrom:    "header:X-Order-Id",
		KeyTTLAfterEnd: time.Hour,
	}
	act2 := act
	act2.ID, act2.MaxQty = "q2", 2
	want := &Config{
		Path:         "t.yaml",
		Listen:       "0.0.0.0:80",
		PublicPrefix: "/flash",
		Watch:        true,
		Admin:        Admin{Listen: ":9999", TokenEnv: "ADMIN_TOK"},
		Upstream: Upstream{URL: "https://shop.example/base", Timeout: 1500 * time.Millisecond, MaxConns: 7, SigningSecretEnv: "SIG",
			PassTimeout: 9 * time.Second, IdleTimeout: 2 * time.Second, WarmConns: 7, ReplayMaxBytes: 0, ReleaseStatuses: []string{"4xx", "502", "3xx"},
			Overflow: OverflowQueue, MinInflight: 1},
		Server: Server{MaxConns: 100, MaxConnsPerIP: 4, ReadTimeout: 5 * time.Second, WriteTimeout: 6 * time.Second, IdleTimeout: 7 * time.Second,
			DrainDelay: DefaultDrainDelay, MaxClockSkew: DefaultMaxClockSkew, ShutdownTimeout: 8 * time.Second, FairStartMaxHeld: DefaultFairStartMaxHeld, WarmWorkers: 100},
		Redis: Redis{
			Addrs:       []string{"r1:6379", "r2:6379"},
			Cluster:     true, // implied by two addresses
			Username:    "u",
			PasswordEnv: "REDIS_PW",
			Timeout:     50 * time.Millisecond,
			ClientCache: false,
			KeyPrefix:   "sk",
			BuyerMemo:   DefaultBuyerMemo,
		},
		TrustedProxies: []string{"10.0.0.0/8", "192.168.1.7", "::1"},
		Reconcile:      Reconcile{ExceptionsMax: DefaultExceptionsMax},
		Identity:       Identity{User: Source{Cookie: "uid"}, Device: Source{Query: "dev"}},
		Limits: Limits{
			PerIP:      Rate{Rate: 1.5, Burst: 20},
			IPv4Prefix: 32, IPv6Prefix: 64,
			PerDevice: Rate{Rate: 5, Burst: 3},
			PerUser:   Rate{Rate: 4, Burst: 4},
			Fleet:     true,
		},
		Messages:   map[string]string{"SOLD_OUT": "gone"},
		Activities: []Activity{act, act2},
	}
	assertConfig(t, cfg, want)
}

func TestHelpers(t *testing.T) {
	give := okAct + "trusted_proxies: [10.1.2.3, 10.0.0.0/8, \"2001:db8::1\", \"::ffff:1.2.3.4/128\"]\nmessages: {SOLD_OUT: \"已经售罄\"}\nredis: {password_env: PW_FOR_TEST}\n"
	cfg, err := Parse("t.yaml", []byte(give))
	if err != nil {
		t.Fatal(err)
	}

	gotPrefixes := cfg.TrustedPrefixes()
	wantPrefixes := []netip.Prefix{
		netip.MustParsePrefix("10.1.2.3/32"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8::1/128"),
		netip.MustParsePrefix("::ffff:1.2.3.4/128"),
	}
	if !reflect.DeepEqual(gotPrefixes, wantPrefixes) {
		t.Errorf("TrustedPrefixes() = %v, want %v", gotPrefixes, wantPrefixes)
	}

	if got := cfg.Message("SOLD_OUT", "sold out"); got != "已经售罄" {
		t.Errorf("Message(SOLD_OUT) = %q", got)
	}
	if got := cfg.Message("PAUSED", "paused"); got != "paused" {
		t.Errorf("Message(PAUSED) = %q, want the default", got)
	}

	a := cfg.Activity("a1")
	if a == nil || a != &cfg.Activities[0] {
		t.Fatalf("Activity(a1) = %p, want %p", a, &cfg.Activities[0])
	}
	if cfg.Activity("nope") != nil {
		t.Error("Activity(nope) != nil")
	}
	if s := a.SKU("s1"); s == nil || s.Stock != 1 {
		t.Errorf("SKU(s1) = %+v", s)
	}
	if a.SKU("s2") != nil {
		t.Error("SKU(s2) != nil")
	}
	if got, want := a.StartMs(), int64(1767196800000); got != want {
		t.Errorf("StartMs() = %d, want %d", got, want)
	}
	if got, want := a.EndMs(), int64(1893427200000); got != want {
		t.Errorf("EndMs() = %d, want %d", got, want)
	}

	t.Setenv("SECKILL_ADMIN_TOKEN", "adm")
	t.Setenv("SECKILL_SIGNING_SECRET", "sig")
	t.Setenv("PW_FOR_TEST", "pw")
	if cfg.AdminToken() != "adm" || cfg.SigningSecret() != "sig" || cfg.RedisPassword() != "pw" {
		t.Errorf("secrets = %q %q %q", cfg.AdminToken(), cfg.SigningSecret(), cfg.RedisPassword())
	}
	if (&Config{}).RedisPassword() != "" {
		t.Error("RedisPassword without password_env must be empty")
	}
}

func TestPresenceDefaults(t *testing.T) {
	tests := []struct {
		name  string
		give  string
		check func(*Config) bool
	}{
		{"null value means default", okAct + "    shards: ~\n", func(c *Config) bool { return c.Activities[0].Shards == 1 }},
		{"one shard by default on a single node", okAct, func(c *Config) bool { return c.Activities[0].Shards == 1 }},
		{"eight shards by default on a cluster", okAct + "redis: {addrs: [a:1, b:1]}\n", func(c *Config) bool { return c.Activities[0].Shards == 8 }},
		{"cluster flag gives cluster shards", okAct + "redis: {addrs: [a:1], cluster: true}\n", func(c *Config) bool { return c.Activities[0].Shards == 8 }},
		{"client_cache false stays false", okAct + "redis: {client_cache: false}\n", func(c *Config) bool { return !c.Redis.ClientCache }},
		{"one addr is not a cluster", okAct + "redis: {addrs: [a:1]}\n", func(c *Config) bool { return !c.Redis.Cluster }},
		{"cluster flag kept", okAct + "redis: {addrs: [a:1], cluster: true}\n", func(c *Config) bool { return c.Redis.Cluster }},
		{"max_qty follows per_user_limit", okAct + "    per_user_limit: 5\n", func(c *Config) bool { return c.Activities[0].MaxQty == 5 }},
		{"request_id disabled", okAct + "identity: {request_id: {}}\n", func(c *Config) bool { return reflect.DeepEqual(c.Identity.RequestID, Source{}) }},
		{"source replaced whole", okAct + "identity: {user: {cookie: u}}\n", func(c *Config) bool { return reflect.DeepEqual(c.Identity.User, Source{Cookie: "u"}) }},
		{"case_fold", okAct + "identity: {user: {header: X-User-Id, case_fold: true}}\n", func(c *Config) bool {
			return reflect.DeepEqual(c.Identity.User, Source{Header: "X-User-Id", CaseFold: true})
		}},
		{"numeric", okAct + "identity: {user: {query: uid, numeric: true}}\n", func(c *Config) bool { return reflect.DeepEqual(c.Identity.User, Source{Query: "uid", Numeric: true}) }},
		{"fleet limits by default", okAct, func(c *Config) bool { return c.Limits.Fleet }},
		{"fleet false kept", okAct + "limits: {fleet: false}\n", func(c *Config) bool { return !c.Limits.Fleet }},
		{"empty trusted_proxies trusts nobody", okAct + "trusted_proxies: []\n", func(c *Config) bool { return len(c.TrustedProxies) == 0 }},
		{"stock as float", okAct + "    skus: [{id: s1, stock: 1e6}]\n", func(c *Config) bool { return c.Activities[0].SKUs[0].Stock == 1e6 }},
		{"no activities", head[:strings.Index(head, "activities")], func(c *Config) bool { return len(c.Activities) == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := tt.give
			// okAct already has skus; drop the duplicate so only the override stays.
			if strings.Count(give, "skus:") == 2 {
				give = strings.Replace(give, skus1, "", 1)
			}
			cfg, err := Parse("t.yaml", []byte(give))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Errorf("unexpected config: %+v", cfg)
			}
		})
	}
}

// TestBadFileFromBrief is the file of the brief and the conformance kit: an
// unknown key at line 8, a bad time at line 9, and what is missing at the
// activity's line 7, all in one run.
func TestBadFileFromBrief(t *testing.T) {
	give := `listen: ":8080"
upstream:
  url: "http://127.0.0.1:1"
redis:
  addrs: ["127.0.0.1:6379"]
activities:
  - id: a1
    stok: 5
    start: not-a-time
`
	checkErrors(t, give, []wantErr{
		{7, `activity "a1": end is required`},
		{7, `activity "a1": skus needs at least one sku`},
		{8, `unknown key "stok" in activity (did you mean "stock" under skus?)`},
		{9, `RFC 3339`},
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("upstream: {url: http://x}\nactivities:\n  - id: a1\n    stok: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad+":4: unknown key \"stok\"") {
		t.Errorf("Load(bad) = %v, want an error at %s:4", err, bad)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = Load(missing)
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) != 1 || !strings.HasPrefix(err.Error(), missing+": ") {
		t.Errorf("Load(missing) = %v", err)
	}
}

func TestExampleLoads(t *testing.T) {
	cfg, err := Load("../examples/seckill.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Activity("act_1001")
	if a == nil || a.Shards != 4 || a.SKU("30021") == nil || a.SKU("30021").Stock != 100 {
		t.Errorf("example activity = %+v", a)
	}
	if cfg.Path != "../examples/seckill.yaml" {
		t.Errorf("Path = %q", cfg.Path)
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	give := okAct + "    shards: 0\n    mode: fast\nlisten: nope\n"
	checkErrors(t, give, []wantErr{
		{8, "shards must be between 1 and 1024"},
		{9, `mode must be "sync", "queue" or "shadow"`},
		{10, `listen: want host:port`},
	})
	if got := len(strings.Split(mustErr(t, give), "\n")); got != 3 {
		t.Errorf("Error() has %d lines, want 3", got)
	}
}

// upstream is okAct with its upstream replaced by the flow mapping {fields},
// all on line 1.
func upstream(fields string) string {
	return "upstream: {" + fields + "}\n" + strings.TrimPrefix(okAct, "upstream:\n  url: http://127.0.0.1:8081\n")
}

func mustErr(t *testing.T, give string) string {
	t.Helper()
	_, err := Parse("t.yaml", []byte(give))
	if err == nil {
		t.Fatal("no error")
	}
	return err.Error()
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		// YAML shape and types.
		{"syntax error", "upstream: [\n", []wantErr{{1, "YAML syntax"}}},
		{"two documents", okAct + "---\nlisten: x\n", []wantErr{{8, "only one YAML document"}}},
		{"top level not a mapping", "- a\n", []wantErr{{1, "want a mapping"}, {1, "upstream.url is required"}}},
		{"unknown top-level key", okAct + "listn: \":1\"\n", []wantErr{{8, `unknown key "listn" at top level (did you mean "listen"?)`}}},
		{"unknown nested key", okAct + "redis: {adrs: [a:1]}\n", []wantErr{{8, `unknown key "adrs" in redis (did you mean "addrs"?)`}}},
		{"unknown key no suggestion", okAct + "    zzzzzz: 1\n", []wantErr{{8, `unknown key "zzzzzz" in activity`}}},
		{"duplicate key", okAct + "listen: \":1\"\nlisten: \":2\"\n", []wantErr{{9, `key "listen" is already set at line 8`}}},
		{"mapping expected", strings.Replace(okAct, "upstream:\n  url: http://127.0.0.1:8081", "upstream: x", 1), []wantErr{{1, "upstream: want a mapping"}, {1, "upstream.url is required"}}},
		{"list expected", okAct + "redis: {addrs: a:1}\n", []wantErr{{8, "redis.addrs: want a list"}}},
		{"bad duration", okAct + "redis:\n  timeout: 200\n", []wantErr{{9, "redis.timeout: want a Go duration"}}},
		{"bad int", upstream("url: http://x, max_conns: many"), []wantErr{{1, "upstream.max_conns: want a whole number"}}},
		{"fractional int", okAct + "    shards: 1.5\n", []wantErr{{8, "shards: want a whole number"}}},
		{"bad bool", okAct + "redis: {client_cache: yes}\n", []wantErr{{8, "redis.client_cache: want true or false"}}},
		{"bad float", okAct + "limits: {per_ip: {rate: fast}}\n", []wantErr{{8, "limits.per_ip.rate: want a number"}}},
		{"time without zone", head + "    start: 2026-01-01T00:00:00\n    end: 2030-01-01T00:00:00+08:00\n" + skus1, []wantErr{{5, "activity.start: want an RFC 3339 time with a zone"}}},

		// Top level.
		{"upstream missing", "listen: \":1\"\n", []wantErr{{1, "upstream.url is required"}}},
		{"upstream url missing", "listen: \":1\"\nupstream:\n  timeout: 1s\n", []wantErr{{2, "upstream.url is required"}}},
		{"upstream url scheme", upstream("url: \"ftp://x\""), []wantErr{{1, "upstream.url must start with http:// or https://"}}},
		{"upstream url host", upstream("url: \"http:///x\""), []wantErr{{1, "upstream.url needs a host"}}},
		{"upstream timeout", upstream("url: http://x, timeout: 0s"), []wantErr{{1, "upstream.timeout must be positive"}}},
		{"upstream idle_timeout", upstream("url: http://x, idle_timeout: 0s"), []wantErr{{1, "upstream.idle_timeout must be positive"}}},
		{"upstream pass_timeout", upstream("url: http://x, pass_timeout: -1s"), []wantErr{{1, "upstream.pass_timeout must be positive"}}},
		{"upstream replay_max_bytes", upstream("url: http://x, replay_max_bytes: 1048577"), []wantErr{{1, "upstream.replay_max_bytes must be between 0 and 1048576, got 1048577"}}},
		{"upstream release_statuses", strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  release_statuses:\n    - 4xx\n    - 2xx\n    - \"600\"\n    - \"201\"", 1),
			[]wantErr{{5, `upstream.release_statuses: "2xx" is neither`}, {6, `"600" is neither`}, {7, `"201" is neither`}}},
		{"server limits", okAct + "server: {max_conns: 0, max_conns_per_ip: -1, read_timeout: 0s, write_timeout: -1s, idle_timeout: 0s}\n",
			[]wantErr{{8, "server.max_conns must be at least 1"}, {8, "server.max_conns_per_ip must be 0 (no bound) or more"},
				{8, "server.read_timeout must be positive"}, {8, "server.write_timeout must be positive"}, {8, "server.idle_timeout must be positive"}}},
		{"listen", okAct + "listen: 8080\n", []wantErr{{8, "listen: want host:port"}}},
		{"admin listen", okAct + "admin:\n  listen: localhost\n", []wantErr{{9, "admin.listen: want host:port"}}},
		{"public prefix", okAct + "public_prefix: _s/\n", []wantErr{{8, "public_prefix must start with"}}},
		{"env name", okAct + "admin: {token_env: \"MY TOKEN\"}\n", []wantErr{{8, "admin.token_env"}}},
		{"redis no addrs", okAct + "redis:\n  addrs: []\n", []wantErr{{9, "redis.addrs needs at least one address"}}},
		{"redis bad addr", okAct + "redis:\n  addrs:\n    - a:1\n    - nohost\n", []wantErr{{11, `redis.addrs: want host:port, got "nohost"`}}},
		{"redis timeout", okAct + "redis: {timeout: -1s}\n", []wantErr{{8, "redis.timeout must be positive"}}},
		{"key prefix braces", okAct + "redis: {key_prefix: \"{sk}\"}\n", []wantErr{{8, "redis.key_prefix"}}},
		{"exceptions max low", okAct + "reconcile:\n  exceptions_max: 10\n", []wantErr{{9, "reconcile.exceptions_max must be between 100 and 1000000"}}},
		{"exceptions max high", okAct + "reconcile: {exceptions_max: 2000000}\n", []wantErr{{8, "reconcile.exceptions_max"}}},
		{"trusted proxy", okAct + "trusted_proxies:\n  - 10.0.0.0/8\n  - nope\n", []wantErr{{10, `trusted_proxies: "nope" is neither`}}},
		{"identity two sources", okAct + "identity:\n  user: {header: A, cookie: b}\n", []wantErr{{9, "identity.user: set exactly one"}}},
		{"identity no source", okAct + "identity:\n  device: {}\n", []wantErr{{9, "identity.device: set one of"}}},
		{"identity fold and numeric", okAct + "identity:\n  user:\n    header: X-User-Id\n    case_fold: true\n    numeric: true\n", []wantErr{{12, "identity.user: numeric ids have no case"}}},
		{"identity options without source", okAct + "identity:\n  request_id: {case_fold: true}\n", []wantErr{{9, "identity.request_id: case_fold and numeric need one of"}}},
		{"identity bad header", okAct + "identity:\n  user: {header: \"X User\"}\n", []wantErr{{9, `"X User" is not a valid header name`}}},
		{"limit rate", okAct + "limits:\n  per_user: {rate: 0}\n", []wantErr{{9, "limits.per_user.rate must be positive"}}},
		{"limit burst", okAct + "limits:\n  per_device:\n    burst: 0\n", []wantErr{{10, "limits.per_device.burst must be at least 1"}}},
		{"message code", okAct + "messages:\n  SOLD_OUT: a\n  SOLDOUT: b\n", []wantErr{{10, `messages: "SOLDOUT" is not a SPEC response code`}}},

		// Activities.
		{"activity id missing", "upstream: {url: http://x}\nactivities:\n  - start: 2026-01-01T00:00:00Z\n    end: 2027-01-01T00:00:00Z\n    skus: [{id: s, stock: 1}]\n", []wantErr{{3, "activity #1: id is required"}}},
		{"activity id pattern", strings.Replace(okAct, "id: a1", "id: a.1", 1), []wantErr{{4, "id must match"}}},
		{"activity id too long", strings.Replace(okAct, "id: a1", "id: "+strings.Repeat("a", 65), 1), []wantErr{{4, "id must match"}}},
		{"activity id duplicate", okAct + "  - id: a1\n    route: {path: \"/x/{activity}/{sku}\"}\n" + window + skus1, []wantErr{{8, `activity "a1": id is already used at line 4`}}},
		{"activity not a mapping", okAct + "  - a2\n", []wantErr{{8, "activity: want a mapping"}}},
		{"skus missing", head + window, []wantErr{{4, "skus needs at least one sku"}}},
		{"skus empty", head + window + "    skus: []\n", []wantErr{{7, "skus needs at least one sku"}}},
		{"sku not a mapping", head + window + "    skus: [s1]\n", []wantErr{{7, `sku: want a mapping, got "s1"`}}},
		{"sku id missing", head + window + "    skus:\n      - stock: 1\n", []wantErr{{8, "sku id is required"}}},
		{"sku id pattern", head + window + "    skus:\n      - {id: \"a/b\", stock: 1}\n", []wantErr{{8, `sku id "a/b" must match`}}},
		{"sku id duplicate", head + window + "    skus:\n      - {id: s1, stock: 1}\n      - {id: s1, stock: 2}\n", []wantErr{{9, `sku "s1" is already listed at line 8`}}},
		{"sku stock missing", head + window + "    skus:\n      - {id: s1}\n", []wantErr{{8, "stock is required"}}},
		{"sku stock negative", head + window + "    skus:\n      - id: s1\n        stock: -1\n", []wantErr{{9, "stock must be between 0 and 1000000000"}}},
		{"sku stock too big", head + window + "    skus:\n      - {id: s1, stock: 1000000001}\n", []wantErr{{8, "stock must be between 0 and 1000000000"}}},
		{"start missing", head + "    end: 2030-01-01T00:00:00+08:00\n" + skus1, []wantErr{{4, "start is required"}}},
		{"end missing", head + "    start: 2030-01-01T00:00:00+08:00\n" + skus1, []wantErr{{4, "end is required"}}},
		{"end before start", head + "    start: 2030-01-01T00:00:00+08:00\n    end: 2030-01-01T00:00:00+09:00\n" + skus1, []wantErr{{6, "end (2030-01-01T00:00:00+09:00) must be after start"}}},
		{"per_user_limit", okAct + "    per_user_limit: 0\n", []wantErr{{8, "per_user_limit must be at least 1"}}},
		{"max_qty above limit", okAct + "    max_qty: 2\n", []wantErr{{8, "max_qty must be between 1 and per_user_limit (1), got 2"}}},
		{"max_qty zero", okAct + "    per_user_limit: 3\n    max_qty: 0\n", []wantErr{{9, "max_qty must be between 1 and per_user_limit (3), got 0"}}},
		{"shards zero", okAct + "    shards: 0\n", []wantErr{{8, "shards must be between 1 and 1024"}}},
		{"shards too many", okAct + "    shards: 1025\n", []wantErr{{8, "shards must be between 1 and 1024"}}},
		{"admission rate", okAct + "    admission_rate: {rate: 0, burst: 0}\n", []wantErr{{8, "admission_rate.rate must be positive"}, {8, "admission_rate.burst must be at least 1"}}},
		{"mode", okAct + "    mode: async\n", []wantErr{{8, `mode must be "sync", "queue" or "shadow", got "async"`}}},
		{"queue workers", okAct + "    queue:\n      workers: 0\n", []wantErr{{9, "queue.workers must be at least 1"}}},
		{"queue rate", okAct + "    queue: {rate: -1}\n", []wantErr{{8, "queue.rate must be positive"}}},
		{"queue max_backlog", okAct + "    queue:\n      max_backlog: 0\n", []wantErr{{9, "queue.max_backlog must be positive"}}},
		{"queue max_request_bytes small", okAct + "    queue:\n      max_request_bytes: 512\n", []wantErr{{9, "queue.max_request_bytes must be 1024 to 1048576, got 512"}}},
		{"queue max_request_bytes large", okAct + "    queue:\n      max_request_bytes: 2000000\n", []wantErr{{9, "queue.max_request_bytes must be 1024 to 1048576"}}},
		{"pending_timeout", okAct + "    pending_timeout: 0s\n", []wantErr{{8, "pending_timeout must be positive"}}},
		{"pending_timeout within the shop's time", okAct + "    pending_timeout: 7999ms\n",
			[]wantErr{{8, `activity "a1": pending_timeout must be at least 2 × upstream.timeout + 2s = 8s, got 7.999s`}}},
		{"pending_timeout default within a slow shop's time", strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  timeout: 5m", 1),
			[]wantErr{{5, "pending_timeout must be at least 2 × upstream.timeout + 2s = 10m2s, got 10m0s"}}},
		// A winner waiting for a slot at the shop holds its reservation
		// before it is sent: the reconciler must not release it meanwhile.
		{"pending_timeout within the wait for a shop slot", strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  max_inflight: 1\n  overflow: wait\n  overflow_wait: 6s", 1) + "    pending_timeout: 13s\n",
			[]wantErr{{11, `activity "a1": pending_timeout must be at least 2 × upstream.timeout + upstream.overflow_wait + 2s = 14s, got 13s`}}},
		{"key_ttl_after_end", okAct + "    key_ttl_after_end: -1h\n", []wantErr{{8, "key_ttl_after_end must be positive"}}},
		// A sync activity that spills winners into its queue (overflow:
		// queue) needs the queue's drain time too, as queue mode does.
		{"key_ttl_after_end below a spilled queue's drain", strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  max_inflight: 1\n  overflow: queue", 1) +
			"    queue: {rate: 1, max_backlog: 100000}\n    key_ttl_after_end: 2h\n",
			[]wantErr{{11, "max_backlog / queue.rate (upstream.overflow: queue spills winners into the queue)"}}},
		{"verify scheme", okAct + "    verify: {url: \"tcp://x/{token}\"}\n", []wantErr{{8, "verify.url must start with http:// or https://"}}},
		{"verify token", okAct + "    verify:\n      url: http://x/orders\n", []wantErr{{9, "verify.url must contain {token}"}}},
		{"order_id_from kind", okAct + "    order_id_from: body:id\n", []wantErr{{8, "order_id_from must be json:/pointer or header:NAME"}}},
		{"order_id_from pointer", okAct + "    order_id_from: json:order_id\n", []wantErr{{8, "order_id_from needs a JSON pointer"}}},
		{"order_id_from header", okAct + "    order_id_from: \"header:\"\n", []wantErr{{8, "order_id_from needs a header name"}}},

		// Routes.
		{"route method", okAct + "    route:\n      method: post\n", []wantErr{{9, `route.method must be one of GET POST PUT PATCH DELETE, got "post"`}}},
		{"route path slash", okAct + "    route: {path: \"buy/{sku}\"}\n", []wantErr{{8, `route.path must start with "/"`}}},
		{"route path query", okAct + "    route: {path: \"/buy/{sku}?x=1\"}\n", []wantErr{{8, "without query or fragment"}}},
		{"route path unknown placeholder", okAct + "    route: {path: \"/buy/{item}\"}\n", []wantErr{{8, `may only use {activity} and {sku} as whole segments, got "{item}"`}}},
		{"route path partial segment", okAct + "    route: {path: \"/buy/sku-{sku}\"}\n", []wantErr{{8, `got "sku-{sku}"`}}},
		{"route path twice", okAct + "    route: {path: \"/{sku}/{sku}\"}\n", []wantErr{{8, "uses {sku} twice"}}},
		{"route path lacks sku", okAct + "    route:\n      path: /buy/{activity}\n", []wantErr{{9, "must contain a {sku} segment when sku_from is path"}}},
		{"sku_from form", okAct + "    route: {path: /buy, sku_from: \"cookie:x\"}\n", []wantErr{{8, `route.sku_from must be path, query:NAME, form:NAME or json:/pointer, got "cookie:x"`}}},
		{"sku_from empty name", okAct + "    route: {path: /buy, sku_from: \"query:\"}\n", []wantErr{{8, `route.sku_from needs a name after "query:"`}}},
		{"sku_from pointer", okAct + "    route: {path: /buy, sku_from: \"json:sku\"}\n", []wantErr{{8, "route.sku_from needs a JSON pointer"}}},
		{"sku_from pointer escape", okAct + "    route: {path: /buy, sku_from: \"json:/a~2\"}\n", []wantErr{{8, `"~" not followed by 0 or 1`}}},
		{"qty_from path", okAct + "    route: {qty_from: path}\n", []wantErr{{8, "route.qty_from cannot be path"}}},
		{"qty_from form", okAct + "    route: {qty_from: \"header:q\"}\n", []wantErr{{8, "route.qty_from must be empty, query:NAME"}}},
		{"route path dot segment", okAct + "    route: {path: \"/api/../buy/{sku}\"}\n", []wantErr{{8, `must not have ".." segments`}}},
		{"route path empty segment", okAct + "    route: {path: \"/api//buy/{sku}\"}\n", []wantErr{{8, "must not have empty segments"}}},
		{"route path params", okAct + "    route: {path: \"/buy;x/{sku}\"}\n", []wantErr{{8, `literal "buy;x" may only use`}}},
		{"route path escape", okAct + "    route: {path: \"/b%75y/{sku}\"}\n", []wantErr{{8, `literal "b%75y" may only use`}}},
		{"pass_methods unknown", okAct + "    route:\n      pass_methods: [GET, FETCH]\n", []wantErr{{9, `route.pass_methods: "FETCH" is not one of GET HEAD POST PUT PATCH DELETE OPTIONS`}}},
		{"pass_methods lower case", okAct + "    route:\n      pass_methods:\n        - get\n", []wantErr{{10, `route.pass_methods: "get" is not one of`}}},
		{"pass_methods own method", okAct + "    route:\n      method: PUT\n      pass_methods: [PUT]\n", []wantErr{{10, "PUT is the route's own method"}}},
		{"pass_methods HEAD on GET", okAct + "    route:\n      method: GET\n      pass_methods: [OPTIONS, HEAD]\n", []wantErr{{10, "HEAD runs a GET route's handler"}}},
		{"pass_methods twice", okAct + "    route:\n      pass_methods: [GET, GET]\n", []wantErr{{9, "lists GET twice"}}},
		{"field_cookies unknown", okAct + "    route:\n      field_cookies: ignore\n", []wantErr{{9, `route.field_cookies must be refuse or allow, got "ignore"`}}},
		{"case_sensitive not bool", okAct + "    route: {case_sensitive: maybe}\n", []wantErr{{8, "case_sensitive: want true or false"}}},
		{"route conflict in case", okAct + "    route: {path: \"/buy/{sku}\"}\n  - id: a2\n    route:\n      path: /BUY/{sku}\n" + window + skus1,
			[]wantErr{{11, `route POST /BUY/{sku} is already used by activity "a1"`}}},
		{"route conflict", okAct + "    route: {path: \"/buy/{sku}\"}\n  - id: a2\n    route:\n      path: /buy/{sku}\n" + window + skus1,
			[]wantErr{{11, `activity "a2": route POST /buy/{sku} is already used by activity "a1"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, tt.give, tt.want)
		})
	}
}

// TestValidationAccepts pins forms that look odd but are allowed, so a
// stricter rule later does not break existing configs by accident.
func TestValidationAccepts(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"shared route with {activity}", okAct + "  - id: a2\n" + window + skus1},
		{"same path other method", okAct + "    route: {path: \"/buy/{sku}\"}\n  - id: a2\n    route: {method: PUT, path: \"/buy/{sku}\"}\n" + window + skus1},
		{"route case and pass methods", okAct + "    route: {path: \"/Buy/{sku}\", case_sensitive: true, pass_methods: [GET, HEAD, OPTIONS]}\n"},
		{"sku from query", okAct + "    route: {path: /buy, sku_from: \"query:sku\", qty_from: \"json:/q~1x\"}\n"},
		{"bare IPv6 trusted proxy", okAct + "trusted_proxies: [\"::1\", \"fd00::/8\"]\n"},
		{"request_id disabled", okAct + "identity: {request_id: {}}\n"},
		{"sku id as number", head + window + "    skus: [{id: 30021, stock: 5}]\n"},
		{"merge key", okAct + "  - <<: {start: 2026-01-01T00:00:00Z, end: 2027-01-01T00:00:00Z}\n    id: a2\n    skus: [{id: x, stock: 0}]\n"},
		{"empty file is only missing upstream", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, tt.give)
			if tt.give == "" {
				if len(errs) != 1 || errs[0].Line != 1 || !strings.Contains(errs[0].Msg, "upstream.url is required") {
					t.Errorf("errors = %v", errs)
				}
				return
			}
			if len(errs) > 0 {
				t.Errorf("unexpected errors:\n%s", (&Errors{List: errs}).Error())
			}
		})
	}
}

// TestHostileYAML makes sure anchors cannot make decoding loop or explode.
func TestHostileYAML(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"self merge", "upstream: &a {<<: *a}\n"},
		{"merge fan-out", "a: &a {url: http://x}\nb: &b {<<: [*a, *a, *a, *a, *a, *a, *a, *a]}\nc: &c {<<: [*b, *b, *b, *b, *b, *b, *b, *b]}\nd: &d {<<: [*c, *c, *c, *c, *c, *c, *c, *c]}\ne: &e {<<: [*d, *d, *d, *d, *d, *d, *d, *d]}\nupstream: {<<: [*e, *e, *e, *e, *e, *e, *e, *e]}\n"},
		{"self alias list", "activities: &a [*a]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(tt.give)); err == nil {
				t.Error("want an error")
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(okAct))
	f.Add([]byte("upstream: &a {<<: *a}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse must return exactly one of config and error: %v %v", cfg, err)
		}
		if err == nil {
			return
		}
		var errs *Errors
		if !errors.As(err, &errs) || len(errs.List) == 0 {
			t.Fatalf("error %T %v is not a non-empty *Errors", err, err)
		}
		for _, e := range errs.List {
			if e.Line < 1 || e.File != "f.yaml" {
				t.Fatalf("bad error position: %+v", e)
			}
		}
	})
}

func TestClientPrefixValidation(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{"ipv4_prefix: 7", "limits.ipv4_prefix must be 8..32 bits, got 7"},
		{"ipv6_prefix: 129", "limits.ipv6_prefix must be 16..128 bits, got 129"},
	} {
		src := "upstream: { url: \"http://127.0.0.1:8081\" }\nlimits:\n  " + tt.give + "\n"
		_, err := Parse("t.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "t.yaml:3: "+tt.want) {
			t.Errorf("%s: got %v, want t.yaml:3: %s", tt.give, err, tt.want)
		}
	}
}

func TestUpstreamWarmConnsBounds(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"  warm_conns: -1\n", "t.yaml:4: upstream.warm_conns must be 0 (none) or more, got -1"},
		{"  max_conns: 4\n  warm_conns: 5\n", "t.yaml:5: upstream.warm_conns (5) cannot exceed upstream.max_conns (4)"},
	} {
		_, err := Parse("t.yaml", []byte("upstream:\n  url: http://127.0.0.1:8081\n  timeout: 1s\n"+c.yaml+
			"activities:\n  - id: a1\n    start: 2026-01-01T00:00:00+08:00\n    end: 2030-01-01T00:00:00+08:00\n    skus: [{id: s1, stock: 1}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.yaml, err, c.want)
		}
	}
}
