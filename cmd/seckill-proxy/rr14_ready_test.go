package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRR14ReadyzWaitsForStartupWarmup: serve's start-up warm-up
// (server.warm_workers: connections to its own listener, each holding a
// worker) costs CPU while it runs (README: ~0.2 s for 1,024), and a buy
// whose Redis reply waits behind it for the CPU of a loaded host may pass
// redis.timeout: 503 STORE_UNAVAILABLE with Redis healthy (CI: the very
// first buyer of TestRR14SIGHUPStormPauseResumeAndSIGTERM, sent the moment
// the listener answered). /readyz, which a balancer waits for before it
// sends buys, must not say ready before that warm-up is over; it said so
// as soon as Redis answered a PING.
//
// Here the warm-up is held open deterministically: the listener is bound
// but not served yet, so the round's requests stay unanswered until its
// read deadline.
func TestRR14ReadyzWaitsForStartupWarmup(t *testing.T) {
	rs := redistest.Start(t)
	cfg, err := config.Load(lifeConfig(t, rs.Addr, "http://127.0.0.1:1", 5, "server: { warm_workers: 8 }\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := metrics.New()
	pipe := admission.New(st, m, zap.NewNop(), time.Now)
	pipe.Apply(cfg)
	defer pipe.Close()
	srv, err := proxy.New(cfg, pipe, st, m, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ready := readiness{st, srv, pipe}
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return ready.Ping(ctx)
	}
	if err := ping(); err == nil {
		t.Error("/readyz ready before the start-up warm-up ran")
	}
	ln, err := listenPublic(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	warmed := make(chan struct{})
	go func() { defer close(warmed); srv.RunWarmups(ctx, ln.Addr().String()) }()
	// The round is under way (its connections wait in the listener's
	// backlog) for up to its 3 s read deadline.
	time.Sleep(300 * time.Millisecond)
	if err := ping(); err == nil {
		t.Error("/readyz ready while the start-up warm-up runs: a balancer sends buys that wait behind it for the CPU")
	} else {
		t.Logf("during the warm-up: %v", err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := ping()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready 10 s after the start-up warm-up began: %v", err)
		}
	}
	if srv.Warmups() < 1 {
		t.Error("/readyz ready before the start-up warm-up ended")
	}
	cancel()
	<-warmed
}
