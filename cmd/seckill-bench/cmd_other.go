package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench"
	"github.com/seckill-proxy/seckill-proxy/bench/bare"
	"github.com/seckill-proxy/seckill-proxy/bench/demo"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
)

var urlParse = url.Parse

func cmdBare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bare", "[--listen ADDR] [--status N --body JSON]", stderr)
	listen := fs.String("listen", "127.0.0.1:8082", "listen address")
	status := fs.Int("status", 410, "status of every answer (200 with --body '{\"order_id\":\"bare\"}': a shop that takes every order at once)")
	body := fs.String("body", "", "body of every answer (default: a SOLD_OUT body)")
	if err := parse(fs, args); err != nil {
		return err
	}
	h := bare.Handler()
	if *status != 410 || *body != "" {
		h = bare.FixedHandler(*status, []byte(*body))
	}
	fmt.Fprintf(stderr, "bare handler on %s: every request → %d fixed body\n", *listen, *status)
	return bare.ListenAndServe(ctx, *listen, h, "seckill-bench-bare")
}

func cmdHop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hop", "--upstream HOST:PORT [--listen ADDR]", stderr)
	listen := fs.String("listen", "127.0.0.1:8084", "listen address")
	upstream := fs.String("upstream", "", "host:port of the shop (required)")
	timeout := fs.Duration("timeout", 3*time.Second, "per-request upstream timeout")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *upstream == "" {
		return usagef("--upstream is required")
	}
	fmt.Fprintf(stderr, "hop on %s: every request → %s (one fasthttp HostClient)\n", *listen, *upstream)
	return bare.ListenAndServe(ctx, *listen, bare.HopHandler(*upstream, *timeout), "seckill-bench-hop")
}

func cmdBareSale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bare-sale", "--redis ADDR --upstream HOST:PORT [--stock N] [--listen ADDR]", stderr)
	listen := fs.String("listen", "127.0.0.1:8085", "listen address")
	addr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	upstream := fs.String("upstream", "", "host:port of the shop winners are forwarded to (required)")
	stock := fs.Int64("stock", 100, "units to sell (SET on start and on POST /_reset)")
	timeout := fs.Duration("timeout", 3*time.Second, "per-request upstream timeout")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *upstream == "" {
		return usagef("--upstream is required")
	}
	t, err := bare.NewSaleTarget(ctx, *addr, *upstream, *stock, *timeout)
	if err != nil {
		return err
	}
	defer t.Close()
	fmt.Fprintf(stderr, "bare-sale on %s: one per-user EVALSHA on %s until sold out (then 410 from memory), winners → %s (stock %d; POST /_reset starts again)\n", *listen, *addr, *upstream, *stock)
	return bare.ListenAndServe(ctx, *listen, t.Handler(), "seckill-bench-bare-sale")
}

func cmdBareRedis(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bare-redis", "--redis ADDR [--stock N] [--listen ADDR]", stderr)
	listen := fs.String("listen", "127.0.0.1:8083", "listen address")
	addr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	stock := fs.Int64("stock", 100, "units to sell (SET on start)")
	perUser := fs.Bool("per-user", false, "one unit per X-User-Id: the script also checks and records the buyer (409 ALREADY_PURCHASED on a repeat)")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := bare.NewRedisTargetUsers(ctx, *addr, *stock, *perUser)
	if err != nil {
		return err
	}
	defer t.Close()
	fmt.Fprintf(stderr, "bare-redis handler on %s: one EVALSHA per request on %s key %s (stock %d)\n", *listen, *addr, bare.StockKey, *stock)
	return bare.ListenAndServe(ctx, *listen, t.Handler(), "seckill-bench-bare-redis")
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "--proxy-bin PATH [flags]", stderr)
	var o demo.Options
	fs.StringVar(&o.ProxyBin, "proxy-bin", "", "seckill-proxy binary (required)")
	fs.IntVar(&o.Users, "users", 5000, "distinct users")
	fs.IntVar(&o.Tries, "tries", 3, "requests per user")
	fs.Int64Var(&o.Stock, "stock", 100, "units of the demo SKU")
	fs.IntVar(&o.Concurrency, "concurrency", 200, "max requests in flight")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temp dir (config, logs, SQLite) after a successful run")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.ProxyBin == "" {
		return usagef("--proxy-bin is required (go build -o bin/seckill-proxy ./cmd/seckill-proxy)")
	}
	if o.Users <= 0 || o.Tries <= 0 || o.Stock <= 0 || o.Concurrency <= 0 {
		return usagef("--users, --tries, --stock and --concurrency must be > 0")
	}
	o.Out, o.Err = stdout, stderr
	return demo.Run(ctx, o)
}

func cmdCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", "[--legacy URL] [--proxy URL] [--nginx URL] [--bare-redis URL] [--bare URL] [--hop URL] [flags]", stderr)
	var (
		lf                    loadFlags
		urls                  = map[string]*string{}
		shopURL, jsonPath     string
		proxyBin, proxyConfig string
		perUserLimit          int64
		pause                 time.Duration
	)
	order := []struct{ name, help string }{
		{"legacy", "the legacy shop alone (seckill-bench shop --legacy)"},
		{"proxy", "seckill-proxy in front of the shop"},
		{"nginx", "nginx proxy_pass in front of the shop"},
		{"bare-redis", "seckill-bench bare-redis (one script call per request)"},
		{"bare", "seckill-bench bare (fixed body)"},
		{"hop", "seckill-bench hop (a plain reverse hop to the shop)"},
	}
	for _, o := range order {
		urls[o.name] = fs.String(o.name, "", "base URL of "+o.help)
	}
	lf.register(fs, false, "spike")
	fs.StringVar(&shopURL, "shop", "", "shop base URL: reset before and verified after legacy/proxy/nginx runs")
	fs.StringVar(&proxyBin, "proxy-bin", "", "seckill-proxy binary: preheat --force before and status after the proxy run")
	fs.StringVar(&proxyConfig, "proxy-config", "", "seckill-proxy config for --proxy-bin")
	fs.Int64Var(&perUserLimit, "per-user-limit", 1, "units one user may hold")
	fs.DurationVar(&pause, "pause", 3*time.Second, "pause between runs")
	fs.StringVar(&jsonPath, "json", "", "write all results as a JSON array to FILE")
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
	var targets []bench.Target
	for _, o := range order {
		if u := *urls[o.name]; u != "" {
			targets = append(targets, bench.Target{Name: o.name, URL: u,
				ShopBacked: o.name == "legacy" || o.name == "proxy" || o.name == "nginx", LegacyTarget: o.name == "legacy" || o.name == "nginx"})
		}
	}
	if len(targets) == 0 {
		return usagef("give at least one target: --legacy, --proxy, --nginx, --bare-redis, --bare, --hop")
	}
	rows, err := bench.Compare(ctx, bench.CompareOptions{
		Targets: targets, Load: lc, ShopURL: shopURL, ProxyBin: proxyBin, ProxyConfig: proxyConfig,
		PerUserLimit: perUserLimit, Pause: pause, Out: stdout, Log: stderr,
	})
	if jsonPath != "" && len(rows) > 0 {
		all := make([]*report.Result, 0, len(rows))
		for _, r := range rows {
			all = append(all, r.Result)
		}
		if werr := writeJSONArray(jsonPath, all); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func writeJSONArray(path string, v []*report.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := report.EncodeJSON(f, v); err != nil {
		_ = f.Close() // the encode error is the one to report
		return err
	}
	return f.Close() // a failed close can lose the end of the file
}
