package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// fuzzSeedFiles are the example configs shipped with the repo; FuzzLoad
// starts from each (a ConfigMap's embedded config is cut out too).
var fuzzSeedFiles = []string{
	"../examples/seckill.yaml",
	"../deploy/proxy/seckill.yaml",
	"../deploy/kubernetes/edge/configmap.yaml",
	"../deploy/kubernetes/sidecar/configmap.yaml",
}

// embeddedConfig cuts the block scalar under "seckill.yaml: |" out of a
// Kubernetes ConfigMap, or returns nil.
func embeddedConfig(data []byte) []byte {
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if !strings.HasSuffix(strings.TrimSpace(l), "seckill.yaml: |") {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " ")) + 2
		var out []string
		for _, b := range lines[i+1:] {
			if strings.TrimSpace(b) != "" && len(b)-len(strings.TrimLeft(b, " ")) < indent {
				break
			}
			if len(b) >= indent {
				b = b[indent:]
			}
			out = append(out, b)
		}
		return []byte(strings.Join(out, "\n"))
	}
	return nil
}

// yamlBlocks returns the ```yaml blocks of a Markdown file.
func yamlBlocks(data []byte) [][]byte {
	var out [][]byte
	rest := string(data)
	for {
		i := strings.Index(rest, "```yaml\n")
		if i < 0 {
			return out
		}
		rest = rest[i+len("```yaml\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			return out
		}
		out = append(out, []byte(rest[:j]))
		rest = rest[j:]
	}
}

// FuzzLoad feeds arbitrary bytes to Load, as an operator's broken file
// would be: it must never panic or hang, every error must be FILE:LINE:
// message with a line inside the file, and a config it accepts must hold
// the invariants the proxy relies on (loadedInvariants). The seeds are
// every example config of the repo and the README's YAML blocks, plus
// the hostile shapes found so far (testdata/fuzz/FuzzLoad).
func FuzzLoad(f *testing.F) {
	for _, p := range fuzzSeedFiles {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatalf("seed %s: %v", p, err)
		}
		f.Add(data)
		if emb := embeddedConfig(data); emb != nil {
			f.Add(emb)
		}
	}
	for _, p := range []string{"../README.md", "../docs/verify-signature.md"} {
		if data, err := os.ReadFile(p); err == nil {
			for _, b := range yamlBlocks(data) {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(okAct))
	f.Add([]byte(""))
	f.Add([]byte("\xef\xbb\xbf" + okAct))
	f.Add([]byte(strings.ReplaceAll(okAct, "\n", "\r\n")))
	f.Add([]byte(okAct + "---\n" + okAct))
	f.Add([]byte("upstream: &a {<<: *a}\n"))
	// Shapes of the defects found (hostile_load_test.go), for the
	// mutator to start from.
	f.Add([]byte("x: &a {k0: 1, k1: 1}\ny: &b [*a, *a]\nactivities: [{id: a1, skus: *b}, {id: a1, skus: *b}]\n"))
	f.Add([]byte("# note\u2028\nupstream: {url: \"http://127.0.0.1:8081?x#y\"}\nmessages: {<<: {SOLD_OUT: ${X}}}\n"))
	f.Add([]byte("upstream:\n  url: http://127.0.0.1:8081\n  timeout: 3s\n max_conns: \"5\"\n\tlisten: \"\xff\"\n"))
	u16 := []byte{0xFF, 0xFE}
	for _, r := range "upstream:\n  url: http://127.0.0.1:8081\nlisten: x\n" {
		u16 = append(u16, byte(r), 0)
	}
	f.Add(u16)
	dir := f.TempDir()
	path := filepath.Join(dir, "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // bounded input; size limits are tested on their own
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// No hang: a worker stuck on one input shows no progress, only
		// "hung while minimizing"; this names the input and where it is
		// stuck (the panic, from another goroutine, prints every stack).
		watchdog := time.AfterFunc(fuzzHang, func() {
			debug.SetTraceback("all")
			panic(fmt.Sprintf("Load of %d bytes still running after %s: %q", len(data), fuzzHang, data))
		})
		defer watchdog.Stop()
		cfg, err := Load(path)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load must return exactly one of config and error: %v %v", cfg, err)
		}
		if err != nil {
			checkErrorPositions(t, path, data, err)
			return
		}
		loadedInvariants(t, cfg)
		// Parsing is a function of the bytes: a reload of an unchanged
		// file gives the same config.
		again, err := Parse(path, data)
		if err != nil {
			t.Fatalf("the same bytes failed the second time: %v", err)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("the same bytes loaded differently:\n%+v\n%+v", cfg, again)
		}
	})
}

