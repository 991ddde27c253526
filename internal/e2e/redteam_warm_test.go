package e2e_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rwRelay is a TCP relay on 127.0.0.1 in front of the proxy: it accepts
// connections at once but forwards them (from 127.0.0.1, so the proxy
// still sees its own host) only for the first `pass` of them, and only
// once release is closed. It stands for the scheduler delaying the warm-up
// connections' dials / accepts on a loaded 2-core machine.
type rwRelay struct {
	ln       net.Listener
	accepted atomic.Int64
	release  chan struct{}
	pass     int64
	firstReq chan string // the first request's bytes as sent by Warm
	once     sync.Once
}

func rwStartRelay(t *testing.T, target string, pass int64) *rwRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rwRelay{ln: ln, release: make(chan struct{}), pass: pass, firstReq: make(chan string, 1)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := r.accepted.Add(1)
			go func() {
				defer func() { _ = c.Close() }()
				<-r.release
				if n > r.pass {
					// never forwarded: the client's request is lost (its
					// dial "succeeded" but it never reaches the handler)
					time.Sleep(4 * time.Second)
					return
				}
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = u.Close() }()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return r
}

// rwIdleConns opens n keep-alive connections to addr, each having made one
// request (so each holds a listener worker), and keeps them open.
func rwIdleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle conn %d: %v", i, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_, _ = c.Write([]byte("GET /_seckill/time HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			t.Fatalf("idle conn %d: %q %v", i, line, err)
		}
		out = append(out, c)
	}
	return out
}

// TestRedTeamWarmPrefixReloadLeaksNonceToShop: Warm builds its request
// from the public prefix in force when it starts. A reload that changes
// public_prefix while the warm-up's connections are on their way makes
// those requests ordinary pass-through traffic: the shop receives
// GET /_seckill/_warm with Seckill-Proxy-Warm: <the process's nonce>
// (the header is not X-Seckill-*, so it is not stripped). The nonce is
// the only thing guarding the warm path from same-host clients.
func TestRedTeamWarmPrefixReloadLeaksNonceToShop(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rwp", Stock: 5}}}, func(c *config.Config) { c.Server.WarmWorkers = 4 })
	relay := rwStartRelay(t, p.Addr, 100)
	done := make(chan int, 1)
	go func() { done <- p.Server.Warm(relay.ln.Addr().String(), 4) }()
	e2e.Eventually(t, 3*time.Second, "the warm-up's connections at the relay", func() bool { return relay.accepted.Load() == 4 })
	next := *p.Cfg
	next.PublicPrefix = "/_flash"
	if err := p.Server.Apply(&next); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	close(relay.release)
	got := <-done
	var leaked []string
	for _, rq := range shop.Requests() {
		if v := rq.Header.Get("Seckill-Proxy-Warm"); v != "" {
			leaked = append(leaked, rq.Path+" nonce="+v)
		}
	}
	if len(leaked) > 0 {
		t.Fatalf("Warm made %d ready; the shop received %d warm-up requests carrying the process's nonce, e.g. %s",
			got, len(leaked), leaked[0])
	}
}

// TestRedTeamWarmTakesBuyersConnSlots: warmCap takes max_conns/2 whatever
// the listener already serves. With more than half the slots in use (2 s
// before a start: buyers polling, fair_start holds), the warm-up's
// connections take the rest, the rendezvous cannot complete (some were
// refused), so those that got in hold their slot for the full second; a
// buyer connecting in that second is refused by fasthttp's Concurrency
// limit (a bare 503, not a SPEC answer) where without the warm-up he
// would have been served.
func TestRedTeamWarmTakesBuyersConnSlots(t *testing.T) {
	for _, tc := range []struct{ name, server string }{
		{"max_conns", "{ max_conns: 20 }"},
		// a balancer on the proxy's host (trusted_proxies' default is
		// 127.0.0.1/32): its connections and the warm-up's share one IP
		{"max_conns_per_ip", "{ max_conns_per_ip: 20 }"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Server: tc.server,
				Activities: []e2e.Activity{{ID: "rwc", Stock: 50}}}, func(c *config.Config) { c.Server.WarmWorkers = 20 })
			rwIdleConns(t, p.Addr, 14) // 14 of 20 slots: buyers' keep-alive connections
			// Baseline: a 15th connection is served.
			if got := e2e.Do(&fasthttp.Client{}, p.Addr, e2e.Req{URI: "/api/seckill/rwc/" + e2e.SKU + "/buy",
				Header: [][2]string{{"X-User-Id", "base"}, {"Connection", "close"}}}); got.Code != "WIN" {
				t.Fatalf("baseline buy: %d %s %v", got.Status, got.Body, got.Err)
			}
			done := make(chan int, 1)
			t0 := time.Now()
			go func() { done <- p.Server.Warm(p.Addr, 20) }()
			time.Sleep(150 * time.Millisecond)
			got := e2e.Do(&fasthttp.Client{}, p.Addr, e2e.Req{URI: "/api/seckill/rwc/" + e2e.SKU + "/buy",
				Header: [][2]string{{"X-User-Id", "during"}}})
			ready := <-done
			t.Logf("warm-up made %d ready in %v; buyer during it: %d %q %v", ready, time.Since(t0), got.Status, got.Body, got.Err)
			if got.Code != "WIN" {
				t.Fatalf("a buyer connecting during the warm-up (14/20 busy) was not served: %d %q (err %v); warm-up ready=%d",
					got.Status, got.Body, got.Err, ready)
			}
		})
	}
}

