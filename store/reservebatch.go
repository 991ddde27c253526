package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// MaxReserveBatch bounds the buyers one reservebatch.lua call decides.
const MaxReserveBatch = 64

// reserveCallsPerShard is how many reserve calls of one SKU shard an
// instance keeps in Redis at once before the buyers that arrive wait to go
// together in the next call (a var for tests).
var reserveCallsPerShard = 2

// reserveBatcher gathers a shard's common reserve calls (sync mode, nothing
// to deposit, no request id: every winner and every repeat buyer the memo
// does not answer) into reservebatch.lua calls (issue 10, fifth round). A
// winner's Redis cost is mostly per call, not per buyer: decided 16 to a
// call, a winner costs Redis about half (scripts/redis-micro.sh), and the
// proxy writes and reads once per call.
//
// No timer, as the confirm batches (docs/decisions.md §25): while fewer
// than reserveCallsPerShard calls are in Redis a buyer's call goes at once,
// alone, as reserve.lua; otherwise it waits for one of them to come back,
// and all that waited go together in the next call. An idle proxy adds no
// delay; under load batches grow by themselves.
//
// Every buyer still passes the reserve gate first (it counts buyers, not
// calls) and keeps its own token id: a buyer whose deadline passes while
// its call waits here was never written and holds nothing; one whose call
// was written aborts its own token id (abortLater), which the batch honours
// as reserve.lua does, whether the abort lands before it (a tombstone) or
// after (a release).
type reserveBatcher struct {
	mu      sync.Mutex
	sending int // calls of the shard this instance has in Redis
	queue   []*batchedBuyer
}

// batchedBuyer is one buyer waiting in, or sent in, a batch.
type batchedBuyer struct {
	args     []string // reserve.lua's short ARGV (7, or 8 with the holder alias)
	deadline time.Time
	done     chan struct{}
	state    int8 // under reserveBatcher.mu: queued, sent or dropped
	reply    reserveReply
	err      error
}

const (
	buyerQueued int8 = iota
	buyerSent
	buyerDropped
)

// errNotSent tells a buyer its call was never written to Redis.
var errNotSent = fmt.Errorf("%w: deadline passed before the reserve call was sent", ErrUnavailable)

// reserveShort runs reserve.lua's short call for one buyer (args: its 7
// ARGV, 8 with a holder alias) on shard home, alone or in a batch (see reserveBatcher). written
// is false when the call never reached Redis: the buyer holds nothing and
// nothing needs aborting.
func (s *Store) reserveShort(ctx context.Context, c rueidis.Client, k *SKUKeys, home int, args []string) (r reserveReply, written bool, err error) {
	b := &k.batchers[home]
	b.mu.Lock()
	if b.sending < reserveCallsPerShard {
		b.sending++
		b.mu.Unlock()
		r, err = s.runReserve(ctx, c, k.shortKeys[home], args)
		if next := b.next(s.worthSending); next != nil {
			go s.sendBatches(c, k, home, next)
		}
		return r, true, err
	}
	w := &batchedBuyer{args: args, done: make(chan struct{})}
	w.deadline, _ = ctx.Deadline()
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		b.mu.Lock()
		st := w.state
		if st == buyerQueued {
			b.remove(w)
			w.state = buyerDropped
		}
		b.mu.Unlock()
		if st == buyerSent {
			return reserveReply{}, true, wrap(ctx.Err())
		}
		return reserveReply{}, false, errNotSent
	}
	if w.state == buyerDropped {
		return reserveReply{}, false, errNotSent
	}
	return w.reply, true, w.err
}

// next ends a call of the shard and takes the buyers that waited for it as
// the next call (nil: none waited, the call's place is free). Buyers whose
// deadline makes their call no longer worth sending are dropped, not sent.
func (b *reserveBatcher) next(worthSending func(deadline time.Time) bool) []*batchedBuyer {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queue) > 0 {
		n := min(len(b.queue), MaxReserveBatch)
		batch := make([]*batchedBuyer, 0, n)
		for _, w := range b.queue[:n] {
			if !worthSending(w.deadline) {
				w.state = buyerDropped
				close(w.done)
				continue
			}
			w.state = buyerSent
			batch = append(batch, w)
		}
		b.queue = slices.Delete(b.queue, 0, n) // zeroes the tail: no stale buyer kept
		if len(batch) > 0 {
			return batch
		}
	}
	b.sending--
	return nil
}

