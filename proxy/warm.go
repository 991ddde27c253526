package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/config"
	"go.uber.org/zap"
)

// Warm workers (server.warm_workers).
//
// fasthttp serves each connection on a worker goroutine and keeps idle
// workers for the next connections (workerIdle). A sale's first wave opens
// a thousand connections at once: on a proxy that has been idle, each needs
// a new goroutine whose stack then grows by copying to the buy path's depth
// (fasthttp, the handler, admission, the store, rueidis). Measured on a
// fresh proxy (1000users preset, BENCHMARKS.md ninth round): a quarter of
// the wave's CPU was stack growth and goroutine creation, and the first
// wave's p99.9 was ~2.1x the bare handler's, with buyers answered
// STORE_UNAVAILABLE when their reserve replies waited past redis.timeout
// for the CPU; with the workers made ready first, ~1.6x and none.
//
// So the proxy makes the workers ready itself: it opens warm_workers
// connections to its own listener at once, each carrying a warm-up request
// that holds its worker until every request that got through has arrived;
// the connections then close and the workers wait for the sale's
// connections. It does this at start-up and 2 s before each activity's
// start. How deep a warm-up grows the stack did not matter (0, 8 and 24
// KiB within the noise; a GC halves an idle worker's stack anyway): the
// ready goroutines are what pays.

// warmLead is how long before an activity's start its warm-up runs.
const warmLead = 2 * time.Second

// warmHeader carries a warm-up round's nonce. It is not X-Seckill-* (those
// are stripped on entry), and stripSeckillHeaders removes it from every
// request that is not the round's own, so it never reaches the shop.
const warmHeader = "Seckill-Proxy-Warm"

// workerIdle is how long an idle listener worker is kept (fasthttp's
// default is 10 s; fasthttp reaps once per period, so up to twice this): a
// sale comes in waves (the start, a restock, a second SKU's start), and the
// goroutines the first made serve the next. Bounded by server.max_conns.
const workerIdle = time.Minute

// warmer holds the warm-up round running, if any.
type warmer struct {
	mu    sync.Mutex                // one round at a time
	round atomic.Pointer[warmRound] // nil between rounds
	done  atomic.Int64              // rounds run
	// started is set once RunWarmups' start-up round is over (run, cut
	// short, or none to run): readiness waits for it (StartupWarmed).
	started atomic.Bool
}

// warmRound is one warm-up's rendezvous: its requests, recognised by a
// nonce valid for this round only, hold their workers until Warm has seen
// every request that got through arrive (or a second passes).
type warmRound struct {
	nonce   string
	arrived atomic.Int64
	met     atomic.Int64  // held until the release: workers of their own
	all     chan struct{} // closed by Warm: let the workers go
}

// take serves ctx if it is a request of the running warm-up round (from the
// proxy's own host, carrying the round's nonce, on any path), reporting
// whether it did. Between rounds it costs one atomic load.
func (w *warmer) take(ctx *fasthttp.RequestCtx) bool {
	r := w.round.Load()
	if r == nil {
		return false
	}
	v := ctx.Request.Header.Peek(warmHeader)
	if len(v) == 0 || subtle.ConstantTimeCompare(v, []byte(r.nonce)) != 1 {
		return false
	}
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	local, _ := netip.AddrFromSlice(ctx.LocalIP())
	if ip = ip.Unmap(); !ip.IsLoopback() && ip != local.Unmap() {
		return false
	}
	r.arrived.Add(1)
	t := time.NewTimer(time.Second)
	select {
	case <-r.all:
		r.met.Add(1)
	case <-t.C:
	}
	t.Stop()
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	ctx.SetConnectionClose()
	return true
}

// warmCap bounds a round's connections by what the listener has room for
// now (max_conns as it was started with, less the connections open),
// leaving half of it to buyers, and by the file descriptors left (both ends
// of each connection are this process's); with max_conns_per_ip there is
// no warm-up.
func (s *Server) warmCap(n int) int {
	if c := s.maxConns; c > 0 {
		n = min(n, (c-int(s.srv.GetOpenConnectionsCount()))/2)
	}
	if s.maxConnsPerIP > 0 {
		// The warm-up's connections all come from the proxy's own
		// address, which may be the buyers' too (a balancer on the host):
		// how many it holds is not known, so nothing is taken from it.
		return 0
	}
	if free, ok := freeFDs(); ok {
		n = min(n, (free-64)/2) // a margin for Redis, the shop, the admin listener
	}
	return max(n, 0)
}

// freeFDs is how many more files this process may open (Linux: the
// RLIMIT_NOFILE soft limit less the entries of /proc/self/fd).
func freeFDs() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0, false
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	defer func() { _ = d.Close() }()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	return int(rl.Cur) - len(names), true
}

