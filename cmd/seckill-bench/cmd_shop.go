package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/bench/shop"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

func cmdShop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("shop", "[flags]", stderr)
	var (
		listen, dsn, secret string
		cfg                 shop.Config
		stock, keys         listFlag
	)
	fs.StringVar(&listen, "listen", "127.0.0.1:8081", "listen address")
	fs.StringVar(&dsn, "db", "", `database: "sqlite:PATH" or a "postgres://..." DSN (default: SQLite in a temp file)`)
	fs.DurationVar(&cfg.Latency, "latency", 0, "added delay per order")
	fs.Float64Var(&cfg.FailRate, "fail-rate", 0, "fraction of orders answered 500 (no order made)")
	fs.Float64Var(&cfg.TimeoutRate, "timeout-rate", 0, "fraction of orders made but answered only after --hang")
	fs.DurationVar(&cfg.Hang, "hang", 10*time.Second, "how long --timeout-rate orders sleep (above the proxy's upstream timeout)")
	fs.BoolVar(&cfg.Legacy, "legacy", false, "legacy mode: sell from a stock row per SKU (SELECT … FOR UPDATE / conditional UPDATE); untokened buys are orders")
	fs.Var(&stock, "stock", "legacy stock: activity/sku=N (repeatable) or N as default for any SKU")
	fs.StringVar(&secret, "signing-secret", os.Getenv("SECKILL_SIGNING_SECRET"), "verify X-Seckill-Signature with this HMAC key (default $SECKILL_SIGNING_SECRET)")
	fs.Var(&keys, "signing-key", "verify X-Seckill-Signature with the keys of upstream.signing_keys: ID=ENV (repeatable), the secret read from $ENV; replaces --signing-secret")
	fs.BoolVar(&cfg.SigningV1Only, "signing-v1-only", false, "verify only v1 of X-Seckill-Signature (not method and path), as shops did before v2")
	fs.BoolVar(&cfg.Reset, "reset", true, "empty the orders and stock tables at start (the demo shop is throwaway)")
	logFormat := fs.String("log-format", "json", "json or console")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := shopRates(cfg); err != nil {
		return err
	}
	m, def, err := shop.ParseStock(stock)
	if err != nil {
		return usageError{err}
	}
	cfg.Stock, cfg.DefaultStock, cfg.SigningSecret = m, def, secret
	for _, k := range keys {
		id, env, ok := strings.Cut(k, "=")
		if !ok || id == "" || env == "" {
			return usageError{fmt.Errorf("--signing-key %q: want ID=ENV", k)}
		}
		cfg.SigningKeys = append(cfg.SigningKeys, signing.Key{ID: id, Secret: []byte(os.Getenv(env))})
	}
	if dsn == "" {
		dir, err := os.MkdirTemp("", "seckill-shop-")
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }() // best effort: a temp dir the shop no longer uses
		dsn = "sqlite:" + filepath.Join(dir, "shop.db")
	}
	cfg.DB = dsn
	log, err := newLogger(*logFormat)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr sync errors are not actionable

	s, err := shop.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = s.Close() // the listen error is the one to report
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	log.Info("demo shop listening", zap.String("addr", ln.Addr().String()), zap.String("db", redactDSN(dsn)),
		zap.Bool("legacy", cfg.Legacy), zap.Bool("signed", secret != ""))
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return s.Close()
	case err := <-errc:
		_ = s.Close() // Serve's error is the one to report
		return err
	}
}

// shopRates refuses rates and durations the shop cannot honour: a fraction
// outside 0..1 (2 meant as "2 %") or NaN would fail or hang every order, or
// none, with no word, and the bench report would blame the proxy.
func shopRates(cfg shop.Config) error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"--fail-rate", cfg.FailRate}, {"--timeout-rate", cfg.TimeoutRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return usagef("%s %v: want a fraction from 0 to 1 (0.02 for 2 %%)", r.name, r.v)
		}
	}
	if cfg.Latency < 0 {
		return usagef("--latency %s: want 0 or more", cfg.Latency)
	}
	if cfg.Hang < 0 {
		return usagef("--hang %s: want 0 or more", cfg.Hang)
	}
	return nil
}

func newLogger(format string) (*zap.Logger, error) {
	var c zap.Config
	switch format {
	case "json":
		c = zap.NewProductionConfig()
	case "console":
		c = zap.NewDevelopmentConfig()
	default:
		return nil, usagef("--log-format %q: want json or console", format)
	}
	l, err := c.Build()
	if err != nil {
		return nil, fmt.Errorf("logger: %w", err)
	}
	return l, nil
}

// redactDSN hides a password in a postgres DSN before logging it.
func redactDSN(dsn string) string {
	if u, err := urlParse(dsn); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
	}
	return dsn
}
