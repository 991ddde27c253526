package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// Red team round 10, operator errors in the config file.

const rt10opsHead = "upstream:\n  url: http://127.0.0.1:8081\nactivities:\n  - id: a1\n" +
	"    start: 2030-01-01T10:00:00+08:00\n    end: 2030-01-01T11:00:00+08:00\n"

// rt10opsParse parses give: the config, or its FILE:LINE errors.
func rt10opsParse(t *testing.T, give string) (*Config, []Error) {
	t.Helper()
	c, err := Parse("seckill.yaml", []byte(give))
	if err == nil {
		return c, nil
	}
	var es *Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not *Errors: %v", err, err)
	}
	return nil, es.List
}

// A zero-padded number is read as octal: `stock: 010` loads 8 units,
// `stock: 0100` 64, `per_user_limit: 010` lets a buyer take 8. yaml.v3
// resolves plain scalars with strconv.ParseInt(s, 0, 64), YAML 1.1's
// octal, while YAML 1.2 (whose 0o10 the decoder also takes) reads 010 as
// ten. Meanwhile `stock: 08` and `09` (not octal) are read as 8 and 9,
// so the same column of zero-padded numbers from a spreadsheet loads some
// right and some wrong, with no message (config/decode.go integer: it
// already takes care that `stock: 1e6` means what an operator expects).
// Want: the decimal value, or a FILE:LINE error naming the ambiguity.
func TestRT10OpsZeroPaddedNumberIsOctal(t *testing.T) {
	for _, tt := range []struct {
		give string
		want int64
		get  func(*Config) int64
	}{
		{"    skus: [{id: s1, stock: 010}]\n", 10, func(c *Config) int64 { return c.Activities[0].SKUs[0].Stock }},
		{"    skus: [{id: s1, stock: 0100}]\n", 100, func(c *Config) int64 { return c.Activities[0].SKUs[0].Stock }},
		{"    skus: [{id: s1, stock: 5}]\n    per_user_limit: 010\n", 10, func(c *Config) int64 { return c.Activities[0].PerUserLimit }},
	} {
		give := rt10opsHead + tt.give
		c, errs := rt10opsParse(t, give)
		if errs != nil {
			continue // refused with FILE:LINE: fine
		}
		if got := tt.get(c); got != tt.want {
			t.Errorf("%q: read as %d, want %d or a FILE:LINE error", strings.TrimSpace(tt.give), got, tt.want)
		}
	}
}

