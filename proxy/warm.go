package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Warm workers (server.warm_workers).
//
// fasthttp serves each connection on a worker goroutine and keeps idle
// workers for the next connections (10 s). A sale's first wave opens a
// thousand connections at once: on a proxy that has been idle, each needs a
// new goroutine whose stack grows by copying, three times or four, to the
// buy path's depth (fasthttp, the handler, admission, the store, rueidis).
// Measured on a fresh proxy (1000users preset, BENCHMARKS.md ninth round):
// a quarter of the wave's CPU was stack growth and goroutine creation, and
// the first wave's p99.9 was 2.0–2.6× the bare handler's, with buyers
// answered STORE_UNAVAILABLE when their reserve replies waited past
// redis.timeout for the CPU; with the workers made ready first, 1.0–1.9×.
//
// So the proxy makes the workers ready itself: it opens warm_workers
// connections to its own listener at once, each carrying a warm-up request
// that touches a buy's stack depth and holds its worker until every one
// has arrived; the connections then close and the workers wait, stacks
// grown, for the sale's connections. It does this at start-up and 2 s
// before each activity's start (a garbage collection halves an idle
// worker's stack, so closer to the start is better than long before).

// warmStackBytes is the stack a warm-up request touches, so a warmed
// worker starts a buy with a 16 KiB stack rather than the 2 KiB it is
// made with. (Ready workers are what pays: 8, 0 and 24 KiB were within the
// runs' noise of each other; BENCHMARKS.md ninth round.)
const warmStackBytes = 8 << 10

// workerIdle is how long an idle listener worker is kept (fasthttp's
// default is 10 s): a sale comes in waves (the start, a restock, a second
// SKU's start), and the goroutines the first made, stacks grown, serve
// the next. Bounded by server.max_conns; a GC halves an idle one's stack.
const workerIdle = time.Minute

// warmLead is how long before an activity's start its warm-up runs.
const warmLead = 2 * time.Second

// warmHeader carries the process's nonce on its own warm-up requests.
const warmHeader = "Seckill-Proxy-Warm" // not X-Seckill-*: those are stripped on entry

// warmer holds what the warm-up requests are recognised by.
type warmer struct {
	nonce string
	mu    sync.Mutex                // one warm-up at a time
	round atomic.Pointer[warmRound] // the warm-up running, if any
	done  atomic.Int64              // warm-ups run
}

// warmRound is one warm-up's rendezvous: its requests hold their workers
// until all want of them are inside the handler.
type warmRound struct {
	want    int64
	arrived atomic.Int64
	met     atomic.Int64  // requests held until all had arrived: workers of their own
	all     chan struct{} // closed by the last to arrive
}

func newWarmer() *warmer {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &warmer{nonce: hex.EncodeToString(b[:])}
}

// is reports whether ctx is one of this process's warm-up requests: from
// the proxy's own host, carrying the nonce.
func (w *warmer) is(ctx *fasthttp.RequestCtx) bool {
	ip, _ := netip.AddrFromSlice(ctx.RemoteIP())
	local, _ := netip.AddrFromSlice(ctx.LocalIP())
	if ip = ip.Unmap(); !ip.IsLoopback() && ip != local.Unmap() {
		return false
	}
	return string(ctx.Request.Header.Peek(warmHeader)) == w.nonce
}

// serve answers one warm-up request: it touches warmStackBytes of stack,
// then holds its worker until the round's requests are all inside the
// handler, each on a worker of its own (so n connections make n workers,
// not fewer reused), or a second passes.
func (w *warmer) serve(ctx *fasthttp.RequestCtx) {
	growStack(warmStackBytes / 1024)
	if r := w.round.Load(); r != nil {
		if r.arrived.Add(1) == r.want {
			close(r.all)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-r.all:
			r.met.Add(1)
		case <-t.C:
		}
		t.Stop()
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	ctx.SetConnectionClose()
}

// growStack uses about n KiB of stack.
//
//go:noinline
func growStack(n int) byte {
	var b [1000]byte
	b[n%len(b)] = byte(n)
	if n > 0 {
		return growStack(n-1) + b[n%len(b)]
	}
	return b[0]
}

// warmCap bounds a warm-up's connections: max_conns and max_conns_per_ip
// leave room for buyers, and both ends of each connection are this
// process's, within a quarter of the open-file limit.
func warmCap(n int, sv config.Server) int {
	n = min(n, sv.MaxConns/2)
	if sv.MaxConnsPerIP > 0 {
		n = min(n, sv.MaxConnsPerIP/2)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<30 {
		n = min(n, int(rl.Cur/8))
	}
	return max(n, 0)
}

// Warm makes up to n of the listener's workers ready (see above) by
// connecting to addr, the address the listener is bound to; it returns
// how many were: warm-up requests held in the handler all at once (each
// on a worker of its own) and answered.
func (s *Server) Warm(addr string, n int) int {
	st := s.cur.Load()
	if n = warmCap(n, st.cfg.Server); n == 0 || s.draining.Load() {
		return 0
	}
	w := s.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	round := &warmRound{want: int64(n), all: make(chan struct{})}
	w.round.Store(round)
	defer w.round.Store(nil)
	req := []byte("GET " + string(st.prefix) + "_warm HTTP/1.1\r\nHost: " + addr + "\r\n" + warmHeader + ": " + w.nonce + "\r\n\r\n")
	var answered atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write(req); err != nil {
				return
			}
			if line, err := bufio.NewReaderSize(c, 128).ReadSlice('\n'); err == nil && len(line) > 12 && string(line[9:12]) == "204" {
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	// Ready: held at once, so each on a worker of its own, and answered.
	ready := min(round.met.Load(), answered.Load())
	w.done.Add(1)
	s.m.WarmWorkers.Set(float64(ready))
	s.log.Info("listener workers warmed", zap.Int("asked", n), zap.Int64("ready", ready), zap.Duration("took", time.Since(t0)))
	return int(ready)
}

// Warmups reports how many warm-ups have run.
func (s *Server) Warmups() int64 { return s.warm.done.Load() }

// RunWarmups warms the listener's workers now and then warmLead before
// each activity's start (the config in force; a reload is followed), until
// ctx ends. addr is the address the listener is bound to.
func (s *Server) RunWarmups(ctx context.Context, addr string) {
	dial := dialable(addr)
	if n := s.cur.Load().cfg.Server.WarmWorkers; n > 0 {
		s.Warm(dial, n)
	}
	warmed := map[string]time.Time{} // activity id -> the start warmed for
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cfg := s.cur.Load().cfg
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