// remove takes a waiting buyer out of the queue; b.mu is held.
func (b *reserveBatcher) remove(w *batchedBuyer) {
	if i := slices.Index(b.queue, w); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
}

// sendBatches sends batch, then every batch that gathered meanwhile, until
// none waits.
func (s *Store) sendBatches(c rueidis.Client, k *SKUKeys, home int, batch []*batchedBuyer) {
	b := &k.batchers[home]
	for batch != nil {
		s.sendBatch(c, k, home, batch)
		batch = b.next(s.worthSending)
	}
}

// batchStats counts reserve calls and the buyers they carried, for the
// average batch size (Store.ReserveBatchStats).
type batchStats struct {
	calls, buyers atomic.Int64
}

// ReserveBatchStats reports the reserve calls this store sent through the
// batcher as batches of two or more, and the buyers they carried.
func (s *Store) ReserveBatchStats() (calls, buyers int64) {
	return s.batches.calls.Load(), s.batches.buyers.Load()
}

// sendBatch runs one call for the buyers of batch and hands each its reply.
func (s *Store) sendBatch(c rueidis.Client, k *SKUKeys, home int, batch []*batchedBuyer) {
	cctx, cancel := s.ctx(context.Background())
	defer cancel()
	keys := k.shortKeys[home]
	if len(batch) == 1 {
		w := batch[0]
		w.reply, w.err = s.runReserve(cctx, c, keys, w.args)
		close(w.done)
		return
	}
	s.batches.calls.Add(1)
	s.batches.buyers.Add(int64(len(batch)))
	// One clock and one expiry for the batch: the latest of its buyers'
	// (a reservation's created ms is when Redis decided it, at the latest).
	var now, exp int64
	for _, w := range batch {
		n, _ := strconv.ParseInt(w.args[4], 10, 64)
		e, _ := strconv.ParseInt(w.args[5], 10, 64)
		now, exp = max(now, n), max(exp, e)
	}
	aliased := false
	for _, w := range batch {
		aliased = aliased || len(w.args) > 7
	}
	mode := batch[0].args[6]
	if aliased {
		mode += "a" // the buyers' holder aliases follow them
	}
	args := make([]string, 0, 3+5*len(batch))
	args = append(args, itoa(now), itoa(exp), mode)
	for _, w := range batch {
		args = append(args, w.args[0], w.args[1], w.args[2], w.args[3])
	}
	if aliased {
		for _, w := range batch {
			alias := ""
			if len(w.args) > 7 {
				alias = w.args[7]
			}
			args = append(args, alias)
		}
	}
	arr, err := s.reserveBatch.Exec(cctx, c, keys, args).ToArray()
	var replies [][]rueidis.RedisMessage
	if err == nil {
		replies, err = splitReplies(arr, len(batch))
	}
	for i, w := range batch {
		if err != nil {
			w.err = wrap(err)
		} else {
			w.reply, w.err = parseReserve(replies[i])
		}
		close(w.done)
	}
}

// splitReplies cuts reservebatch.lua's flat reply (each buyer's reply
// after its length) into n replies; ErrInvalidResponse unless it holds
// exactly n.
func splitReplies(arr []rueidis.RedisMessage, n int) ([][]rueidis.RedisMessage, error) {
	out := make([][]rueidis.RedisMessage, 0, n)
	for at := 0; at < len(arr); {
		k, err := arr[at].AsInt64()
		if err != nil || k < 1 || k > int64(len(arr)-at-1) {
			return nil, ErrInvalidResponse
		}
		out = append(out, arr[at+1:at+1+int(k)])
		at += 1 + int(k)
	}
	if len(out) != n {
		return nil, ErrInvalidResponse
	}
	return out, nil
}
