package store

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
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

// splitReplies reads reservebatch.lua's flat reply (each buyer's reply
// after its length) and refuses one that does not hold exactly the
// buyers' replies: a short reply, a length past the end, extra replies.
func TestSplitReplies(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flat := func(src string) []rueidis.RedisMessage {
		t.Helper()
		arr, err := c.Do(context.Background(), c.B().Eval().Script(src).Numkeys(0).Build()).ToArray()
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		return arr
	}
	got, err := splitReplies(flat(`return {2, 1, 7, 1, 5, 3, 4, 'T', 'O'}`), 3)
	if err != nil {
		t.Fatalf("three replies: %v", err)
	}
	want := [][]string{{"1", "7"}, {"5"}, {"4", "T", "O"}}
	for i, r := range got {
		if len(r) != len(want[i]) {
			t.Fatalf("reply %d has %d fields, want %v", i, len(r), want[i])
		}
		for j, m := range r {
			if s, _ := m.ToString(); s != want[i][j] {
				if n, _ := m.AsInt64(); strconv.FormatInt(n, 10) != want[i][j] {
					t.Errorf("reply %d field %d = %v, want %s", i, j, m, want[i][j])
				}
			}
		}
	}
	for _, bad := range []struct {
		src string
		n   int
	}{
		{`return {2, 1, 7}`, 2},       // one reply for two buyers
		{`return {2, 1, 7, 1, 5}`, 1}, // two for one
		{`return {3, 1, 7}`, 1},       // a length past the end
		{`return {0, 1, 5}`, 1},       // an empty reply
		{`return {'x', 1}`, 1},        // no length
	} {
		if _, err := splitReplies(flat(bad.src), bad.n); !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("%s for %d buyers: err %v, want ErrInvalidResponse", bad.src, bad.n, err)
		}
	}
}