// Warm makes up to n of the listener's workers ready (see above) by
// connecting to addr, the address the listener is bound to; it returns how
// many were: warm-up requests held in the handler together, each on a
// worker of its own.
func (s *Server) Warm(addr string, n int) int {
	w := &s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if n = s.warmCap(n); n == 0 || s.draining.Load() {
		return 0
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	round := &warmRound{nonce: hex.EncodeToString(b[:]), all: make(chan struct{})}
	w.round.Store(round)
	defer w.round.Store(nil)
	req := []byte("GET /_warm HTTP/1.1\r\nHost: " + addr + "\r\n" + warmHeader + ": " + round.nonce + "\r\n\r\n")
	var sent atomic.Int64
	var wrote, read sync.WaitGroup
	t0 := time.Now()
	for range n {
		wrote.Add(1)
		read.Add(1)
		go func() {
			defer read.Done()
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				wrote.Done()
				return
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			_, err = c.Write(req)
			if err == nil {
				sent.Add(1)
			}
			wrote.Done()
			if err == nil {
				_, _ = bufio.NewReaderSize(c, 128).ReadSlice('\n')
			}
		}()
	}
	// Every request that got through is let go once all of them are in
	// (a connection the listener refused is not waited for), or after a
	// second: the workers they hold are buyers' room meanwhile.
	wrote.Wait()
	for deadline := time.Now().Add(time.Second); round.arrived.Load() < sent.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(round.all)
	read.Wait()
	ready := round.met.Load()
	w.done.Add(1)
	s.m.WarmWorkers.Set(float64(ready))
	s.log.Info("listener workers warmed", zap.Int("asked", n), zap.Int64("ready", ready), zap.Duration("took", time.Since(t0)))
	return int(ready)
}

// Warmups reports how many warm-ups have run.
func (s *Server) Warmups() int64 { return s.warm.done.Load() }

// StartupWarmed reports whether RunWarmups' start-up round is over (or
// there was none to run: warm_workers 0, no room for one). Until then the
// round's connections, goroutines and stack growth take the CPU (~0.2 s
// for 1,024): a buy taken meanwhile on a loaded host can wait behind them
// for its Redis reply past redis.timeout (503 STORE_UNAVAILABLE with Redis
// healthy; CI, the first buyer of a serve started mid-sale). serve's
// /readyz says not ready until then, so a balancer sends no buys yet.
func (s *Server) StartupWarmed() bool { return s.warm.started.Load() }

// RunWarmups warms the listener's workers now and then warmLead before
// each activity's start (the config in force; a reload is followed), until
// ctx ends. addr is the address the listener is bound to.
func (s *Server) RunWarmups(ctx context.Context, addr string) {
	dial := dialable(addr)
	if n := s.cur.Load().cfg.Server.WarmWorkers; n > 0 {
		s.Warm(dial, n)
	}
	s.warm.started.Store(true)
	warmed := map[string]time.Time{} // activity id -> the start warmed for
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	defer func() { s.cur.Load().upstream.warm.close() }()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := s.cur.Load()
			cfg := st.cfg
			st.upstream.warm.keep(shopWarmWanted(cfg, now))
			due := false
			for i := range cfg.Activities {
				a := &cfg.Activities[i]
				if until := a.Start.Sub(now); until > 0 && until <= warmLead && !warmed[a.ID].Equal(a.Start) {
					warmed[a.ID] = a.Start
					due = true
				}
			}
			if due && cfg.Server.WarmWorkers > 0 {
				s.Warm(dial, cfg.Server.WarmWorkers)
			}
		}
	}
}

// shopWarmWanted is how many shop connections to keep dialled ahead
// (shopConns): upstream.warm_conns around a sync-mode activity's first
// wave (its winners use the buy client), from warmLead before its start
// until warmHold after its fair start's last release moment (at start
// without one), and none otherwise: outside the first wave the buy
// client's own connections serve, and the pool would only churn.
func shopWarmWanted(cfg *config.Config, now time.Time) int {
	if cfg.Upstream.WarmConns == 0 {
		return 0
	}
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		until := a.Start.Add(a.FairStart + a.FairStartSpread + warmHold)
		if a.Mode == config.ModeSync && now.After(a.Start.Add(-warmLead)) && now.Before(until) && now.Before(a.End) {
			return cfg.Upstream.WarmConns
		}
	}
	return 0
}

// warmHold is how long after a sale's start (fair start included) the
// shop connections are kept dialled ahead.
const warmHold = 10 * time.Second

// dialable turns a listener's address into one to connect to: an
// unspecified host (":8080", "[::]:8080") is 127.0.0.1.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port) // "[::]" takes IPv4 too; ::1 may be off
	}
	return addr
}
