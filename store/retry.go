package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"
)

// Retrier finishes, in the background, Redis calls whose outcome a caller
// could not learn: a reserve to abort, a steal to settle, a confirm or a
// release to repeat. Every job is idempotent (the scripts settle by token
// or move id), so a job that ran late in Redis and again from here is
// harmless. Jobs are retried with backoff while Redis does not answer
// (ErrUnavailable) and dropped on any other error; the queue is bounded,
// and what it cannot hold, or what is left at shutdown, is logged and
// left to the reconciler.
type Retrier struct {
	log     *zap.Logger
	max     int
	timeout time.Duration // per attempt

	mu      sync.Mutex
	queue   []*retryJob
	byKey   map[string][]*retryJob
	observe func(kind, outcome string)
	closed  bool

	n        atomic.Int64 // jobs queued, read without the lock on the buy path
	lastDrop atomic.Int64 // unix ns of the last "dropped" log line (one a second at most)
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

type retryJob struct {
	kind, key string
	f         func(context.Context) error
	tries     int
	finished  bool   // done by the worker or by RunNow
	then      func() // SubmitThen's: called once the job is finished, whatever the outcome
}

// Retry outcomes, the label values of the retry metric.
const (
	RetryOK        = "ok"        // done (on the first try or a later one)
	RetryAgain     = "retry"     // an attempt failed because Redis did not answer; tried again later
	RetryFailed    = "failed"    // an attempt failed for another reason; dropped, logged
	RetryDropped   = "dropped"   // the queue was full; left to the reconciler, logged
	RetryAbandoned = "abandoned" // still queued when the process stopped; left to the reconciler, logged
)

// Retrier limits.
const (
	retryQueueMax  = 10000
	retryMinWait   = 20 * time.Millisecond
	retryMaxWait   = 2 * time.Second
	retryDrainTime = time.Second
	// retryParallel bounds the jobs a drain runs at once (see drain).
	retryParallel = 64
)

// Retryable reports whether a failed call is worth repeating as it is:
// Redis did not answer (ErrUnavailable), or answered that it cannot serve
// yet (loading a dataset, a cluster slot moving or down, a write refused:
// Refused).
func Retryable(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return re.IsTryAgain() || re.IsLoading() || re.IsClusterDown() || Refused(err)
	}
	return false
}

// Refused reports whether err is the answer of a Redis that is up but takes
// no writes for now: memory full (maxmemory with noeviction), a failed RDB
// save (stop-writes-on-bgsave-error), too few replicas
// (min-replicas-to-write), a master demoted to replica, another client's
// script past busy-reply-threshold, a replica cut off from its master.
// Each refuses a command before it runs, and a script at its first write
// (Redis 7 checks a script without a shebang until it writes; these
// scripts do not catch errors of their writes): nothing was written, and
// the same call goes through once the operator clears the condition. A
// confirm or release refused so was dropped as a failure: the shop's order
// stayed pending, or a refused buy's unit held, until the reconciler — and
// for ever without verify.url (red-team finding rw15).
func Refused(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	// The first word is the error's code ("BUSYGROUP" is another error).
	code, _, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "OOM", "MISCONF", "NOREPLICAS", "READONLY", "BUSY", "MASTERDOWN":
		return true
	}
	return false
}

