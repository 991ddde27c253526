package store

import (
	"context"
	"testing"
	"time"
)

// The gate's bookkeeping: the bound, FIFO turns, a turn that comes with the
// deadline is passed on, and a bound at 0 still lets one waiter read the flag.
func TestReserveGateTurns(t *testing.T) {
	var g reserveGate
	// 2 units: 2 + gateSlack calls may be in flight.
	for i := 0; i < 2+gateSlack; i++ {
		if !g.tryEnter(nil, 2, 1) {
			t.Fatalf("call %d refused below the bound", i)
		}
	}
	if g.tryEnter(nil, 2, 1) {
		t.Fatal("a call beyond units + slack entered")
	}
	ctx := context.Background()
	got := make(chan int, 3)
	for i := range 3 {
		go func() {
			w, err := g.wait(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			if !g.tryEnter(w, 2, 1) {
				t.Error("a woken waiter could not enter")
			}
		}()
		waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == i+1 })
	}
	// A reply: still 2 units left. The bound stays 2 + slack, and one call
	// fewer is in flight: exactly one waiter goes.
	g.leave(2, true)
	if i := <-got; i != 0 {
		t.Fatalf("waiter %d went first, want 0 (FIFO)", i)
	}
	select {
	case i := <-got:
		t.Fatalf("waiter %d went beyond the bound", i)
	case <-time.After(50 * time.Millisecond):
	}
	if i := len(got); i != 0 {
		t.Fatalf("%d more waiters went", i)
	}
	// Sold out: every call in flight comes back with 0 left. The bound is
	// the slack alone, so the remaining two waiters go as calls leave.
	for range 2 + gateSlack - 2 {
		g.leave(0, true)
	}
	for range 2 {
		select {
		case <-got:
		case <-time.After(2 * time.Second):
			t.Fatal("a waiter never got its turn")
		}
	}
}

func TestReserveGateDeadline(t *testing.T) {
	var g reserveGate
	g.known, g.left = true, 0 // 0 units: the slack alone
	for g.tryEnter(nil, 0, 1) {
	}
	// A waiter whose deadline passes leaves the queue holding nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.wait(ctx); err == nil {
		t.Fatal("wait past the deadline returned no error")
	}
	g.mu.Lock()
	n := len(g.waiters)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiters left behind", n)
	}
	// A turn that arrives with the deadline is passed to the next waiter.
	w := &gateWaiter{ch: make(chan struct{})}
	next := make(chan error, 1)
	g.mu.Lock()
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	go func() { _, err := g.wait(context.Background()); next <- err }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 2 })
	g.leave(0, true) // wakes w only (one place)
	// w gives up with its turn: the next must get it.
	g.pass()
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the passed turn never reached the next waiter")
	}
}

// With nothing in flight and the bound at 0 or below, one waiter still goes
// (to read the sold-out flag, or to learn units came back).
func TestReserveGateNeverStalls(t *testing.T) {
	var g reserveGate
	g.mu.Lock()
	g.known, g.left = true, 0
	g.inflight = gateSlack + 3 // more than the bound (left fell meanwhile)
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		if _, err := g.wait(context.Background()); err == nil {
			close(done)
		}
	}()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 1 })
	for range gateSlack + 3 {
		g.leave(0, true)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter stalled with nothing in flight")
	}
}

// passAll (a waiter found the SKU sold out) wakes every waiter at once,
// whatever the bound: none of them will need a place in flight.
func TestReserveGatePassAll(t *testing.T) {
	var g reserveGate
	g.known, g.left = true, 0
	for g.tryEnter(nil, 0, 1) {
	}
	woken := make(chan struct{}, 40)
	for range 40 {
		go func() {
			if w, err := g.wait(context.Background()); err == nil && w.woken {
				woken <- struct{}{}
			}
		}()
	}
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiters) == 40 })
	g.passAll()
	for i := range 40 {
		select {
		case <-woken:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of 40 waiters woken", i)
		}
	}
	if g.inflight != gateSlack {
		t.Fatalf("inflight = %d, want %d: passAll gives no places", g.inflight, gateSlack)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
