package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench"
	"github.com/seckill-proxy/seckill-proxy/bench/load"
)

// loadFlags are the load-shape flags shared by run and compare.
type loadFlags struct {
	target, activity, path, userPrefix, preset string
	skus                                       listFlag
	users, tries, concurrency, slowest         int
	rate                                       float64
	ramp, hold, timeout                        time.Duration
	xff, quiet                                 bool
}

func (l *loadFlags) register(fs *flag.FlagSet, withTarget bool, defaultPreset string) {
	if withTarget {
		fs.StringVar(&l.target, "target", "http://127.0.0.1:8080", "base URL of the target")
	}
	fs.StringVar(&l.activity, "activity", "act_1001", "activity id (fills {activity} in --path)")
	fs.Var(&l.skus, "sku", "SKU id, repeatable or comma list; users spread over them (default 30021)")
	fs.StringVar(&l.path, "path", load.DefaultPath, "request path template")
	fs.IntVar(&l.users, "users", 1000, "distinct users")
	fs.IntVar(&l.tries, "tries", 1, "requests per user (loops); 0 = as many as the waveform sends")
	fs.IntVar(&l.concurrency, "concurrency", 100, "max requests in flight")
	fs.Float64Var(&l.rate, "rate", 0, "peak requests/s (open loop); 0 = closed loop as fast as the workers go")
	fs.DurationVar(&l.ramp, "ramp", 0, "open loop: linear ramp 0 → --rate over this long")
	fs.DurationVar(&l.hold, "hold", 0, "open loop: hold --rate this long, then stop (closed loop: stop after ramp+hold)")
	names := make([]string, 0, len(bench.Presets))
	for n := range bench.Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	var desc []string
	for _, n := range names {
		desc = append(desc, n+": "+bench.Presets[n].Description)
	}
	fs.StringVar(&l.preset, "preset", defaultPreset, "load profile ("+strings.Join(desc, "; ")+"); explicit flags override it")
	fs.BoolVar(&l.xff, "xff", false, "send X-Forwarded-For with a per-user client IP (10.x.y.z)")
	fs.StringVar(&l.userPrefix, "user-prefix", "u", "user ids are PREFIX+index")
	fs.DurationVar(&l.timeout, "timeout", 5*time.Second, "per-request timeout")
	fs.BoolVar(&l.quiet, "quiet", false, "no progress line on stderr")
	fs.IntVar(&l.slowest, "slowest", 0, "list the N slowest answered requests (user, try, when sent, outcome), at most 1000")
}

// config applies the preset to every load flag not set explicitly.
func (l *loadFlags) config(fs *flag.FlagSet, stderr io.Writer) (load.Config, *bench.Preset, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var preset *bench.Preset
	if l.preset != "" {
		p, ok := bench.Presets[l.preset]
		if !ok {
			return load.Config{}, nil, usagef("unknown --preset %q", l.preset)
		}
		preset = &p
		if !set["users"] {
			l.users = p.Users
		}
		if !set["tries"] {
			l.tries = p.Tries
		}
		if !set["concurrency"] {
			l.concurrency = p.Concurrency
		}
		if !set["rate"] {
			l.rate = p.Rate
		}
		if !set["ramp"] {
			l.ramp = p.Ramp
		}
		if !set["hold"] {
			l.hold = p.Hold
		}
	}
	if l.users <= 0 || l.concurrency <= 0 || l.tries < 0 || l.rate < 0 {
		return load.Config{}, nil, usagef("--users and --concurrency must be > 0, --tries and --rate ≥ 0")
	}
	if l.slowest < 0 || l.slowest > 1000 {
		return load.Config{}, nil, usagef("--slowest must be between 0 and 1000")
	}
	if l.rate > 0 && l.ramp+l.hold <= 0 {
		return load.Config{}, nil, usagef("--rate needs --ramp and/or --hold")
	}
	if l.rate == 0 && l.tries == 0 && l.hold == 0 {
		return load.Config{}, nil, usagef("closed loop with --tries 0 needs --hold")
	}
	c := load.Config{
		Target: l.target, Activity: l.activity, SKUs: l.skus, Path: l.path, Users: l.users, Tries: l.tries,
		Concurrency: l.concurrency, Rate: l.rate, Ramp: l.ramp, Hold: l.hold, XFF: l.xff,
		UserPrefix: l.userPrefix, Timeout: l.timeout, Slowest: l.slowest,
	}
	if !l.quiet {
		c.Progress = stderr
	}
	if preset != nil {
		fmt.Fprintf(stderr, "preset %s: %s\n", preset.Name, preset.Description)
	}
	return c, preset, nil
}