// NewRetrier starts a retrier holding at most max jobs; timeout bounds
// each attempt. Close stops it.
func NewRetrier(log *zap.Logger, max int, timeout time.Duration) *Retrier {
	r := &Retrier{log: log, max: max, timeout: timeout, byKey: map[string][]*retryJob{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// Observe sets the function told each job's outcomes (for a metric).
func (r *Retrier) Observe(f func(kind, outcome string)) {
	r.mu.Lock()
	r.observe = f
	r.mu.Unlock()
}

func (r *Retrier) note(kind, outcome string) {
	r.mu.Lock()
	f := r.observe
	r.mu.Unlock()
	if f != nil {
		f(kind, outcome)
	}
}

// Submit queues f to run until it succeeds. key groups jobs a caller may
// want finished before its next call (RunNow); kind names the job in logs
// and metrics. It returns false (the job is dropped and logged) when the
// queue is full or closed.
func (r *Retrier) Submit(kind, key string, f func(context.Context) error) bool {
	return r.SubmitThen(kind, key, f, nil)
}

// SubmitThen is Submit with then, called once when the job is finished
// (done, failed, abandoned at shutdown), or at once when it is not queued.
func (r *Retrier) SubmitThen(kind, key string, f func(context.Context) error, then func()) bool {
	r.mu.Lock()
	if r.closed || len(r.queue) >= r.max {
		r.mu.Unlock()
		// A long outage drops on every buy: log a sample, count them all.
		if now, last := time.Now().UnixNano(), r.lastDrop.Load(); now-last > int64(time.Second) && r.lastDrop.CompareAndSwap(last, now) {
			r.log.Error("redis retry queue full or closed; the reconciler will settle what is dropped", zap.String("kind", kind), zap.String("key", key))
		}
		r.note(kind, RetryDropped)
		if then != nil {
			then()
		}
		return false
	}
	j := &retryJob{kind: kind, key: key, f: f, then: then}
	r.queue = append(r.queue, j)
	r.byKey[key] = append(r.byKey[key], j)
	r.n.Add(1)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// Len is how many jobs wait.
func (r *Retrier) Len() int { return int(r.n.Load()) }

// RunNow runs, in the caller, the queued jobs of key, so a buyer's next
// call is decided after their earlier unsettled one. It fails (the jobs
// stay queued) when Redis still does not answer.
func (r *Retrier) RunNow(ctx context.Context, key string) error {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	jobs := append([]*retryJob(nil), r.byKey[key]...)
	r.mu.Unlock()
	for _, j := range jobs {
		if err := j.f(ctx); err != nil {
			if Retryable(err) {
				return err
			}
			r.log.Error("redis retry failed; the reconciler will settle this", zap.String("kind", j.kind), zap.String("key", key), zap.Error(err))
			r.finish(j, RetryFailed)
			continue
		}
		r.finish(j, RetryOK)
	}
	return nil
}

// finish takes j off the queue once.
func (r *Retrier) finish(j *retryJob, outcome string) {
	r.mu.Lock()
	if j.finished {
		r.mu.Unlock()
		return
	}
	j.finished = true
	for i, q := range r.queue {
		if q == j {
			r.queue = append(r.queue[:i], r.queue[i+1:]...)
			break
		}
	}
	ks := r.byKey[j.key]
	for i, q := range ks {
		if q == j {
			ks = append(ks[:i], ks[i+1:]...)
			break
		}
	}
	if len(ks) == 0 {
		delete(r.byKey, j.key)
	} else {
		r.byKey[j.key] = ks
	}
	r.n.Add(-1)
	r.mu.Unlock()
	r.note(j.kind, outcome)
	if j.then != nil {
		j.then()
	}
}

// next is the oldest unfinished job, or nil.
func (r *Retrier) next() *retryJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return nil
	}
	return r.queue[0]
}

// retryCall marks the context of a retrier's attempt: each Redis call of
// the job may take the attempt's whole deadline (Store.ctx), not
// redis.timeout. A call to a stalled node then stays in flight and is
// answered the moment the node wakes, and the drain follows at once; with
// redis.timeout per call, the worker was often sleeping in its backoff
// (doubling to retryMaxWait) when the node woke, and the settles of steals
// that had run late, their units off every shard, came 0.6 s after a 1.3 s
// stop of a cluster master while every buyer heard SOLD_OUT (red team bh).
type retryCall struct{}

// attempt runs j once, its calls waiting up to the attempt's deadline (the
// loop's probe); it reports whether Redis answered. attemptAs(j, false)
// bounds each call by redis.timeout: the drain's and Close's attempts
// (shutdown does not wait on a stalled node).
func (r *Retrier) attempt(j *retryJob) bool { return r.attemptAs(j, true) }

func (r *Retrier) attemptAs(j *retryJob, long bool) bool {
	parent := context.Background()
	if long {
		parent = context.WithValue(parent, retryCall{}, true)
	}
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	err := j.f(ctx)
	cancel()
	switch {
	case err == nil:
		r.finish(j, RetryOK)
	case Retryable(err):
		r.mu.Lock()
		j.tries++
		// Oldest first: a job that keeps failing goes to the back, so
		// one that cannot succeed never holds up the others.
		if len(r.queue) > 1 && r.queue[0] == j {
			r.queue = append(r.queue[1:], j)
		}
		r.mu.Unlock()
		r.note(j.kind, RetryAgain)
		return false
	default:
		r.log.Error("redis retry failed; the reconciler will settle this", zap.String("kind", j.kind), zap.String("key", j.key), zap.Error(err))
		r.finish(j, RetryFailed)
	}
	return true
}

// run works the queue oldest first, one call at a time. While Redis does
// not answer it waits, doubling from retryMinWait up to retryMaxWait, so a
// stalled Redis gets one probe at a time; once Redis answers, the rest of
// the queue goes through at once (drain).
func (r *Retrier) run() {
	defer close(r.done)
	wait := retryMinWait
	for {
		j := r.next()
		if j == nil {
			select {
			case <-r.stop:
				return
			case <-r.wake:
				continue
			}
		}
		if r.attempt(j) {
			wait = retryMinWait
			r.drain()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, retryMaxWait)
	}
}

// drain runs the queued jobs once Redis has answered one, many at a time:
// the jobs of one key one after the other, in their order, the keys side
// by side, at most retryParallel at once, each call bounded by
// redis.timeout (only the loop's one probe waits out a stall: a node that
// stays silent holds the drain up for redis.timeout, not the attempt's
// deadline). It stops starting jobs once one finds Redis not answering
// (the caller's loop backs off as before).
//
// One at a time, the queue left after a stall took a round trip or three
// per job: after a cluster master that held a donor shard woke from a
// stop, hundreds of settles of steals that had run late (their units off
// every shard, in transit) waited behind hundreds of aborts, and every
// buyer asking in the 0.1-0.7 s that took heard SOLD_OUT from memory; up to
// 35 of 50 units were left on sale (red team bh, TestBHClusterDonorStall).
func (r *Retrier) drain() {
	r.mu.Lock()
	var keys []string
	byKey := map[string][]*retryJob{}
	for _, j := range r.queue {
		if byKey[j.key] == nil {
			keys = append(keys, j.key)
		}
		byKey[j.key] = append(byKey[j.key], j)
	}
	r.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	var failed atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, retryParallel)
	for _, key := range keys {
		if failed.Load() {
			break
		}
		select {
		case <-r.stop:
			wg.Wait()
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func(jobs []*retryJob) {
			defer func() { <-sem; wg.Done() }()
			for _, j := range jobs {
				if failed.Load() {
					return
				}
				r.mu.Lock()
				done := j.finished
				r.mu.Unlock()
				if done {
					continue // RunNow got there first
				}
				if !r.attemptAs(j, false) {
					failed.Store(true)
					return
				}
			}
		}(byKey[key])
	}
	wg.Wait()
}

// Close stops taking jobs, tries what is queued for up to a second more
// (Redis answering after a stall at shutdown), and logs what is left: the
// reconciler settles those.
func (r *Retrier) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	deadline := time.Now().Add(retryDrainTime)
	for j := r.next(); j != nil; j = r.next() {
		if !r.attemptAs(j, false) {
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(retryMinWait)
		}
	}
	r.mu.Lock()
	left := append([]*retryJob(nil), r.queue...)
	r.mu.Unlock()
	for _, j := range left {
		r.log.Error("redis retry abandoned at shutdown; the reconciler will settle it", zap.String("kind", j.kind), zap.String("key", j.key))
		r.finish(j, RetryAbandoned)
	}
}
