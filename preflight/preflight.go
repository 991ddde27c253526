// Package preflight checks, before a sale, everything the proxy depends on
// that its config cannot show: every Redis node (reachable with the
// configured ACL, eviction policy, memory for the stock, persistence,
// clock, scripts, cluster slots and where the shards land), the keys of
// preheated activities, the shop and its verify endpoint, the secrets, and
// the activities' windows. Each check is pass, warn or fail, with a
// one-line fix for the latter two.
package preflight

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Result is a check's verdict.
type Result string

// Results.
const (
	Pass Result = "pass"
	Warn Result = "warn" // works, but risky: the fix is advised
	Fail Result = "fail" // do not start the sale like this
)

// Check is one finding.
type Check struct {
	// Name is the check and what it looked at, e.g.
	// "maxmemory-policy 127.0.0.1:6379" or "window flash_1001".
	Name   string `json:"name"`
	Result Result `json:"result"`
	Detail string `json:"detail"`
	// Fix is one line saying what to do ("" on pass).
	Fix string `json:"fix"`
}

// Report is every check of one run, in the order run.
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Result == Fail {
			return true
		}
	}
	return false
}

// Count returns how many checks had result res.
func (r Report) Count(res Result) int {
	n := 0
	for _, c := range r.Checks {
		if c.Result == res {
			n++
		}
	}
	return n
}

// Find returns the checks whose name starts with prefix (for tests and
// tools).
func (r Report) Find(prefix string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// Options tune a run.
type Options struct {
	// Now is this host's clock (default time.Now); tests skew it.
	Now func() time.Time
	// HTTP calls the shop (default: a client with a 5 s timeout, as the
	// reconciler's).
	HTTP *http.Client
	// Log receives the store's own messages (default: none).
	Log *zap.Logger
}

// Thresholds.
const (
	// ClockWarn and ClockFail bound this host's clock against Redis' TIME:
	// windows are judged by the proxy's clock, reservation ages and lease
	// counters by Redis'.
	ClockWarn = 50 * time.Millisecond
	ClockFail = 500 * time.Millisecond
	// BytesPerUnit is what one unit sold costs Redis at most: a pending
	// reservation of one unit (record + user entry + pending index), 329 B
	// measured in BENCHMARKS.md ("Redis memory per reservation"; a test
	// keeps the two in step). Preflight budgets twice that per unit of
	// stock, for fragmentation, queue-mode stream entries and request-id
	// bits.
	BytesPerUnit = 329
	// HeadroomFactor is the "× 2" of the memory budget.
	HeadroomFactor = 2
	// MemoryWarnShare: used + budget above this share of the limit warns
	// (the 70 % memory alert of the dashboards).
	MemoryWarnShare = 0.7
)

// run carries one run's state between the checks.
type run struct {
	cfg   *config.Config
	opt   Options
	rep   Report
	nodes []*node      // every Redis node found, seeds first
	st    *store.Store // the proxy's own view of Redis (nil: could not open)
	// slotOwner is the address of each slot's live master (cluster only).
	slotOwner []string
}

func (r *run) add(name string, res Result, detail, fix string) {
	if res == Pass {
		fix = ""
	}
	r.rep.Checks = append(r.rep.Checks, Check{Name: name, Result: res, Detail: detail, Fix: fix})
}

func (r *run) pass(name, detail string)      { r.add(name, Pass, detail, "") }
func (r *run) warn(name, detail, fix string) { r.add(name, Warn, detail, fix) }
func (r *run) fail(name, detail, fix string) { r.add(name, Fail, detail, fix) }

// Run runs every check against what cfg names. It never fails itself:
// whatever cannot be reached or read is a failed (or warned) check.
func Run(ctx context.Context, cfg *config.Config, opt Options) Report {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.HTTP == nil {
		opt.HTTP = &http.Client{Timeout: 5 * time.Second}
	}
	if opt.Log == nil {
		opt.Log = zap.NewNop()
	}
	r := &run{cfg: cfg, opt: opt}
	defer r.close()

	r.secrets()
	r.windows()
	r.redisNodes(ctx)
	r.openStore(ctx)
	for _, n := range r.nodes {
		if n.c != nil {
			r.nodeChecks(ctx, n)
		}
	}
	r.spread(ctx)
	r.keys(ctx)
	r.shop(ctx)
	r.verify(ctx)
	return r.rep
}

func (r *run) close() {
	for _, n := range r.nodes {
		if n.c != nil {
			n.c.Close()
		}
	}
	if r.st != nil {
		r.st.Close()
	}
}

// activities are the activities not over yet (an ended one is reported
// by windows and checked no further).
func (r *run) activities() []*config.Activity {
	now := r.opt.Now()
	var out []*config.Activity
	for i := range r.cfg.Activities {
		a := &r.cfg.Activities[i]
		if now.Before(a.End) {
			out = append(out, a)
		}
	}
	return out
}

// secrets: the signing key(s) and the admin token, in this process's
// environment (run preflight where serve runs).
func (r *run) secrets() {
	for i, k := range r.cfg.SigningKeys() {
		name := "signing-secret " + k.ID
		switch {
		case k.Secret() != "":
			r.pass(name, "$"+k.SecretEnv+" is set")
		case i == 0:
			r.fail(name, "$"+k.SecretEnv+" is empty here: winners would be signed with an empty key, and a shop that checks X-Seckill-Signature refuses every one",
				"export "+k.SecretEnv+" (the secret the shop verifies with) where serve runs, and run preflight there")
		default:
			r.warn(name, "$"+k.SecretEnv+" is empty: the key signs nothing while it is not first, but moved first it would sign with an empty key",
				"export "+k.SecretEnv+" before the rotation, or drop the key from upstream.signing_keys")
		}
	}
	if r.cfg.AdminToken() != "" {
		r.pass("admin-token", "$"+r.cfg.Admin.TokenEnv+" is set")
	} else {
		r.warn("admin-token", "$"+r.cfg.Admin.TokenEnv+" is empty: the /admin/ API and the dashboard's pause/resume are disabled (403); the CLI still works",
			"export "+r.cfg.Admin.TokenEnv+" (a long random string) where serve runs")
	}
}

// windows: start before end, not over; and when each activity is
// preheated is checked with the keys (it needs Redis).
func (r *run) windows() {
	now := r.opt.Now()
	for i := range r.cfg.Activities {
		a := &r.cfg.Activities[i]
		name := "window " + a.ID
		switch {
		case !a.Start.Before(a.End):
			r.fail(name, fmt.Sprintf("start %s is not before end %s", ts(a.Start), ts(a.End)), "fix start and end of activity "+a.ID)
		case !now.Before(a.End):
			r.fail(name, fmt.Sprintf("ended at %s (%s ago)", ts(a.End), ago(now.Sub(a.End))),
				"move the window of activity "+a.ID+" or remove it from the config")
		case !now.Before(a.Start):
			r.pass(name, fmt.Sprintf("running since %s, ends %s (in %s)", ts(a.Start), ts(a.End), ago(a.End.Sub(now))))
		default:
			r.pass(name, fmt.Sprintf("starts %s (in %s), ends %s", ts(a.Start), ago(a.Start.Sub(now)), ts(a.End)))
		}
	}
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ago rounds a duration for people.
func ago(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// sortedKeys is the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
