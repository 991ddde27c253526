package proxy

import (
	"net"
	"sync"
	"time"
)

// Shop connections opened ahead of the first wave (upstream.warm_conns).
//
// The buy client keeps a connection to the shop idle for upstream.idle_timeout
// (4 s by default, below the shop's keep-alive), so at a sale's start the
// proxy usually holds none: each of the first winners dials the shop before
// it can send, one more wait for the network poller while the first wave's
// thousand new connections saturate the cores (BENCHMARKS.md, twelfth round).
// While an activity's first wave is near (warmLead before its start until
// warmHold after, fair start included), the proxy keeps up to warm_conns
// connections dialled and unused; the buy client's Dial takes one of those
// before dialling itself.
//
// A connection that never carried a request is closed by the shop at its
// header timeout (nginx 60 s; Go servers often 2-5 s), not its keep-alive.
// A pooled one is handed out only within shopWarmMaxAge (or
// upstream.idle_timeout, if lower) of its dial, older ones closed and
// dialled again, and one the shop closed or wrote to meanwhile is found by
// a non-blocking peek and never handed out: a buy is not written on a
// connection the shop already gave up.

// shopWarmMaxAge bounds a pooled connection's age when handed out (with
// upstream.idle_timeout, if lower): a shop closes a connection that never
// carried a request at its header timeout, a few seconds at the shortest
// (Go's ReadHeaderTimeout is often set to 2-5 s; nginx 60 s).
const shopWarmMaxAge = 2 * time.Second

// shopConns is the pool of shop connections dialled ahead (see above).
type shopConns struct {
	dial   func() (net.Conn, error)
	maxAge time.Duration

	mu      sync.Mutex
	conns   []pooledConn // oldest first; taken from the end (newest)
	want    int          // how many to keep; 0 between sales
	dialing int
	closed  bool // an old config's pool (reload): keeps nothing again
	off     bool // idle_timeout under shopWarmMinAge: no pool
}

type pooledConn struct {
	c  net.Conn
	at time.Time
}

// shopWarmMinAge: below it (an idle_timeout under a second) no pool is
// kept: every connection would be replaced at each tick.
const shopWarmMinAge = time.Second

func newShopConns(dial func() (net.Conn, error), maxAge time.Duration) *shopConns {
	return &shopConns{dial: dial, maxAge: maxAge}
}

// shopConnsFor is the buy client's pool for upstream.idle_timeout idle.
func shopConnsFor(dial func() (net.Conn, error), idle time.Duration) *shopConns {
	p := newShopConns(dial, min(idle, shopWarmMaxAge))
	p.off = p.maxAge < shopWarmMinAge
	return p
}

// take returns a pooled connection still fresh and open, or nil.
func (p *shopConns) take() net.Conn {
	now := time.Now()
	var stale []net.Conn
	var got net.Conn
	p.mu.Lock()
	for len(p.conns) > 0 && got == nil {
		e := p.conns[len(p.conns)-1]
		p.conns = p.conns[:len(p.conns)-1]
		if now.Sub(e.at) < p.maxAge && connOpen(e.c) {
			got = e.c
		} else {
			stale = append(stale, e.c)
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
	return got
}

// keep sets how many connections to hold (0 closes them all), drops the
// ones past maxAge or closed by the shop, and dials the missing ones in
// the background. It is called by the warm-up loop every tick.
func (p *shopConns) keep(n int) {
	now := time.Now()
	var drop []net.Conn
	p.mu.Lock()
	if p.closed || p.off {
		n = 0
	}
	p.want = n
	live := p.conns[:0]
	for _, e := range p.conns {
		// Replaced a little before maxAge, so a pooled one is never
		// older than that when taken between two ticks.
		if len(live) < n && now.Sub(e.at) < p.maxAge*3/4 && connOpen(e.c) {
			live = append(live, e)
		} else {
			drop = append(drop, e.c)
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	missing := n - len(p.conns) - p.dialing
	p.dialing += max(missing, 0)
	p.mu.Unlock()
	for _, c := range drop {
		_ = c.Close()
	}
	for range missing {
		go p.add()
	}
}

// add dials one connection into the pool (closed at once if the pool
// wants no more by then).
func (p *shopConns) add() {
	c, err := p.dial()
	p.mu.Lock()
	p.dialing--
	if err == nil && len(p.conns) < p.want {
		p.conns = append(p.conns, pooledConn{c: c, at: time.Now()})
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// idle reports how many connections the pool holds.
func (p *shopConns) idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// close drops every pooled connection and dials no more, for good: a
// warm-up tick that read the old config just before a reload cannot turn
// it on again.
func (p *shopConns) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.keep(0)
}