// An identity header named X-Seckill-* (the proxy's own header family, as
// in `identity.user: {header: X-Seckill-User}`, the name the shop receives
// the buyer under) is accepted by validate, but every X-Seckill-* request
// header is stripped (proxy/request.go stripSeckillHeaders) before the
// identity is read: the configured source can never be read, and every
// buy is refused. The value is silently ignored; it must be a FILE:LINE
// error.
func TestRT10OpsIdentityHeaderTheProxyStrips(t *testing.T) {
	for _, src := range []string{
		"identity: {user: {header: X-Seckill-User}}\n",
		"identity: {device: {header: X-Seckill-Device}}\n",
		"identity: {request_id: {header: x-seckill-request}}\n",
	} {
		give := src + rt10opsHead + "    skus: [{id: s1, stock: 5}]\n"
		_, errs := rt10opsParse(t, give)
		ok := false
		for _, e := range errs {
			if e.Line == 1 {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%q: want a FILE:LINE error at line 1 (the proxy strips X-Seckill-* from requests, so the source is never read), got %v", strings.TrimSpace(src), errs)
		}
	}
}

// key_ttl_after_end shorter than pending_timeout is accepted
// (`key_ttl_after_end: 1m` with the default pending_timeout of 10m, or
// 1ns): every key of the activity, reservations and stock counters
// included, expires before the reconciler may settle a reservation left
// pending at the end (it settles only those older than pending_timeout).
// The runbook's last step ("after the end, reconcile --repair and status
// — stock adds up, nothing pending", README Operations) then finds
// nothing: the shop's orders for those tokens are never confirmed nor
// the units released, and status says "not preheated". The value is
// silently accepted; it must be a FILE:LINE error.
func TestRT10OpsKeyTTLShorterThanPendingTimeout(t *testing.T) {
	for _, extra := range []string{
		"    key_ttl_after_end: 1m\n",
		"    key_ttl_after_end: 1ns\n",
		"    key_ttl_after_end: 5m\n    pending_timeout: 30m\n",
	} {
		give := rt10opsHead + "    skus: [{id: s1, stock: 5}]\n" + extra
		_, errs := rt10opsParse(t, give)
		if errs == nil {
			t.Errorf("%q: accepted; the keys expire before a reservation pending at the end may be settled", strings.TrimSpace(extra))
		}
	}
}

// upstream.url naming the proxy's own public listener (a port copied
// twice) is accepted: every request the proxy passes or forwards comes
// back to it, and each hop forwards again until connections run out.
// validate already refuses listen == admin.listen; the shop's address is
// one line away. Want a FILE:LINE error.
func TestRT10OpsUpstreamIsTheProxyItself(t *testing.T) {
	for _, give := range []string{
		"listen: \"127.0.0.1:8081\"\n" + rt10opsHead + "    skus: [{id: s1, stock: 5}]\n",
		"listen: \":8081\"\n" + rt10opsHead + "    skus: [{id: s1, stock: 5}]\n",
	} {
		if _, errs := rt10opsParse(t, give); errs == nil {
			t.Errorf("listen %s with upstream.url http://127.0.0.1:8081: accepted; the proxy would forward to itself", strings.SplitN(give, "\n", 2)[0])
		}
	}
}

// Two activities' routes that a request cannot tell apart when one has no
// {activity}: a1 `/flash/{sku}` (every path /flash/X is a1's, X its SKU)
// and a2 `/flash/{activity}` with sku_from query. The router takes the
// first route that matches with a known activity (proxy/route.go
// resolve), and a1's route, having no {activity}, always knows its
// activity: POST /flash/a2?sku=s1 is a buy of a1's SKU "a2" (UNKNOWN_ITEM)
// and a2 can never be bought. The validator compares only routes without
// {activity} (config/validate.go activities). Want a FILE:LINE error at a2.
func TestRT10OpsRouteWithoutActivityShadowsActivityRoute(t *testing.T) {
	act := func(id, route string) string {
		return "  - id: " + id + "\n    route: " + route + "\n" +
			"    start: 2030-01-01T10:00:00+08:00\n    end: 2030-01-01T11:00:00+08:00\n    skus: [{id: s1, stock: 5}]\n"
	}
	give := "upstream:\n  url: http://127.0.0.1:8081\nactivities:\n" +
		act("a1", `{ path: "/flash/{sku}" }`) +
		act("a2", `{ path: "/flash/{activity}", sku_from: "query:sku" }`)
	if _, errs := rt10opsParse(t, give); errs == nil {
		t.Errorf("routes /flash/{sku} (a1) and /flash/{activity} (a2): accepted; every /flash/a2 request is a1's")
	}
}

// `redis: {addrs: [A, B], cluster: false}`: the explicit false is
// overridden to true without a word (config/defaults.go: more than one
// address makes Cluster true), and the shards default to 8 instead of 1.
// An operator listing a master and its replica for a single Redis wrote
// what they meant; a value set in the file and then ignored must be a
// FILE:LINE error (as redis.sentinel with redis.cluster is).
func TestRT10OpsExplicitClusterFalseOverridden(t *testing.T) {
	give := "redis: {addrs: [\"10.0.0.1:6379\", \"10.0.0.2:6379\"], cluster: false}\n" + rt10opsHead + "    skus: [{id: s1, stock: 5}]\n"
	c, errs := rt10opsParse(t, give)
	if errs == nil && c.Redis.Cluster {
		t.Errorf("redis.cluster: false with two addrs: accepted and turned into cluster: true (shards %d)", c.Activities[0].Shards)
	}
}

// identity.user.jwt.jwks_file naming a missing file, or one that is not a
// JWKS, passes validate ("ok"), and serve starts with no key at all:
// it logs "jwks: load failed; keeping the last good key set" (there is
// none) and refuses every buyer's token. redis.tls files are loaded by
// the validator "so a missing or unreadable file is reported at its line,
// not when the proxy dials" (config/validate.go redisTLS); the key file
// every buy depends on is not. Want FILE:LINE at jwks_file.
func TestRT10OpsMissingJWKSFileIsValid(t *testing.T) {
	bad := t.TempDir() + "/bad.json"
	if err := os.WriteFile(bad, []byte(`{"keys": "nope"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{t.TempDir() + "/missing.json", bad} {
		give := "identity:\n  user:\n    jwt: {jwks_file: " + file + ", issuer: https://id.example, audience: shop}\n" +
			rt10opsHead + "    skus: [{id: s1, stock: 5}]\n"
		_, errs := rt10opsParse(t, give)
		ok := false
		for _, e := range errs {
			if e.Line == 3 {
				ok = true
			}
		}
		if !ok {
			t.Errorf("jwks_file %s: want a FILE:LINE error at line 3, got %v", file, errs)
		}
	}
}

// queue.workers has a floor (1) and no ceiling: `workers: 100000000` (a
// typo, or "1e8") passes validate, and serve starts that many goroutines
// per queue-mode activity (reservation/queue.go run: one per worker, each
// at least a 2 KiB stack: ~200 GiB), so the process dies at start or at
// the first reload. The other sizes an operator types have ceilings
// (max_inflight 100000, session.max_in_flight 100000, warm_workers
// 100000). Want a FILE:LINE error above a sane bound.
func TestRT10OpsQueueWorkersUnbounded(t *testing.T) {
	give := rt10opsHead + "    skus: [{id: s1, stock: 5}]\n    mode: queue\n    queue: {workers: 100000000}\n"
	if _, errs := rt10opsParse(t, give); errs == nil {
		t.Errorf("queue.workers: 100000000 accepted: serve would start 1e8 goroutines for the activity")
	}
}

// What held: hostile or odd files are FILE:LINE errors, never a panic nor
// a silently empty config.
func TestRT10OpsOddFilesHeld(t *testing.T) {
	ok := rt10opsHead + "    skus: [{id: s1, stock: 5}]\n"
	for _, tt := range []struct{ name, give, msg string }{
		{"empty file", "", "upstream.url is required"},
		{"only a comment", "# nothing\n", "upstream.url is required"},
		{"null document", "~\n", "want a mapping"},
		{"a scalar", "hello\n", "want a mapping"},
		{"a list", "- a\n", "want a mapping"},
		{"NUL byte", "upstream:\n  url: http://127.0.0.1:8081\x00\n", "YAML syntax"},
		{"BOM inside", "upstream:\n  url: http://127.0.0.1:8081\n\ufeffactivities: []\n", "unknown key"},
		{"two documents", ok + "---\nlisten: \":1\"\n", "only one YAML document"},
		{"stock above int64", strings.Replace(ok, "stock: 5", "stock: 99999999999999999999", 1), "whole number"},
		{"stock as a string", strings.Replace(ok, "stock: 5", "stock: \"5\"", 1), "whole number"},
		{"stock 2.5", strings.Replace(ok, "stock: 5", "stock: 2.5", 1), "whole number"},
		{"shards 2.5", ok + "    shards: 2.5\n", "whole number"},
		{"unknown nested key", ok + "    queue: {worker: 3}\n", `did you mean "workers"`},
		{"anchor at top level", "base: &b {per_user_limit: 2}\n" + ok, "unknown key"},
	} {
		_, errs := rt10opsParse(t, tt.give)
		found := false
		for _, e := range errs {
			if e.Line >= 1 && strings.Contains(e.Msg, tt.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want a FILE:LINE error containing %q, got %v", tt.name, tt.msg, errs)
		}
	}
}
