// Package e2e is the in-process end-to-end harness of seckill-proxy: real
// redis-server processes (single node or a 3-master cluster), a recording
// test shop, configs with free ports, proxy instances wired as `serve` wires
// them, and a spike driver that tallies answers by SPEC code. Nothing Redis
// decides is mocked.
package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Secret is the signing secret every harness config uses; the shop verifies
// X-Seckill-Signature with it.
const Secret = "e2e-signing-secret"

// SecretEnv is the environment variable the harness configs name for the
// signing secret. It is set once per process, so tests may run in parallel.
const SecretEnv = "SECKILL_E2E_SIGNING_SECRET"

var setSecret sync.Once

// SKU is the id of the one SKU an Activity sells unless SKUs is set.
const SKU = "sku1"

// BuyPath is the default buy route.
const BuyPath = "/api/seckill/{activity}/{sku}/buy"

// Activity is one activity of a harness config. Zero fields take the
// harness defaults noted on each.
type Activity struct {
	ID      string
	Method  string // default POST
	Path    string // default BuyPath
	SkuFrom string // default path
	QtyFrom string // default "" (qty 1)
	// Start and End default to one minute ago and one hour from now.
	Start, End   time.Time
	Stock        int64         // of SKU, when SKUs is empty
	SKUs         []config.SKU  // several SKUs
	Shards       int           // default 4
	PerUserLimit int64         // default 1
	MaxQty       int64         // default PerUserLimit
	Pending      time.Duration // pending_timeout; default the config's
	EligibleOnly bool          // eligible_only: only users on the activity's list may buy
	NoVerify     bool          // no verify.url (default: the shop's /internal/orders)
	// AdmissionRate is the admission_rate as YAML flow; default far above any test's load.
	AdmissionRate string
	Mode          string // default sync
	ShadowHeaders bool   // shadow_headers (mode: shadow)
	// CaseSensitive and PassMethods are the route's case_sensitive and pass_methods.
	CaseSensitive bool
	PassMethods   []string
	// FairStart and FairStartSpread are fair_start and fair_start_spread
	// (0: left out).
	FairStart, FairStartSpread time.Duration
	// BundleRoute is the activity's bundle_route as YAML flow; default none.
	BundleRoute string
}

// Options is one proxy config. Zero fields take the harness defaults.
type Options struct {
	Redis   []string
	Cluster bool
	ShopURL string
	// UpstreamTimeout defaults to 3 s.
	UpstreamTimeout time.Duration
	// RedisTimeout defaults to 200 ms (× redistest.TimeoutScale under the
	// race detector).
	RedisTimeout time.Duration
	KeyPrefix    string // default seckill
	// User is the identity.user source as YAML flow, default "{ header: X-User-Id }".
	User string
	// Limits is the body of `limits:` as YAML flow; default far above any test's load.
	Limits     string
	Messages   map[string]string
	Activities []Activity
	// SigningKeys, when set, is upstream.signing_keys as YAML flow (and
	// signing_secret_env is left out); the shop must then be given the
	// keys with SetKeys.
	SigningKeys string
	// UpstreamExtra are more `upstream:` keys, one "key: value" a line.
	UpstreamExtra []string
	// Server is the body of `server:` as YAML flow; default none.
	Server string
	// SentinelMaster and Sentinels, when set, reach Redis through
	// Sentinel (redis.sentinel) instead of Redis/Cluster.
	SentinelMaster string
	Sentinels      []string
	// RedisTLS is redis.tls as YAML flow; default none (plain TCP).
	RedisTLS string
	// RedisExtra are more `redis:` keys, one "key: value" a line.
	RedisExtra []string
}

