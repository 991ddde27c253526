package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// outcomes counts a retrier's outcomes by kind/outcome.
type outcomes struct {
	mu sync.Mutex
	m  map[string]int
}

func (o *outcomes) add(kind, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[kind+"/"+outcome]++
}

func (o *outcomes) get(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[k]
}

func TestRetrierRetriesUntilRedisAnswers(t *testing.T) {
	r := NewRetrier(zap.NewNop(), 2, time.Second)
	o := &outcomes{m: map[string]int{}}
	r.Observe(o.add)
	var down atomic.Bool
	down.Store(true)
	var calls, done atomic.Int32
	job := func(context.Context) error {
		calls.Add(1)
		if down.Load() {
			return ErrUnavailable
		}
		done.Add(1)
		return nil
	}
	if !r.Submit("confirm", "t1", job) || !r.Submit("confirm", "t2", job) {
		t.Fatal("Submit refused below the bound")
	}
	if r.Submit("confirm", "t3", job) {
		t.Fatal("Submit beyond the bound accepted")
	}
	if o.get("confirm/dropped") != 1 {
		t.Fatalf("outcomes = %v, want one dropped", o.m)
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if done.Load() != 0 {
		t.Fatal("a job succeeded while Redis was down")
	}
	// RunNow fails while Redis is down, and the job stays queued.
	if err := r.RunNow(context.Background(), "t1"); !errors.Is(err, ErrUnavailable) || r.Len() != 2 {
		t.Fatalf("RunNow while down = %v, %d queued", err, r.Len())
	}
	down.Store(false)
	if err := r.RunNow(context.Background(), "t1"); err != nil {
		t.Fatalf("RunNow = %v", err)
	}
	for r.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r.Len() != 0 || o.get("confirm/ok") != 2 || o.get("confirm/retry") == 0 {
		t.Fatalf("queued %d, outcomes %v", r.Len(), o.m)
	}
	r.Close()
}

func TestRetrierDropsOtherErrorsAndAbandonsAtClose(t *testing.T) {
	r := NewRetrier(zap.NewNop(), 10, time.Second)
	o := &outcomes{m: map[string]int{}}
	r.Observe(o.add)
	r.Submit("release", "t1", func(context.Context) error { return ErrInvalidResponse })
	r.Submit("abort", "u1", func(context.Context) error { return ErrUnavailable })
	deadline := time.Now().Add(5 * time.Second)
	for o.get("release/failed") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Close()
	if o.get("release/failed") != 1 || o.get("abort/abandoned") != 1 || r.Len() != 0 {
		t.Fatalf("outcomes %v, %d queued", o.m, r.Len())
	}
	if r.Submit("abort", "u2", func(context.Context) error { return nil }) {
		t.Fatal("Submit after Close accepted")
	}
}

// TestRetrierDrainsKeysSideBySide (red team bh): once Redis answers again,
// the jobs left run many at a time, keys side by side, never two jobs of
// one key at once. One at a time, the settles of steals that ran late
// waited behind hundreds of aborts after a cluster master woke (e2e
// TestBHClusterDonorStall).
func TestRetrierDrainsKeysSideBySide(t *testing.T) {
	r := NewRetrier(zap.NewNop(), 100, time.Second)
	defer r.Close()
	var down atomic.Bool
	down.Store(true)
	var cur, peak, ran atomic.Int32
	var perKey [8]atomic.Int32
	release := make(chan struct{})
	for k := 0; k < 8; k++ {
		for n := 0; n < 3; n++ {
			r.Submit("abort", "u"+string(rune('a'+k)), func(context.Context) error {
				if down.Load() {
					return ErrUnavailable
				}
				if perKey[k].Add(1) > 1 {
					t.Errorf("two jobs of key %d at once", k)
				}
				defer perKey[k].Add(-1)
				c := cur.Add(1)
				defer cur.Add(-1)
				for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
				}
				if c == 1 {
					// Wait a while for a second one to run beside it (the
					// worker's own first attempt runs alone: not forever).
					select {
					case <-release:
					case <-time.After(time.Second):
					}
				} else {
					select {
					case release <- struct{}{}:
					default:
					}
				}
				ran.Add(1)
				return nil
			})
		}
	}
	time.Sleep(50 * time.Millisecond) // a few failed probes
	down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for r.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r.Len() != 0 || ran.Load() != 24 {
		t.Fatalf("%d jobs left, %d ran", r.Len(), ran.Load())
	}
	if peak.Load() < 2 {
		t.Errorf("at most %d job at once after Redis answered", peak.Load())
	}
}
