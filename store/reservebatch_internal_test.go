package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A buyer whose deadline passes while it waits for a batch is never sent:
// it is told unavailable with nothing written (no abort needed), and it
// leaves the queue; one whose deadline is too near when its batch is
// formed is dropped, not sent, and the call's place is freed.
func TestBatcherDropsBuyersNeverSent(t *testing.T) {
	s := &Store{timeout: time.Second}
	k := &SKUKeys{batchers: make([]reserveBatcher, 1)}
	b := &k.batchers[0]
	b.sending = reserveCallsPerShard // every place in Redis taken: buyers wait
	args := []string{"u", "1", "1", "t", "1000", "2000", "2"}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, written, err := s.reserveShort(ctx, nil, k, 0, args); written || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("waited past its deadline: written %v, err %v; want not written, ErrUnavailable", written, err)
	}
	if len(b.queue) != 0 {
		t.Fatalf("%d buyers left in the queue, want 0", len(b.queue))
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	type result struct {
		written bool
		err     error
	}
	got := make(chan result, 1)
	go func() {
		_, written, err := s.reserveShort(ctx2, nil, k, 0, args)
		got <- result{written, err}
	}()
	for queued := 0; queued == 0; {
		time.Sleep(time.Millisecond)
		b.mu.Lock()
		queued = len(b.queue)
		b.mu.Unlock()
	}
	// 200 ms left is less than a quarter of the 1 s timeout.
	if batch := b.next(s.worthSending); batch != nil {
		t.Fatalf("next sent %d buyers, want the one with too little time dropped", len(batch))
	}
	if b.sending != reserveCallsPerShard-1 {
		t.Fatalf("sending = %d, want %d: a call's place was not freed", b.sending, reserveCallsPerShard-1)
	}
	if r := <-got; r.written || !errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("dropped buyer: written %v, err %v; want not written, ErrUnavailable", r.written, r.err)
	}
}