// YAML renders o as a config file. Listen ports are free ports of this
// machine; local rate limits are set far above any test's load so the
// tests exercise what Redis decides, not a local limiter.
func (o Options) YAML(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("listen: %q", "127.0.0.1:"+strconv.Itoa(redistest.FreePort(t)))
	w("admin:")
	w("  listen: %q", "127.0.0.1:"+strconv.Itoa(redistest.FreePort(t)))
	w("upstream:")
	w("  url: %q", o.ShopURL)
	w("  timeout: %s", orDur(o.UpstreamTimeout, 3*time.Second))
	if o.SigningKeys != "" {
		w("  signing_keys: %s", o.SigningKeys)
	} else {
		w("  signing_secret_env: %s", SecretEnv)
	}
	for _, l := range o.UpstreamExtra {
		w("  %s", l)
	}
	if o.Server != "" {
		w("server: %s", o.Server)
	}
	w("redis:")
	if o.SentinelMaster != "" {
		w("  sentinel: { master_set: %q, addrs: [%s] }", o.SentinelMaster, quoteAll(o.Sentinels))
	} else {
		w("  addrs: [%s]", quoteAll(o.Redis))
		// Several addresses are a cluster's seeds (an explicit false beside
		// them is a config error).
		w("  cluster: %v", o.Cluster || len(o.Redis) > 1)
	}
	if o.RedisTLS != "" {
		w("  tls: %s", o.RedisTLS)
	}
	w("  timeout: %s", orDur(o.RedisTimeout, redistest.TimeoutScale*200*time.Millisecond))
	w("  key_prefix: %s", or(o.KeyPrefix, "seckill"))
	for _, l := range o.RedisExtra {
		w("  %s", l)
	}
	w("identity:")
	w("  user: %s", or(o.User, "{ header: X-User-Id }"))
	if o.Limits != "" {
		w("limits: %s", o.Limits)
	} else {
		w("limits:")
		w("  per_ip: { rate: 1000000, burst: 1000000 }")
		w("  per_device: { rate: 1000000, burst: 1000000 }")
		w("  per_user: { rate: 1000000, burst: 1000000 }")
	}
	if len(o.Messages) > 0 {
		w("messages:")
		keys := make([]string, 0, len(o.Messages))
		for k := range o.Messages {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			w("  %s: %q", k, o.Messages[k])
		}
	}
	w("activities:")
	now := time.Now()
	for _, a := range o.Activities {
		w("  - id: %s", a.ID)
		w("    route:")
		w("      method: %s", or(a.Method, "POST"))
		w("      path: %q", or(a.Path, BuyPath))
		w("      sku_from: %q", or(a.SkuFrom, "path"))
		w("      qty_from: %q", a.QtyFrom)
		if a.CaseSensitive {
			w("      case_sensitive: true")
		}
		if len(a.PassMethods) > 0 {
			w("      pass_methods: [%s]", strings.Join(a.PassMethods, ", "))
		}
		start, end := a.Start, a.End
		if start.IsZero() {
			start = now.Add(-time.Minute)
		}
		if end.IsZero() {
			end = now.Add(time.Hour)
		}
		w("    start: %s", start.Format(time.RFC3339Nano))
		w("    end: %s", end.Format(time.RFC3339Nano))
		w("    skus:")
		skus := a.SKUs
		if len(skus) == 0 {
			skus = []config.SKU{{ID: SKU, Stock: a.Stock}}
		}
		for _, k := range skus {
			w("      - { id: %q, stock: %d }", k.ID, k.Stock)
		}
		limit := a.PerUserLimit
		if limit == 0 {
			limit = 1
		}
		maxQty := a.MaxQty
		if maxQty == 0 {
			maxQty = limit
		}
		w("    per_user_limit: %d", limit)
		w("    max_qty: %d", maxQty)
		shards := a.Shards
		if shards == 0 {
			shards = 4
		}
		w("    shards: %d", shards)
		w("    admission_rate: %s", or(a.AdmissionRate, "{ rate: 1000000, burst: 1000000 }"))
		w("    mode: %s", or(a.Mode, "sync"))
		if a.Pending > 0 {
			w("    pending_timeout: %s", a.Pending)
		}
		if a.EligibleOnly {
			w("    eligible_only: true")
		}
		if a.ShadowHeaders {
			w("    shadow_headers: true")
		}
		if a.FairStart != 0 {
			w("    fair_start: %s", a.FairStart)
		}
		if a.FairStartSpread != 0 {
			w("    fair_start_spread: %s", a.FairStartSpread)
		}
		if a.BundleRoute != "" {
			w("    bundle_route: %s", a.BundleRoute)
		}
		if !a.NoVerify {
			w("    verify:")
			w("      url: %q", strings.TrimSuffix(o.ShopURL, "/")+"/internal/orders?token={token}")
		}
	}
	return b.String()
}

// Config renders and parses o with config.Parse (defaults and validation
// included) and fails the test on any error.
func (o Options) Config(t testing.TB) *config.Config {
	t.Helper()
	setSecret.Do(func() { _ = os.Setenv(SecretEnv, Secret) })
	y := o.YAML(t)
	cfg, err := config.Parse("e2e.yaml", []byte(y))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
