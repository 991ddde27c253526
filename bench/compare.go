package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
	"github.com/seckill-proxy/seckill-proxy/bench/verify"
)

// Target is one system under comparison.
type Target struct {
	Name string // legacy, proxy, nginx, bare, bare-redis, hop
	URL  string
	// ShopBacked targets place orders in the shop (so the shop is reset
	// before and verified after); LegacyTarget ones are the shop itself.
	ShopBacked, LegacyTarget bool
}

// CompareOptions runs the same load against every target in turn.
type CompareOptions struct {
	Targets []Target
	Load    load.Config // Target is filled per run
	// ShopURL, when set, is reset before and verified after each
	// shop-backed run.
	ShopURL string
	// ProxyBin/ProxyConfig, when set, re-preheat (--force) before the proxy
	// run and check its status after.
	ProxyBin, ProxyConfig string
	PerUserLimit          int64
	Pause                 time.Duration // between runs, so one run's tail does not hit the next
	Out, Log              io.Writer
}

// CompareRow is one target's line of the comparison.
type CompareRow struct {
	Target Target
	Result *report.Result
	Err    error
}

// Compare runs every target and prints one table. It returns the rows and an
// error wrapping ErrInvariant when any target broke one.
func Compare(ctx context.Context, o CompareOptions) ([]CompareRow, error) {
	if len(o.Targets) == 0 {
		return nil, errors.New("no targets: give at least one of --legacy, --proxy, --nginx, --bare, --bare-redis")
	}
	var rows []CompareRow
	var broken error
	for i, t := range o.Targets {
		if ctx.Err() != nil {
			break
		}
		if i > 0 && o.Pause > 0 {
			time.Sleep(o.Pause)
		}
		fmt.Fprintf(o.Log, "== %s → %s\n", t.Name, t.URL)
		lc := o.Load
		lc.Target = t.URL
		// A fresh user prefix per run: no earlier run's purchases count.
		lc.UserPrefix = o.Load.UserPrefix + t.Name + "-" + strconv.FormatInt(time.Now().Unix(), 36) + "-"
		opt := Options{Name: t.Name, Load: lc, PerUserLimit: o.PerUserLimit, LegacyTarget: t.LegacyTarget, Log: o.Log}
		if t.ShopBacked && o.ShopURL != "" {
			if err := verify.ResetShop(ctx, o.ShopURL, lc.Activity); err != nil {
				return rows, err
			}
			opt.ShopURL = o.ShopURL
		}
		if t.Name == "proxy" && o.ProxyBin != "" {
			out, err := exec.CommandContext(ctx, o.ProxyBin, "preheat", "-c", o.ProxyConfig, "--activity", lc.Activity, "--force").CombinedOutput()
			if err != nil {
				return rows, fmt.Errorf("preheat before the proxy run: %w\n%s", err, out)
			}
			opt.ProxyBin, opt.ProxyConfig = o.ProxyBin, o.ProxyConfig
		}
		res, err := Execute(ctx, opt)
		if res == nil {
			return rows, fmt.Errorf("%s: %w", t.Name, err)
		}
		if err != nil {
			fmt.Fprintf(o.Log, "%s: %v\n", t.Name, err)
			if errors.Is(err, ErrInvariant) {
				broken = err
			}
		}
		if len(res.Checks) > 0 {
			report.PrintChecks(o.Log, res.Checks)
		}
		rows = append(rows, CompareRow{Target: t, Result: res, Err: err})
	}
	PrintCompare(o.Out, rows)
	return rows, broken
}

// PrintCompare prints the comparison table with ratios against the first
// target and against bare-redis (the ceiling for contended buys).
func PrintCompare(w io.Writer, rows []CompareRow) {
	if len(rows) == 0 {
		return
	}
	first := rows[0].Result
	var ceiling *report.Result
	for _, r := range rows {
		if r.Target.Name == "bare-redis" {
			ceiling = r.Result
		}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	var t report.Table
	t.Row("target", "answered/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "wins",
		"rps vs "+rows[0].Target.Name, "p99 vs "+rows[0].Target.Name, "rps vs bare-redis", "checks")
	for _, r := range rows {
		res := r.Result
		wins := res.Outcomes[load.OutcomeWin] + res.Outcomes[load.OutcomeOK]
		vsCeiling := "–"
		if ceiling != nil {
			vsCeiling = ratio(res.RPS, ceiling.RPS)
		}
		checks := "–"
		if len(res.Checks) > 0 {
			checks = "ok"
			if n := len(verify.Failed(res.Checks)); n > 0 {
				checks = fmt.Sprintf("%d BROKEN", n)
			}
		}
		t.Row(r.Target.Name, fmt.Sprintf("%.0f", res.RPS), report.FormatMS(res.Latency.P50), report.FormatMS(res.Latency.P99),
			report.FormatMS(res.Latency.P999), strconv.FormatInt(res.TransportErrors+res.ServerErrors, 10), strconv.FormatInt(wins, 10),
			ratio(res.RPS, first.RPS), ratio(res.Latency.P99, first.Latency.P99), vsCeiling, checks)
	}
	fmt.Fprintln(w)
	t.Write(w)
}
