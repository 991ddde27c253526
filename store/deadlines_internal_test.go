package store

import (
	"context"
	"testing"
	"time"
)

// TestSharedDeadlines: a call with no parent gets a deadline at least its
// timeout away and less than a millisecond beyond; calls started within
// the same millisecond share one context; a shared context expires.
func TestSharedDeadlines(t *testing.T) {
	var d deadlines
	const timeout = 50 * time.Millisecond
	seen := map[context.Context]bool{}
	for range 2000 {
		before := time.Now()
		ctx, cancel := d.get(timeout)
		after := time.Now()
		cancel() // a no-op: others share it
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout+time.Millisecond)) {
			t.Fatalf("deadline %v not within [%v, %v]", dl, before.Add(timeout), after.Add(timeout+time.Millisecond))
		}
		if ctx.Err() != nil {
			t.Fatalf("a fresh context is done: %v", ctx.Err())
		}
		seen[ctx] = true
	}
	if len(seen) >= 2000 {
		t.Fatalf("%d contexts for 2000 calls: none shared", len(seen))
	}
	ctx, _ := d.get(time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a shared context never expired")
	}
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
}

// TestCtxKeepsCancellableParents: a parent that can be cancelled gets a
// context of its own (cancelling the parent reaches the call).
func TestCtxKeepsCancellableParents(t *testing.T) {
	s := &Store{timeout: time.Second}
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel := s.ctx(parent)
	defer cancel()
	cancelParent()
	if ctx.Err() == nil {
		t.Fatal("cancelling the parent did not reach the call's context")
	}
}
