package store

import (
	"context"
	"sync"
)

// gateSlack is how many reserve calls of one SKU shard an instance may have
// in Redis beyond the units it last heard were left there.
const gateSlack = 16

// reserveGate keeps an instance from sending a shard more reserve calls
// than it has units (issue 10; seed 000's "无效竞争"): a call beyond them
// can only be answered EMPTY, and at the moment a SKU sells out every call
// already written is such a call. In the 1000users preset's first burst,
// 227–728 reserve scripts ran for 100 units.
//
// Each reply tells the units left on the shard (OK and EMPTY carry them), so
// the instance keeps at most left+gateSlack calls in flight; the others wait
// here, not in Redis. When a call comes back, as many waiters go as the new
// bound allows, and each waiter reads the shard's sold-out flag again
// (client-side cached) before it goes: once the flag shows, the waiters are
// answered SOLD_OUT from memory, each passing its turn on to the next.
//
// Nothing is decided here: Redis still decides every reserve, so the bound
// can be wrong only in speed. Too low (units came back by a release, a
// deposit, a preheat with more stock) it lets gateSlack calls through, whose
// replies raise it; too high (another instance sold them) it waits for
// nothing. Before the first reply it starts from the configured stock's
// share of the shard. A waiter gives up at its deadline holding nothing
// (ErrUnavailable: its call was never written).
type reserveGate struct {
	mu       sync.Mutex
	inflight int64
	left     int64 // units left on the shard by the latest reply; -1 = no reply yet
	known    bool
	waiters  []*gateWaiter // FIFO
}

type gateWaiter struct {
	ch    chan struct{}
	woken bool // ch closed: it holds a turn it must use or pass on
}

// init sets the units an instance may assume before any reply: the
// configured stock's share of the shard. g.mu is held.
func (g *reserveGate) init(stock int64, shards int) {
	if !g.known {
		g.known = true
		g.left = -1
		if stock > 0 && shards > 0 {
			g.left = (stock + int64(shards) - 1) / int64(shards)
		}
	}
}

func (g *reserveGate) open() bool {
	return g.left < 0 || g.inflight < g.left+gateSlack
}

// tryEnter takes a place in flight if the bound allows and nobody waits
// before the caller; a woken waiter (w) may enter ahead of the queue.
func (g *reserveGate) tryEnter(w *gateWaiter, stock int64, shards int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init(stock, shards)
	if g.open() && (w != nil || len(g.waiters) == 0) {
		g.inflight++
		return true
	}
	return false
}

// wait queues the caller until a turn comes or ctx ends. It returns the
// waiter (woken: the caller must enter or pass the turn on) or ctx's error.
func (g *reserveGate) wait(ctx context.Context) (*gateWaiter, error) {
	w := &gateWaiter{ch: make(chan struct{})}
	g.mu.Lock()
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case <-w.ch:
		return w, nil
	case <-ctx.Done():
		g.mu.Lock()
		if w.woken {
			g.mu.Unlock()
			g.pass() // a turn came with the deadline: give it to the next
			return nil, ctx.Err()
		}
		for i, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				break
			}
		}
		g.mu.Unlock()
		return nil, ctx.Err()
	}
}

// leave ends a call in flight; left is the units its reply said are left
// on the shard (ok false: the reply told none, e.g. an error).
func (g *reserveGate) leave(left int64, ok bool) {
	g.mu.Lock()
	g.inflight--
	if ok {
		g.left = max(left, 0)
	}
	g.wakeLocked()
	g.mu.Unlock()
}

// pass hands a turn a woken waiter did not use (it was answered from the
// sold-out flag, or gave up) to the next waiter.
func (g *reserveGate) pass() {
	g.mu.Lock()
	g.wakeLocked()
	g.mu.Unlock()
}

// passAll wakes every waiter: the caller found the SKU sold out, so they
// will all be answered from the same flags, none needs a place in flight.
func (g *reserveGate) passAll() {
	g.mu.Lock()
	for _, w := range g.waiters {
		w.woken = true
		close(w.ch)
	}
	clear(g.waiters)
	g.waiters = g.waiters[:0]
	g.mu.Unlock()
}

// wakeLocked wakes as many waiters as the bound lets into flight, and at
// least one while any waits and nothing is in flight, so a bound that went
// to 0 still lets a waiter read the flag. g.mu is held.
func (g *reserveGate) wakeLocked() {
	n := int64(1)
	if g.left >= 0 {
		n = g.left + gateSlack - g.inflight
	} else {
		n = int64(len(g.waiters))
	}
	if n < 1 && g.inflight == 0 {
		n = 1
	}
	for ; n > 0 && len(g.waiters) > 0; n-- {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		w.woken = true
		close(w.ch)
	}
}
