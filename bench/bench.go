// Package bench ties one load run together: Redis INFO before and after, the
// run itself, verification against the proxy and the shop, and the report.
// The subpackages hold each concern (hist, load, shop, verify, report,
// redisinfo, bare, demo); cmd/seckill-bench only parses flags.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/redisinfo"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
	"github.com/seckill-proxy/seckill-proxy/bench/verify"
)

// Preset is a named load profile from the published seckill write-ups.
type Preset struct {
	Name        string
	Description string
	Users       int
	Tries       int
	Concurrency int
	Rate        float64
	Ramp, Hold  time.Duration
	// Stock is the stock the profile assumes the target was preheated with.
	Stock int64
}

// Presets are the two standard profiles.
var Presets = map[string]Preset{
	"1000users": {
		Name: "1000users", Description: "1,000 concurrent users, ramp 0, 3 loops each, stock 100 (closed loop)",
		Users: 1000, Tries: 3, Concurrency: 1000, Stock: 100,
	},
	"spike": {
		Name: "spike", Description: "open loop, 10,000 users: ramp to peak (default 5,000/s) in 3 s, hold 10 s, then fall",
		Users: 10000, Tries: 0, Concurrency: 500, Rate: 5000, Ramp: 3 * time.Second, Hold: 10 * time.Second, Stock: 100,
	},
}

// Options is one run with its checks.
type Options struct {
	Name string
	Load load.Config
	// RedisAddr, when set, is read with INFO before and after.
	RedisAddr string
	// ShopURL, when set, is asked for /internal/summary after the run.
	ShopURL string
	// ProxyBin and ProxyConfig, when set, run `status --json` after the run.
	ProxyBin, ProxyConfig string
	PerUserLimit          int64
	// LegacyTarget: the target is the shop itself, whose orders carry no token.
	LegacyTarget bool
	// Log receives warnings (e.g. Redis INFO unavailable); may be nil.
	Log io.Writer
}

// ErrInvariant is returned (wrapped) when verification finds a broken promise.
var ErrInvariant = errors.New("invariant broken")

// Execute runs one load run and verifies it. The result is returned even
// when verification fails, together with an error wrapping ErrInvariant.
func Execute(ctx context.Context, o Options) (*report.Result, error) {
	warn := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "warning: "+format+"\n", a...)
		}
	}
	var before redisinfo.Snapshot
	haveRedis := false
	if o.RedisAddr != "" {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := redisinfo.Read(rctx, o.RedisAddr)
		cancel()
		if err != nil {
			warn("redis INFO before the run: %v", err)
		} else {
			before, haveRedis = s, true
		}
	}
	res, err := load.Run(ctx, o.Load)
	if err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	var delta *redisinfo.Delta
	if haveRedis {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		after, err := redisinfo.Read(rctx, o.RedisAddr)
		cancel()
		if err != nil {
			warn("redis INFO after the run: %v", err)
		} else {
			d := redisinfo.Diff(before, after)
			delta = &d
		}
	}
	checks, verr := Check(context.Background(), o)
	out := report.Build(o.Name, res, delta, checks)
	if verr != nil {
		out.OK = false
		return out, verr
	}
	if failed := verify.Failed(checks); len(failed) > 0 {
		return out, fmt.Errorf("%w: %d check(s) failed, first: %s (%s)", ErrInvariant, len(failed), failed[0].Name, failed[0].Detail)
	}
	return out, nil
}

// Check gathers the proxy status and shop summary the options name and
// verifies them. Failing to reach a source the user asked for is an error.
func Check(ctx context.Context, o Options) ([]verify.Check, error) {
	in := verify.Input{Activity: o.Load.Activity, PerUserLimit: o.PerUserLimit, LegacyTarget: o.LegacyTarget}
	if o.ProxyBin != "" {
		if o.ProxyConfig == "" {
			return nil, errors.New("--proxy-bin needs --proxy-config")
		}
		st, err := verify.RunStatus(ctx, o.ProxyBin, o.ProxyConfig, o.Load.Activity)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		in.Status = st
	}
	if o.ShopURL != "" {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sum, err := verify.FetchSummary(sctx, o.ShopURL, o.Load.Activity)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		in.Shop = sum
	}
	if in.Status == nil && in.Shop == nil {
		return nil, nil
	}
	return verify.Verify(in), nil
}