// TestRedTeamWarmPartialRoundHoldsASecond: when not every warm-up
// connection reaches the handler, each that did holds its worker for the
// full second; Warm then reports 0 ready although workers were made.
// Shutdown during it waits for the held ones but does not hang.
func TestRedTeamWarmPartialRoundHoldsASecond(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rwh", Stock: 5}}}, nil)
	relay := rwStartRelay(t, p.Addr, 9) // 9 of 10 reach the proxy
	close(relay.release)
	done := make(chan int, 1)
	t0 := time.Now()
	go func() { done <- p.Server.Warm(relay.ln.Addr().String(), 10) }()
	time.Sleep(200 * time.Millisecond)
	p.Server.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts := time.Now()
	if err := p.Server.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown during a warm-up: %v", err)
	}
	sd := time.Since(ts)
	ready := <-done
	took := time.Since(t0)
	t.Logf("partial round: ready=%d, Warm took %v, Shutdown took %v", ready, took, sd)
	if sd > 2*time.Second {
		t.Fatalf("Shutdown took %v during a warm-up", sd)
	}
}

// TestRedTeamWarmConcurrentTraffic: warm-ups (direct and RunWarmups with
// reloads moving an activity's start into the lead window) run while
// buyers buy and public endpoints are polled; under -race. Every buy is
// answered, no warm-up request reaches the shop.
func TestRedTeamWarmConcurrentTraffic(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rwt", Stock: 1000}}}, func(c *config.Config) { c.Server.WarmWorkers = 100 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan struct{})
	go func() { defer close(runDone); p.Server.RunWarmups(ctx, p.Addr) }()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 40; j++ {
				got := e2e.Buy(p.Addr, "rwt", "u"+string(rune('a'+i))+time.Now().Format("150405.000000000"))
				if got.Code != "WIN" {
					bad.Add(1)
					t.Logf("buy: %d %s %v", got.Status, got.Body, got.Err)
				}
			}
		}(i)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := 0; j < 5; j++ {
			_ = p.Server.Warm(p.Addr, 50)
		}
	}()
	// reloads: an extra activity whose start is 1.5 s away, moved twice
	for k := 0; k < 2; k++ {
		next := *p.Cfg
		a := next.Activities[0]
		a.ID = "rwt2"
		a.Start = time.Now().Add(1500 * time.Millisecond)
		a.End = a.Start.Add(time.Hour)
		next.Activities = append(append([]config.Activity(nil), next.Activities...), a)
		if err := p.Server.Apply(&next); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		time.Sleep(600 * time.Millisecond)
	}
	wg.Wait()
	cancel()
	<-runDone
	if bad.Load() > 0 {
		t.Fatalf("%d buys not WIN during warm-ups", bad.Load())
	}
	for _, rq := range shop.Requests() {
		if rq.Header.Get("Seckill-Proxy-Warm") != "" || strings.Contains(rq.Path, "_warm") {
			t.Fatalf("a warm-up request reached the shop: %s", rq.Path)
		}
	}
	t.Logf("warm-ups run: %d", p.Server.Warmups())
}