// fuzzHang is how long one Load of at most 64 KiB may take, generously
// (the fuzzer runs niced on a busy machine; a Load takes milliseconds).
const fuzzHang = 30 * time.Second

// checkErrorPositions asserts that err is a non-empty *Errors whose every
// entry names file and a line of data, and prints as one FILE:LINE:
// message line per problem.
func checkErrorPositions(t *testing.T, file string, data []byte, err error) {
	t.Helper()
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) == 0 {
		t.Fatalf("error %T %v is not a non-empty *Errors", err, err)
	}
	// Lines as editors count them: LF, CRLF or a lone CR.
	lines := bytes.Count(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\n")) +
		bytes.Count(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\r")) + 1
	for _, e := range errs.List {
		if e.File != file || e.Line < 1 || e.Line > lines {
			t.Fatalf("bad error position (file has %d lines): %+v", lines, e)
		}
		if e.Msg == "" || strings.ContainsAny(e.Msg, "\r\n") || len(e.Msg) > maxMsgBytes+64 {
			t.Fatalf("message must be one non-empty line of at most ~%d bytes: %q", maxMsgBytes, e.Msg)
		}
	}
	printed := strings.Split(err.Error(), "\n")
	if len(printed) != len(errs.List) {
		t.Fatalf("%d errors printed as %d lines", len(errs.List), len(printed))
	}
	for _, l := range printed {
		if !strings.HasPrefix(l, file+":") {
			t.Fatalf("error line %q does not start with %s:LINE:", l, file)
		}
	}
}

// loadedInvariants checks what the rest of the proxy assumes of a config
// Load accepted: it divides by, sizes by, and adds up these values.
func loadedInvariants(t *testing.T, c *Config) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted config breaks an invariant: "+format, args...)
	}
	// fits reports whether base + n*unit stays within a Duration, computed
	// without overflowing.
	fits := func(ds ...float64) bool {
		sum := 0.0
		for _, d := range ds {
			sum += d
		}
		return !math.IsNaN(sum) && sum < math.MaxInt64/2
	}
	rate := func(name string, r Rate) {
		if math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Rate < MinRate || r.Rate > MaxRate {
			fail("%s.rate %g", name, r.Rate)
		}
		if r.Burst < 1 || r.Burst > MaxBurst {
			fail("%s.burst %d", name, r.Burst)
		}
	}
	pos := func(name string, d time.Duration) {
		if d < MinNetTimeout {
			fail("%s %s is under %s", name, d, MinNetTimeout)
		}
	}
	u := &c.Upstream
	if httpURL(u.URL) != "" {
		fail("upstream.url %q", u.URL)
	}
	if u.Timeout <= 0 || u.Timeout > MaxUpstreamTimeout || u.MaxConns < 1 || u.WarmConns < 0 || u.WarmConns > u.MaxConns {
		fail("upstream %+v", u)
	}
	pos("upstream.pass_timeout", u.PassTimeout)
	pos("upstream.idle_timeout", u.IdleTimeout)
	if u.MaxInflight < 0 || u.MaxInflight > 0 && (u.MinInflight < 1 || u.MinInflight > u.MaxInflight) || u.OverflowWait < 0 {
		fail("upstream in-flight %+v", u)
	}
	if len(c.SigningKeys()) == 0 {
		fail("no signing key")
	}
	s := &c.Server
	if s.MaxConns < 1 || s.MaxConnsPerIP < 0 || s.ShutdownTimeout < u.Timeout || s.FairStartMaxHeld < 1 || s.WarmWorkers < 0 || s.WarmWorkers > s.MaxConns || s.DrainDelay < 0 || s.MaxClockSkew < 0 {
		fail("server %+v", s)
	}
	pos("server.read_timeout", s.ReadTimeout)
	pos("server.write_timeout", s.WriteTimeout)
	pos("server.idle_timeout", s.IdleTimeout)
	pos("upstream.timeout", u.Timeout)
	r := &c.Redis
	pos("redis.timeout", r.Timeout)
	if r.Timeout <= 0 || r.Timeout > MaxRedisTimeout || r.KeyPrefix == "" || r.BuyerMemo < 0 || r.FlushDelay < 0 {
		fail("redis %+v", r)
	}
	if len(r.Addrs) == 0 && !r.Sentinel.Enabled() || r.Sentinel.Enabled() && len(r.Sentinel.Addrs) == 0 {
		fail("redis has no address: %+v", r)
	}
	if d := &r.DurableWinners; d.Enabled() && (d.Timeout < time.Millisecond || d.Replicas > MaxDurableReplicas) {
		fail("durable_winners %+v", d)
	}
	if len(c.TrustedPrefixes()) != len(c.TrustedProxies) {
		fail("trusted_proxies %q", c.TrustedProxies)
	}
	rate("limits.per_ip", c.Limits.PerIP)
	rate("limits.per_device", c.Limits.PerDevice)
	rate("limits.per_user", c.Limits.PerUser)
	if ss := &c.Identity.User.Session; ss.URL != "" {
		if ss.CacheSize < 1 || ss.MaxInFlight < 1 || ss.TTL <= 0 || ss.NegativeTTL <= 0 || ss.Timeout <= 0 {
			fail("session %+v", ss)
		}
	}
	if j := &c.Identity.User.JWT; j.Enabled() && len(j.Algorithms) == 0 {
		fail("jwt without algorithms")
	}
	if c.Reconcile.ExceptionsMax < MinExceptionsMax {
		fail("reconcile.exceptions_max %d", c.Reconcile.ExceptionsMax)
	}
	ids := map[string]bool{}
	for i := range c.Activities {
		a := &c.Activities[i]
		if !idPattern.MatchString(a.ID) || ids[a.ID] {
			fail("activity id %q", a.ID)
		}
		ids[a.ID] = true
		if !a.End.After(a.Start) {
			fail("activity %s: end %s not after start %s", a.ID, a.End, a.Start)
		}
		if len(a.SKUs) == 0 {
			fail("activity %s has no SKU", a.ID)
		}
		skus := map[string]bool{}
		for _, k := range a.SKUs {
			if !idPattern.MatchString(k.ID) || skus[k.ID] || k.Stock < 0 || k.Stock > maxStock {
				fail("activity %s: sku %+v", a.ID, k)
			}
			skus[k.ID] = true
		}
		if a.PerUserLimit < 1 || a.MaxQty < 1 || a.MaxQty > a.PerUserLimit || a.Shards < 1 || a.Shards > 1024 {
			fail("activity %s: limits %d/%d shards %d", a.ID, a.PerUserLimit, a.MaxQty, a.Shards)
		}
		rate("activity "+a.ID+": admission_rate", a.AdmissionRate)
		q := &a.Queue
		if q.Workers < 1 || q.Workers > MaxQueueWorkers || q.MaxBacklog < 1 || q.MaxBacklog > MaxQueueBacklog || q.MaxRequestBytes < 1024 {
			fail("activity %s: queue %+v", a.ID, q)
		}
		if math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) || q.Rate < MinRate || q.Rate > MaxRate {
			fail("activity %s: queue.rate %g", a.ID, q.Rate)
		}
		sec := float64(time.Second)
		// reservation/queue.go: claimIdle; reconcile.go: the queue's age
		// limit; MinKeyTTLAfterEnd: all sums of durations.
		if !fits(30*sec, 3*float64(u.Timeout), 2*float64(q.Workers)/q.Rate*sec) ||
			!fits(float64(a.PendingTimeout), float64(q.MaxBacklog)/q.Rate*sec, float64(KeyTTLReconcileMargin)) {
			fail("activity %s: queue durations overflow: %+v", a.ID, q)
		}
		if a.PendingTimeout < MinPendingTimeout(*u) || MinKeyTTLAfterEnd(c, a) <= 0 || a.KeyTTLAfterEnd < MinKeyTTLAfterEnd(c, a) {
			fail("activity %s: pending_timeout %s key_ttl_after_end %s (least %s)", a.ID, a.PendingTimeout, a.KeyTTLAfterEnd, MinKeyTTLAfterEnd(c, a))
		}
		if a.End.Add(a.KeyTTLAfterEnd).Before(a.End) {
			fail("activity %s: end + key_ttl_after_end overflows", a.ID)
		}
		if a.FairStart < 0 || a.FairStart > 0 && a.FairStartSpread < MinFairStartSpread {
			fail("activity %s: fair_start %s spread %s", a.ID, a.FairStart, a.FairStartSpread)
		}
		if a.Signature.Enabled() && a.Signature.Window <= 0 {
			fail("activity %s: signature.window %s", a.ID, a.Signature.Window)
		}
		if a.Mode != ModeSync && a.Mode != ModeQueue && a.Mode != ModeShadow {
			fail("activity %s: mode %q", a.ID, a.Mode)
		}
		if a.IsShadow() != (a.Shadow() != nil) {
			fail("activity %s: shadow copy not prepared", a.ID)
		}
	}
}
