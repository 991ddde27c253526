package main

import (
	"context"
	"errors"
	"io"

	"github.com/seckill-proxy/seckill-proxy/bench"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "--target URL [flags]", stderr)
	var (
		lf                                      loadFlags
		jsonPath, chartPath, redisAddr, shopURL string
		proxyBin, proxyConfig                   string
		perUserLimit                            int64
		legacyTarget                            bool
	)
	lf.register(fs, true, "")
	fs.StringVar(&jsonPath, "json", "", "write the JSON result to FILE")
	fs.StringVar(&chartPath, "chart", "", "write the SVG chart to FILE.svg")
	fs.StringVar(&redisAddr, "redis", "", "Redis ADDR to read INFO from before and after")
	fs.StringVar(&shopURL, "shop", "", "shop base URL, verified via /internal/summary after the run")
	fs.StringVar(&proxyBin, "proxy-bin", "", "seckill-proxy binary, runs \"status -c CFG --json\" after the run")
	fs.StringVar(&proxyConfig, "proxy-config", "", "seckill-proxy config for --proxy-bin")
	fs.Int64Var(&perUserLimit, "per-user-limit", 1, "units one user may hold (verified against the shop)")
	fs.BoolVar(&legacyTarget, "legacy-target", false, "the target is the shop itself (orders without token are expected)")
	if err := parse(fs, args); err != nil {
		return err
	}
	lc, _, err := lf.config(fs, stderr)
	if err != nil {
		return err
	}
	if proxyBin != "" && proxyConfig == "" {
		return usagef("--proxy-bin needs --proxy-config")
	}
	res, err := bench.Execute(ctx, bench.Options{
		Name: "run", Load: lc, RedisAddr: redisAddr, ShopURL: shopURL, ProxyBin: proxyBin, ProxyConfig: proxyConfig,
		PerUserLimit: perUserLimit, LegacyTarget: legacyTarget, Log: stderr,
	})
	if res == nil {
		return err
	}
	report.Print(stdout, res)
	var werr error
	if jsonPath != "" {
		werr = report.WriteJSON(jsonPath, res)
	}
	if chartPath != "" {
		werr = errors.Join(werr, report.WriteSVG(chartPath, res))
	}
	return errors.Join(err, werr)
}