// TestRedTeamWarmOutsiderCannotHold: without the nonce (with forwarding
// headers, any method, path spellings) the warm path is the public 404 and
// holds nothing, even while a round is waiting for its requests.
func TestRedTeamWarmOutsiderCannotHold(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rwo", Stock: 5}}}, nil)
	relay := rwStartRelay(t, p.Addr, 1) // a round waiting: 1 of 5 arrives, holds 1 s
	close(relay.release)
	go p.Server.Warm(relay.ln.Addr().String(), 5)
	time.Sleep(100 * time.Millisecond)
	for _, rq := range []e2e.Req{
		{Method: "GET", URI: "/_seckill/_warm", Header: [][2]string{{"X-Forwarded-For", "127.0.0.1"}, {"Seckill-Proxy-Warm", "x"}}},
		{Method: "POST", URI: "/_seckill/_warm"},
		{Method: "GET", URI: "/_seckill/%5Fwarm"},
		{Method: "GET", URI: "/_seckill//_warm"},
		{Method: "GET", URI: "/_seckill/./_warm"},
		{Method: "GET", URI: "/_seckill/_warm?x=1", Header: [][2]string{{"seckill-proxy-warm", ""}}},
	} {
		rq.Timeout = 3 * time.Second
		t0 := time.Now()
		got := e2e.Do(nil, p.Addr, rq)
		if got.Status == 204 || time.Since(t0) > 500*time.Millisecond {
			t.Fatalf("%s %s: %d after %v", rq.Method, rq.URI, got.Status, time.Since(t0))
		}
	}
}

// TestRedTeamWarmStartupThenImminentStart: an activity starting within
// the lead at start-up is warmed twice back to back (start-up, then the
// first tick); one whose start is past is not warmed; ten activities
// starting at once take one warm-up.
func TestRedTeamWarmStartupThenImminentStart(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	soon := time.Now().Add(1900 * time.Millisecond) // within warmLead (2 s) of start-up whatever the set-up takes below that
	acts := []e2e.Activity{{ID: "rwpast", Stock: 5, Start: time.Now().Add(-time.Minute), End: time.Now().Add(time.Hour)}}
	later := time.Now().Add(4 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := 0; i < 10; i++ {
		acts = append(acts, e2e.Activity{ID: "rwm" + string(rune('a'+i)), Stock: 5, Start: later, End: later.Add(time.Hour)})
	}
	acts = append(acts, e2e.Activity{ID: "rwsoon", Stock: 5, Start: soon, End: soon.Add(time.Hour)})
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: acts},
		func(c *config.Config) { c.Server.WarmWorkers = 20 })
	if time.Until(soon) < 200*time.Millisecond {
		// Starting Redis, the shop and a proxy with 12 activities took
		// nearly 2 s (a loaded machine): rwsoon's start is no longer ahead
		// of the first warm-up, which is what this test is about.
		t.Skipf("set-up took too long: rwsoon starts in %v", time.Until(soon))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Server.RunWarmups(ctx, p.Addr)
	time.Sleep(time.Until(later) + 300*time.Millisecond)
	n := p.Server.Warmups()
	t.Logf("warm-ups: %d (start-up, rwsoon, the ten at once)", n)
	if n != 3 {
		t.Fatalf("%d warm-ups, want 3", n)
	}
}

// TestRedTeamWarmIdleWorkersMemory: the cost of warm workers kept for a
// minute: stack in use after Warm(n) (a measurement, logged).
func TestRedTeamWarmIdleWorkersMemory(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Server: "{ max_conns: 8000 }",
		Activities: []e2e.Activity{{ID: "rwmem", Stock: 5}}}, nil)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	ready := p.Server.Warm(p.Addr, 4000)
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("Warm(4000): ready=%d goroutines +%d, StackInuse +%d KiB (%.1f KiB/worker), Sys +%d KiB",
		ready, runtime.NumGoroutine()-g0, (m1.StackInuse-m0.StackInuse)>>10,
		float64(m1.StackInuse-m0.StackInuse)/1024/float64(max(ready, 1)), (m1.Sys-m0.Sys)>>10)
}

// TestRedTeamWarmNoLeakAfterShutdown: the warm workers (kept a minute when
// idle) and the warm-up's timers end with the server's Shutdown.
func TestRedTeamWarmNoLeakAfterShutdown(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	time.Sleep(100 * time.Millisecond)
	g0 := runtime.NumGoroutine()
	t.Run("proxy", func(t *testing.T) {
		p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
			Activities: []e2e.Activity{{ID: "rwl", Stock: 5}}}, nil)
		if got := p.Server.Warm(p.Addr, 300); got != 300 {
			t.Logf("Warm(300) = %d", got)
		}
		if g := runtime.NumGoroutine(); g < g0+250 {
			t.Fatalf("goroutines %d, want ~300 idle workers above %d", g, g0)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0+10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0+10 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("%d goroutines after Shutdown, %d before the proxy:\n%s", g, g0, rwTailStr(string(buf[:n]), 3000))
	}
}

func rwTailStr(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestRedTeamWarmListenAddresses: RunWarmups' start-up warm-up reaches
// the listener whatever it is bound to (unspecified v4/v6, ::1, the
// host's own non-loopback address) and is recognised there.
func TestRedTeamWarmListenAddresses(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	listens := []string{"0.0.0.0:0", "[::]:0", "[::1]:0"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				listens = append(listens, net.JoinHostPort(ipn.IP.String(), "0"))
				break
			}
		}
	}
	for _, l := range listens {
		t.Run(l, func(t *testing.T) {
			if ln, err := net.Listen("tcp", l); err != nil {
				t.Skipf("cannot listen on %s here: %v", l, err)
			} else {
				_ = ln.Close()
			}
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{{ID: "rwla", Stock: 5}}}.Config(t)
			cfg.Listen = l
			cfg.Server.WarmWorkers = 20
			p := e2e.StartProxy(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go p.Server.RunWarmups(ctx, p.Addr)
			e2e.Eventually(t, 3*time.Second, "the start-up warm-up", func() bool { return p.Server.Warmups() == 1 })
			if g := p.Gauge(p.Metrics.WarmWorkers); g != 20 {
				t.Fatalf("listen %s (addr %s): seckill_warm_workers = %v, want 20", l, p.Addr, g)
			}
		})
	}
}

// TestRedTeamWarmReloadedMaxConnsNotInForce: server.max_conns is bound at
// start (a reload that changes it is warned "takes effect only on
// restart"), but warmCap reads it from the config in force. After a
// reload raising it, a warm-up sized from the new value fills the old
// listener's every slot and holds them a second: any buyer connecting
// then is refused, with nothing else on the listener.
func TestRedTeamWarmReloadedMaxConnsNotInForce(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Server: "{ max_conns: 40 }",
		Activities: []e2e.Activity{{ID: "rwr", Stock: 50}}}, nil)
	next := *p.Cfg
	next.Server.MaxConns = 4000 // restart-only: the listener keeps 40
	next.Server.WarmWorkers = 1024
	if err := p.Server.Apply(&next); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	done := make(chan int, 1)
	go func() { done <- p.Server.Warm(p.Addr, next.Server.WarmWorkers) }()
	time.Sleep(200 * time.Millisecond)
	got := e2e.Do(&fasthttp.Client{}, p.Addr, e2e.Req{URI: "/api/seckill/rwr/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", "during"}}})
	ready := <-done
	t.Logf("warm-up ready=%d; buyer during it: %d %q %v", ready, got.Status, got.Body, got.Err)
	if got.Code != "WIN" {
		t.Fatalf("the only buyer, during a warm-up after a reload raised max_conns 40 -> 4000 (not in force), was refused: %d %q %v",
			got.Status, got.Body, got.Err)
	}
}

// TestRedTeamWarmIgnoresPublicPerIPLimit: the loopback IP's public-rate
// limit tiny (burst 2), a warm-up of 30 is still held and answered, and
// it takes none of the IP's tokens: a client on that IP still has both.
func TestRedTeamWarmIgnoresPublicPerIPLimit(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Limits:     "{ per_ip: { rate: 0.01, burst: 2 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }",
		Activities: []e2e.Activity{{ID: "rwi", Stock: 5}}}, func(c *config.Config) { c.Server.WarmWorkers = 30 })
	if got := p.Server.Warm(p.Addr, 30); got != 30 {
		t.Fatalf("Warm(30) with a 2-token per-IP limit = %d", got)
	}
	for i := 0; i < 2; i++ {
		if got := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/_seckill/time"}); got.Status != 200 {
			t.Fatalf("public request %d after the warm-up: %d %s (the warm-up took the IP's tokens?)", i, got.Status, got.Body)
		}
	}
}
