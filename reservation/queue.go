package reservation

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
	"github.com/seckill-proxy/seckill-proxy/internal/settlelog"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// QueueOptions tune the queue-mode workers. Zero fields take defaults.
type QueueOptions struct {
	// Consumer names this instance in the streams' consumer group
	// (default host/pid/start time: unique per process).
	Consumer string
	// ClaimIdle is how long an entry may sit unacknowledged with a
	// consumer before another takes it over with XAUTOCLAIM (default:
	// 30 s plus three shop timeouts plus the time the rate needs for one
	// round of workers).
	ClaimIdle time.Duration
	// Poll is the longest pause between looks at empty streams (default 200ms).
	Poll time.Duration
	// Client sends the shop requests (default: one built from upstream).
	Client *http.Client
	// Inflight is the instance's in-flight budgets (upstream.max_inflight),
	// shared with its sync winners: a worker sends only with a slot.
	Inflight *inflight.Fleet
	// Hold, when it says something, holds the workers as a pause does: no
	// entry is claimed or sent (serve: this host's clock is further from
	// Redis's than server.max_clock_skew, so "too late to send" cannot be
	// judged here).
	Hold func() string
}

// Queue runs the queue-mode workers of one serve instance: for every
// activity in queue mode, a reader that takes entries from the SKU's
// shard streams through the shared consumer group, and queue.workers
// forwarders that send them to the shop at queue.rate (fleet-wide, from
// a Redis token bucket), settle the reservation by the shop's answer, and
// acknowledge the entry.
type Queue struct {
	st  *store.Store
	m   *metrics.Metrics
	log *zap.Logger
	opt QueueOptions
	// confirmLog logs confirms that found their reservation released or its
	// record gone (settlelog), at most one line a second each.
	confirmLog *settlelog.Confirms

	mu   sync.Mutex
	stop context.CancelFunc // stops reading; forwarders drain what they hold
	kill context.CancelFunc // also aborts requests in flight
	wg   sync.WaitGroup
	// acts are the activities the last Start served, by id: one a later
	// config drops is still drained (Start) until its keys expire.
	acts map[string]*config.Activity
	// sent is what this instance's workers sent lately (actQueue.sentHere).
	sent sentLog
	// deferred is actQueue.deferred, kept across restarts (a reload during
	// a replica's absence must not leave deferred entries to ClaimIdle).
	deferred sync.Map
}

// NewQueue builds the workers; Start runs them.
func NewQueue(st *store.Store, m *metrics.Metrics, log *zap.Logger, opt QueueOptions) *Queue {
	if opt.Consumer == "" {
		opt.Consumer = instanceName()
	}
	if opt.Poll <= 0 {
		opt.Poll = 200 * time.Millisecond
	}
	return &Queue{st: st, m: m, log: log, opt: opt, confirmLog: settlelog.New(log)}
}

// Start (re)starts the workers for cfg's queue-mode activities: a reload
// stops the old ones gracefully first. Entries the old ones held but had
// not handled are taken over after ClaimIdle.
//
// Every other activity — cfg's that no longer use the queue (a reload from
// mode: queue to sync, or without the overflow: queue that spilled into
// it), and those an earlier config had and cfg drops — gets draining
// workers: buyers already told QUEUED are still sent, and the workers go
// once its streams stay empty (drainGrace).
func (q *Queue) Start(cfg *config.Config) {
	q.Stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	readCtx, stop := context.WithCancel(context.Background())
	sendCtx, kill := context.WithCancel(context.Background())
	q.stop, q.kill = stop, kill
	acts := map[string]*config.Activity{}
	var drain []*config.Activity
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		acts[a.ID] = a
		// Sync-mode winners the shop had no room for wait in the queue
		// too (upstream.overflow: queue): the same workers send them.
		if !cfg.UsesQueue(a) {
			drain = append(drain, a)
			continue
		}
		aq := newActQueue(q, cfg, a)
		q.wg.Add(2)
		go func() {
			defer q.wg.Done()
			aq.run(readCtx, sendCtx)
		}()
		go func() {
			defer q.wg.Done()
			aq.watchBacklog(readCtx)
		}()
		q.log.Info("queue workers started", zap.String("activity", a.ID), zap.Int("workers", a.Queue.Workers),
			zap.Float64("rate", a.Queue.Rate), zap.Duration("claim_idle", aq.claimIdle))
	}
	now := time.Now().UnixMilli()
	for id, a := range q.acts {
		if acts[id] == nil && now <= store.ExpireAt(a) {
			acts[id] = a
			drain = append(drain, a)
		}
	}
	q.acts = acts
	for _, a := range drain {
		aq := newActQueue(q, cfg, a)
		aq.drain = true
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			aq.run(readCtx, sendCtx)
		}()
	}
}

// Stop stops reading and waits for the forwarders to finish what they
// hold (each bounded by the shop timeout). A forwarder that has not
// claimed its entry yet (waiting for a slot of upstream.max_inflight, or
// paused) claims nothing more: the entry stays unacknowledged in the
// stream, taken over after ClaimIdle by another instance or the next start.
func (q *Queue) Stop() { _ = q.halt(nil, false) }

// Shutdown is Stop bounded by ctx (serve's graceful stop): sends in flight
// finish and are settled; those still running when ctx ends are cut as by
// Kill (their reservations stay pending, their entries are taken over) and
// Shutdown returns ctx's error once every worker is gone.
func (q *Queue) Shutdown(ctx context.Context) error { return q.halt(ctx.Done(), false) }

// Kill stops at once, dropping requests in flight unacknowledged, as a
// crash would; another consumer takes their entries over after ClaimIdle.
// For tests and abrupt shutdown.
func (q *Queue) Kill() { _ = q.halt(nil, true) }

// halt stops reading; abort also cuts the requests in flight instead of
// waiting for them, and so does cut once closed. It returns once every
// worker is gone.
func (q *Queue) halt(cut <-chan struct{}, abort bool) error {
	q.mu.Lock()
	stop, kill := q.stop, q.kill
	q.stop, q.kill = nil, nil
	q.mu.Unlock()
	if stop == nil {
		return nil
	}
	if abort {
		kill()
	}
	stop()
	var err error
	if cut == nil {
		q.wg.Wait()
	} else {
		done := make(chan struct{})
		go func() { q.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-cut:
			err = context.DeadlineExceeded
			kill()
			<-done
		}
	}
	kill()
	return err
}

// actQueue is the workers of one activity.
type actQueue struct {
	q         *Queue
	a         *config.Activity
	cfg       *config.Config
	client    *http.Client
	keys      signing.Keyring
	base      string // upstream URL without a trailing slash
	claimIdle time.Duration
	capacity  int64 // bucket capacity: a tenth of a second of rate, at least 1
	expireAt  int64
	// budget is the activity's in-flight budget (nil: no bound); slotWait
	// how long a worker waits for a slot before it leaves the entry for a
	// later delivery.
	budget   *inflight.Budget
	slotWait time.Duration
	// drain marks the workers of an activity that no longer uses the
	// queue: they send what its streams still hold, then stop once they
	// have stayed empty for drainGrace (a buy admitted under the old
	// config may still be queueing as the reload lands).
	drain      bool
	drainGrace time.Duration
	// inflight holds the entries handed to a forwarder and not yet done
	// with (shard and id), so a re-read of this consumer's own pending
	// entries never hands one out twice; recheck asks for that re-read: a
	// read or a send's first steps met Redis trouble, and entries may sit
	// delivered to this consumer with nobody handling them (red team rv20:
	// a 1.3 s Redis stop left 20 of 50 QUEUED buyers unsent until
	// ClaimIdle, 30 s and more by default).
	inflight sync.Map
	recheck  atomic.Bool
	// sentHere holds the entries this instance sent to the shop in the
	// last ClaimIdle, with when: a re-read of this consumer's own entries
	// skips them, as a takeover would until ClaimIdle. Such an entry is
	// read back when its ack was not answered (a blip), or when the
	// re-read's reply was made before the ack ran (the client's other
	// connection) and handled after the forwarder was done; handled again
	// at once, the claim says SAME, the verify before the resend finds no
	// order yet while the shop still works on the first send (or refused
	// it), and the shop gets the buy twice (red team chaos: seeds 497 and
	// 524). Swept every ClaimIdle/4 (sweepSent).
	sentHere *sentLog
	// deferred holds the entries a worker left unsent and unacknowledged
	// because the replicas did not acknowledge its claim in time (durable
	// winners, on_timeout: refuse; durable.go), by entryKey, each with its
	// next turn: a re-read of this consumer's own entries hands one out
	// again only from then on, and the reader asks for that re-read when a
	// turn comes (deferDue). Keyed by activity and entryKey; the Queue's,
	// shared by its activities and kept across restarts.
	deferred *sync.Map
	// behind holds, by SKU and shard, the gate a failed wait for the
	// shard's replicas closed (durable.go, waitReplicas).
	behind sync.Map
}

// sentLog is sentHere, kept by the Queue across restarts (a reload starts
// new workers while entries the old ones sent may still be read back).
type sentLog struct {
	m     sync.Map // activity/shard/entry id -> time.Time
	n     atomic.Int64
	mu    sync.Mutex
	swept time.Time
}

// Test hooks (export_test.go), unset in production: troubleAtStart starts
// the workers as after Redis trouble (their own entries read back first);
// afterOwnRead runs after each answered re-read of a consumer's own
// entries of a shard, complete when it reached the end of them.
var (
	troubleAtStart bool
	afterOwnRead   func(consumer string, shard int, complete bool)
)

func entryKey(e store.QueueEntry) string { return strconv.Itoa(e.Shard) + "/" + e.ID }

type job struct {
	sku    string
	shards int
	e      store.QueueEntry
	// unsent: handle left the entry unacknowledged and unsent on Redis
	// trouble (see actQueue.recheck).
	unsent bool
	// deferred: handle left it unacknowledged and unsent for want of
	// replicas (actQueue.deferred).
	deferred bool
}

func newActQueue(q *Queue, cfg *config.Config, a *config.Activity) *actQueue {
	var keys signing.Keyring
	for _, k := range cfg.SigningKeys() {
		keys = append(keys, signing.Key{ID: k.ID, Secret: []byte(k.Secret())})
	}
	aq := &actQueue{q: q, a: a, cfg: cfg, keys: keys, sentHere: &q.sent, deferred: &q.deferred,
		base: strings.TrimSuffix(cfg.Upstream.URL, "/"), expireAt: store.ExpireAt(a)}
	aq.capacity = max(1, int64(a.Queue.Rate/10))
	aq.claimIdle = q.opt.ClaimIdle
	if aq.claimIdle <= 0 {
		roundTrip := time.Duration(float64(a.Queue.Workers) / a.Queue.Rate * float64(time.Second))
		aq.claimIdle = 30*time.Second + 3*cfg.Upstream.Timeout + 2*roundTrip
	}
	aq.budget = q.opt.Inflight.Budget(a.ID)
	aq.slotWait = aq.claimIdle / 2
	aq.drainGrace = aq.claimIdle + cfg.Upstream.OverflowWait
	aq.client = q.opt.Client
	if aq.client == nil {
		aq.client = &http.Client{
			Timeout: cfg.Upstream.Timeout,
			// A shop's 3xx (its login page for a buyer whose session
			// expired while queued) is the shop's answer to this buy,
			// judged as sync mode judges it: followed, the login page's
			// 200 confirmed a unit with no order (red-team finding).
			CheckRedirect: noRedirects,
			Transport: &http.Transport{
				Proxy:               nil,
				DialContext:         (&net.Dialer{Timeout: min(cfg.Upstream.Timeout, 2*time.Second)}).DialContext,
				MaxConnsPerHost:     a.Queue.Workers,
				MaxIdleConnsPerHost: a.Queue.Workers,
				IdleConnTimeout:     4 * time.Second, // below the usual 5 s keep-alive of shops
			},
		}
	}
	return aq
}

// pausePoll is how often paused queue workers look at the kill switch
// again (a client-side cached read).
const pausePoll = 100 * time.Millisecond

// backlogEvery is how often the backlog gauge is refreshed, and how often
// draining workers look at empty streams.
const backlogEvery = time.Second

// watchBacklog keeps seckill_queue_backlog current for the activity: the
// number operators watch to see the shop falling behind.
func (aq *actQueue) watchBacklog(ctx context.Context) {
	g := aq.q.m.QueueBacklog.WithLabelValues(aq.a.ID)
	t := time.NewTicker(backlogEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f, err := aq.q.st.Flags(ctx, aq.a.ID)
		if err != nil || !f.Ready {
			continue
		}
		// The streams are shared by the activity's SKUs: count them once.
		if n, err := aq.q.st.QueueLength(ctx, aq.a.ID, aq.a.SKUs[0].ID, f.Shards); err == nil {
			g.Set(float64(n))
		}
	}
}

// run reads entries while readCtx lives and hands them to the forwarders.
// Only as many entries are read as forwarders are free, and each is sent
// once the fleet-wide bucket grants it a token, so an entry waits in a
// consumer's pending list only while it is being handled.
func (aq *actQueue) run(readCtx, sendCtx context.Context) {
	a := aq.a
	jobs := make(chan job)
	free := make(chan struct{}, a.Queue.Workers)
	if troubleAtStart {
		aq.recheck.Store(true)
	}
	var wg sync.WaitGroup
	// The forwarders start with the first entry to send: draining workers
	// mostly find nothing.
	forwarding := false
	forward := func() {
		forwarding = true
		for i := 0; i < a.Queue.Workers; i++ {
			free <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					aq.handle(readCtx, sendCtx, &j)
					// Out of inflight before recheck asks for a re-read,
					// or the re-read would skip the entry as held.
					aq.inflight.Delete(entryKey(j.e))
					if !j.deferred {
						aq.deferred.Delete(aq.deferKey(j.e))
					}
					if j.unsent {
						aq.recheck.Store(true)
					}
					free <- struct{}{}
				}
			}()
		}
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()

	type shardRef struct {
		sku   string
		shard int
	}
	var (
		refs    []shardRef
		shards  int
		cursors = map[shardRef]string{}
		// own: shards whose entries delivered to this consumer are to be
		// read again (aq.recheck), each with the id to go on from; passes:
		// how many complete re-reads each still needs. Two: a read whose
		// answer never came can run in Redis after a re-read sent later,
		// when the two went over different connections of the client
		// (rueidis spreads a client's keyed commands at random over
		// 2^min(2, log2 GOMAXPROCS) of them): a stalled Redis runs each
		// connection's backlog in turn on waking, so the first re-read may
		// find nothing and the lost XREADGROUP deliver entries to this
		// consumer just after. The second re-read is sent once the first
		// is answered, so Redis has woken and run what it held first (red
		// team rv20: CLIENT PAUSE ALL, 4 entries left to the takeover after
		// ClaimIdle in 6 of ~270 runs, both consumers reading all along).
		own     = map[shardRef]string{}
		passes  = map[shardRef]int{}
		ensured = map[shardRef]bool{}
		rr      int
		idle    = 10 * time.Millisecond
		claimed time.Time
		// claimMore: the last claim left XAUTOCLAIM's cursor mid-list (it
		// took as many as it asked for): the next round claims again
		// instead of waiting ClaimIdle/4, so a dead instance's backlog is
		// taken over at the workers' pace (one claim of the free workers'
		// worth per ClaimIdle/4 took 1,000 entries about half an hour).
		claimMore bool
		// Draining (aq.drain): when the streams last held entries, whether
		// they ever did since Start, when they were last looked at, and
		// whether the last read found nothing (then they are looked at).
		seen      = time.Now()
		found     bool
		looked    time.Time
		drainIdle = true
	)
	sleep := func(d time.Duration) bool {
		select {
		case <-readCtx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for readCtx.Err() == nil {
		if time.Now().UnixMilli() > aq.expireAt {
			if !aq.drain {
				aq.q.log.Info("queue workers stop: the activity's keys have expired", zap.String("activity", a.ID))
			}
			return
		}
		f, err := aq.q.st.Flags(readCtx, a.ID)
		if aq.drain && err == nil && drainIdle && time.Since(looked) >= backlogEvery {
			looked = time.Now()
			var n int64
			var lerr error
			if f.Ready && f.Shards > 0 {
				n, lerr = aq.q.st.QueueLength(readCtx, a.ID, a.SKUs[0].ID, f.Shards)
			}
			switch {
			case lerr != nil: // Redis trouble: read as usual, look again later
			case n > 0:
				if !found {
					aq.q.log.Warn("queue: the activity no longer uses the queue, but buyers told QUEUED are still in it: sending them",
						zap.String("activity", a.ID), zap.Int64("entries", n))
					found = true
				}
				seen = time.Now()
				aq.q.m.QueueBacklog.WithLabelValues(a.ID).Set(float64(n))
			case time.Since(seen) >= aq.drainGrace:
				if found {
					aq.q.log.Info("queue: drained; no workers for the activity now", zap.String("activity", a.ID))
					aq.q.m.QueueBacklog.WithLabelValues(a.ID).Set(0)
				}
				return
			default:
				if !sleep(backlogEvery) {
					return
				}
				continue
			}
		}
		if err != nil || !f.Ready || f.Shards <= 0 {
			sleep(time.Second)
			continue
		}
		if f.Paused {
			// The kill switch holds the queue too: nothing more is sent
			// to the shop (entries already handed to a forwarder finish);
			// queued buyers stay queued, not released, until resume.
			sleep(pausePoll)
			continue
		}
		if f.Shards != shards {
			// One stream per shard, shared by the activity's SKUs (any SKU
			// names its keys); each entry's token says its SKU.
			shards, refs = f.Shards, nil
			for s := 0; s < shards; s++ {
				refs = append(refs, shardRef{a.SKUs[0].ID, s})
			}
			ensured = map[shardRef]bool{}
		}
		if !forwarding {
			forward()
		}
		// Wait for one free forwarder, then take every other free one.
		select {
		case <-readCtx.Done():
			return
		case <-free:
		}
		n := 1
		for more := true; more && n < a.Queue.Workers; {
			select {
			case <-free:
				n++
			default:
				more = false
			}
		}
		var got []job
		claim := claimMore || time.Since(claimed) > aq.claimIdle/4
		if claim {
			claimed, claimMore = time.Now(), false
		}
		aq.sweepSent()
		if aq.deferDue() {
			aq.recheck.Store(true)
		}
		if aq.recheck.Swap(false) {
			for _, ref := range refs {
				if _, ok := own[ref]; !ok {
					own[ref] = "0"
				}
				passes[ref] = 2
			}
		}
		for i := 0; i < len(refs) && len(got) < n && readCtx.Err() == nil; i++ {
			ref := refs[(rr+i)%len(refs)]
			if !ensured[ref] {
				if err := aq.q.st.EnsureQueueGroup(readCtx, a.ID, ref.sku, shards, ref.shard, aq.expireAt); err != nil {
					aq.q.log.Warn("queue: consumer group", zap.String("activity", a.ID), zap.Error(err))
					continue
				}
				ensured[ref] = true
			}
			var es []store.QueueEntry
			var ownErr error
			if after, ok := own[ref]; ok {
				var mine []store.QueueEntry
				var more bool
				mine, more, ownErr = aq.q.st.ReadOwnQueue(readCtx, a.ID, ref.sku, shards, ref.shard, aq.q.opt.Consumer, after, int64(n-len(got)))
				switch {
				case ownErr != nil:
					err = ownErr
					aq.recheck.Store(true)
				case more:
					own[ref] = mine[len(mine)-1].ID
				case passes[ref] > 1:
					passes[ref]--
					own[ref] = "0" // once more, next round (see passes)
				default:
					delete(own, ref)
					delete(passes, ref)
				}
				if afterOwnRead != nil && ownErr == nil {
					afterOwnRead(aq.q.opt.Consumer, ref.shard, !more)
				}
				var due int
				es, due = aq.notDeferred(aq.notSentHere(mine))
				if len(es) > due {
					aq.q.log.Info("queue: entries delivered here earlier and left unhandled, handled now", zap.String("activity", a.ID), zap.Int("entries", len(es)))
				}
			}
			if ownErr == nil && claim && len(got)+len(es) < n {
				cur := cursors[ref]
				if cur == "" {
					cur = "0-0"
				}
				var taken []store.QueueEntry
				taken, cur, err = aq.q.st.ClaimQueue(readCtx, a.ID, ref.sku, shards, ref.shard, aq.q.opt.Consumer, aq.claimIdle, cur, int64(n-len(got)-len(es)))
				cursors[ref] = cur
				if err == nil && cur != "0-0" && cur != "" {
					claimMore = true
				}
				if len(taken) > 0 {
					aq.q.log.Info("queue: took over entries of a silent consumer", zap.String("activity", a.ID), zap.Int("entries", len(taken)))
				}
				es = append(es, taken...)
			}
			if err == nil && len(got)+len(es) < n {
				var fresh []store.QueueEntry
				fresh, err = aq.q.st.ReadQueue(readCtx, a.ID, ref.sku, shards, ref.shard, aq.q.opt.Consumer, int64(n-len(got)-len(es)))
				es = append(es, fresh...)
			}
			if errors.Is(err, store.ErrNoGroup) {
				ensured[ref] = false
			} else if err != nil && readCtx.Err() == nil {
				aq.q.log.Warn("queue: read", zap.String("activity", a.ID), zap.Error(err))
				// The read may have delivered entries whose reply never came.
				aq.recheck.Store(true)
			}
			for _, e := range es {
				// Never one a forwarder of this instance holds, nor one
				// twice (read back as this consumer's and taken over).
				if _, busy := aq.inflight.Load(entryKey(e)); busy || slices.ContainsFunc(got, func(j job) bool { return j.e.Shard == e.Shard && j.e.ID == e.ID }) {
					continue
				}
				got = append(got, job{sku: ref.sku, shards: shards, e: e})
			}
		}
		rr++
		drainIdle = len(got) == 0
		for i := len(got); i < n; i++ {
			free <- struct{}{}
		}
		if len(got) == 0 {
			if !sleep(idle) {
				return
			}
			idle = min(2*idle, aq.q.opt.Poll)
			continue
		}
		idle = 10 * time.Millisecond
		// Hand the entries out as the bucket grants tokens for them. On
		// shutdown the rest stay in this consumer's pending list and are
		// taken over after ClaimIdle.
		for len(got) > 0 {
			// The kill switch again before each handout (a cached read):
			// paused, the entries read stay here, held, and go first on
			// resume; nothing more is sent meanwhile (README: every
			// instance obeys within 1 s).
			if aq.paused(readCtx) {
				if !sleep(pausePoll) {
					return
				}
				continue
			}
			k, wait, err := aq.q.st.TakeTokens(readCtx, a.ID, a.Queue.Rate, aq.capacity, int64(len(got)))
			if err != nil {
				if readCtx.Err() != nil {
					return
				}
				aq.q.log.Warn("queue: rate bucket", zap.String("activity", a.ID), zap.Error(err))
				wait = 100 * time.Millisecond
			}
			for ; k > 0; k-- {
				aq.inflight.Store(entryKey(got[0].e), struct{}{})
				jobs <- got[0]
				got = got[1:]
			}
			if len(got) > 0 && !sleep(max(wait, time.Millisecond)) {
				return
			}
		}
	}
}

// paused reports whether the activity's kill switch is on (a client-side
// cached read of its flags), or the workers are held (QueueOptions.Hold);
// on Redis trouble it is not (the calls that follow meet the same trouble).
func (aq *actQueue) paused(ctx context.Context) bool {
	if h := aq.q.opt.Hold; h != nil && h() != "" {
		return true
	}
	f, err := aq.q.st.Flags(ctx, aq.a.ID)
	return err == nil && f.Paused
}

// awaitResume waits while the activity is paused; false when the workers
// stop meanwhile (readCtx: reload or shutdown; ctx: killed).
func (aq *actQueue) awaitResume(readCtx, ctx context.Context) bool {
	for {
		select {
		case <-readCtx.Done():
			return false
		case <-ctx.Done():
			return false
		case <-time.After(pausePoll):
		}
		if !aq.paused(ctx) {
			return true
		}
	}
}

// handle forwards one queued reservation and settles it. The reservation
// changes state at most once however often its entry is delivered: every
// transition is conditional, and an entry whose reservation is no longer
// queued or pending is acknowledged without a request to the shop. A
// pause that lands before the claim holds the entry here, its in-flight
// slot given back, until resume (sent then) or until the workers stop
// (readCtx: left unacknowledged, taken over after ClaimIdle). Stopping
// workers claim nothing more: the wait for an in-flight slot ends with
// readCtx too, and readCtx is looked at once more before the claim (a
// worker that got its slot after Stop sent it anyway, one slot at a time,
// and serve's stop took workers × the shop's latency before its drain
// began: red-team finding, TestRC12SigtermWaitsForQueueWorkersBeyondShutdownTimeout).
// Only a send already claimed runs on, under ctx.
func (aq *actQueue) handle(readCtx, ctx context.Context, j *job) {
	a := aq.a
	st := aq.q.st
	ack := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Tried again through a blip (each try gets redis.timeout): an
		// entry left unacknowledged is read back or taken over later.
		for {
			err := st.AckQueue(cctx, a.ID, j.sku, j.shards, j.e.Shard, j.e.ID, j.e.Token)
			if err == nil {
				return
			}
			if !store.Retryable(err) || cctx.Err() != nil {
				aq.q.log.Warn("queue: ack failed; the entry will be delivered again", zap.Error(err))
				return
			}
			select {
			case <-cctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	tok, err := store.ParseToken(j.e.Token)
	if err != nil || tok.Activity != a.ID || a.SKU(tok.SKU) == nil {
		ack() // not an entry this proxy wrote (or trimmed away): nothing to do
		return
	}
	res, ok, err := st.Lookup(ctx, tok, j.shards)
	if err != nil {
		j.unsent = true // Redis trouble: read again soon (nothing sent)
		return
	}
	if !ok || (res.State != store.StateQueued && res.State != store.StatePending) {
		ack()
		return
	}
	// A slot of the shop's in-flight budget first (upstream.max_inflight),
	// before the claim starts the reservation's pending_timeout clock.
	// Then the kill switch once more: a pause that came while this worker
	// waited (for the slot, or for the entry's handout) sends nothing.
	done := func(time.Duration, inflight.Outcome) {}
	for {
		if b := aq.budget; b != nil {
			slot, got := b.Acquire(readCtx, aq.slotWait)
			if got != inflight.Got {
				return // no room in time, stopping (or Redis trouble): delivered again later
			}
			var once sync.Once
			done = func(rtt time.Duration, out inflight.Outcome) { once.Do(func() { b.Done(slot, rtt, out) }) }
		}
		if !aq.paused(ctx) {
			break
		}
		done(0, inflight.NotSent) // the slot back to the other workers
		if !aq.awaitResume(readCtx, ctx) {
			return // stopping: left for a takeover, as entries not handed out
		}
	}
	defer done(0, inflight.NotSent)
	if readCtx.Err() != nil {
		return // stopping: unclaimed, left for a takeover (the slot goes back)
	}
	if !aq.preWait(ctx, j, res) {
		return // deferred: the replicas are behind (durable.go)
	}
	// Claim it: queued -> pending since now, in one conditional script, so
	// a release in the meantime (an operator) means it is never sent, and
	// the reconciler's pending_timeout counts from this send.
	sentMs := time.Now().UnixMilli()
	claim, err := st.Claim(ctx, tok, j.shards, sentMs, aq.expireAt)
	if err != nil {
		j.unsent = true // not sent: read again soon (a claim that ran is Same then)
		return
	}
	switch claim {
	case lua.OK:
	case lua.Same:
		// Pending already: a worker claimed it and died (or lost Redis)
		// before settling it. The claim re-stamped the send time; send
		// again with the same token, which the shop dedups by.
	default: // released, confirmed or gone since the look-up
		aq.q.m.Settlements.WithLabelValues("queue_claim", claim.String()).Inc()
		ack()
		return
	}
	if claim == lua.Same && a.Verify.URL != "" {
		// The shop may have seen it from the worker that died: ask first.
		// A 200 is believed only from a verify that answers 404 for a token
		// never issued: a catch-all route's or a login page's 200 confirmed
		// a buy the shop never took (red-team finding, TestRV15Queue...).
		// Otherwise it is sent again, which the shop dedups by token.
		if v, oid, _ := verifyOrder(ctx, aq.client, a.Verify.URL, j.e.Token); v == OrderExists && aq.verifyTrusted(ctx, a, tok) {
			if aq.settle(ctx, "confirm", tok, func(c context.Context) (lua.Code, error) { return st.Confirm(c, tok, j.shards, oid) }) {
				ack()
			}
			return
		}
	}
	if st.DurableWinners() && !aq.durable(ctx, tok, j) {
		return
	}
	if config.LateToSend(time.UnixMilli(sentMs), time.Now(), a.PendingTimeout, aq.cfg.Upstream.Timeout) {
		// The wait for replicas, or a takeover's verify, took so long
		// that the reconciler may settle this reservation while the shop
		// works on it (it counts pending_timeout from the claim): claim
		// it again, stamping now. A reconciler's release judged by the
		// old stamp is then refused (RESTAMPED); one that landed first
		// means it is not sent (red-team finding).
		sentMs = time.Now().UnixMilli()
		again, err := st.Claim(ctx, tok, j.shards, sentMs, aq.expireAt)
		if err != nil {
			j.unsent = true // not sent: read again soon
			return
		}
		if again != lua.Same {
			aq.q.m.Settlements.WithLabelValues("queue_claim", again.String()).Inc()
			ack()
			return
		}
	}
	aq.markSent(j.e) // see sentHere
	t0 := time.Now()
	status, oid, err := aq.forward(ctx, tok, res, j.e.Request)
	done(time.Since(t0), sendOutcome(ctx, status, err))
	switch {
	case ctx.Err() != nil:
		return // killed: the outcome is unknown, leave the entry for a takeover
	case err == nil && status >= 200 && status < 300:
		if !aq.settle(ctx, "confirm", tok, func(c context.Context) (lua.Code, error) { return st.Confirm(c, tok, j.shards, oid) }) {
			return // not acked: redelivery verifies, then confirms
		}
	case (err == nil && (a.Verify.URL == "" || aq.cfg.Upstream.Releases(status))) || isDefiniteNo(err):
		// A non-2xx answer is a definite no as in sync mode: a configured
		// release status, or any status when nothing could settle it
		// otherwise (no verify.url). A 5xx may come from a balancer after
		// the shop took the order: with verify.url it is left pending for
		// the reconciler (releasing it sold the unit twice).
		reason := "shop_status_" + strconv.Itoa(status)
		if err != nil {
			reason = "shop_unreachable"
		}
		if !aq.settle(ctx, "release", tok, func(c context.Context) (lua.Code, error) {
			// Only this send's: a takeover that re-claimed it after
			// ClaimIdle (this worker being slow) has sent it again.
			return st.ReleaseSent(c, tok, j.shards, reason, time.Now().UnixMilli(), sentMs)
		}) {
			return
		}
	default:
		if err == nil {
			err = fmt.Errorf("shop answered %d", status)
		}
		aq.q.log.Warn("queue: shop outcome unknown; reservation stays pending for the reconciler",
			zap.String("token", j.e.Token), zap.Error(err))
		aq.q.m.Settlements.WithLabelValues("queue_unknown", "PENDING").Inc()
	}
	ack()
}

// markSent notes that this instance sends e now (sentHere).
func (aq *actQueue) markSent(e store.QueueEntry) {
	if _, loaded := aq.sentHere.m.Swap(aq.a.ID+"/"+entryKey(e), time.Now()); !loaded {
		aq.sentHere.n.Add(1)
	}
}

// notSentHere drops from es, entries read back as this consumer's own, the
// ones this instance sent less than ClaimIdle ago (sentHere): the shop may
// still be working on them, and a takeover would leave them that long too.
// Older ones are handled (verify first), as a takeover would.
func (aq *actQueue) notSentHere(es []store.QueueEntry) []store.QueueEntry {
	out := es[:0:0]
	for _, e := range es {
		if v, ok := aq.sentHere.m.Load(aq.a.ID + "/" + entryKey(e)); ok && time.Since(v.(time.Time)) < aq.claimIdle {
			continue
		}
		out = append(out, e)
	}
	return out
}

// sweepSent forgets sends older than ClaimIdle, every ClaimIdle/4 (on the
// reader's goroutine): sentHere holds at most queue.rate × ClaimIdle
// entries, about 100 B each.
func (aq *actQueue) sweepSent() {
	l := aq.sentHere
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.swept) < aq.claimIdle/4 || l.n.Load() == 0 {
		return
	}
	l.swept = time.Now()
	l.m.Range(func(k, v any) bool {
		if time.Since(v.(time.Time)) >= aq.claimIdle {
			l.m.Delete(k)
			l.n.Add(-1)
		}
		return true
	})
}

// verifyTrusted reports whether the activity's verify.url may be believed
// when it says an order exists: it answers 404 for a token shaped as tok
// that no buyer was ever given. An untrusted one is logged.
func (aq *actQueue) verifyTrusted(ctx context.Context, a *config.Activity, tok store.Token) bool {
	if p := unknownTokenProblem(ctx, aq.client, a.Verify.URL, tok); p != "" {
		aq.q.log.Error("queue: takeover not confirmed on verify's word; sent again", zap.String("activity", a.ID),
			zap.String("token", tok.String()), zap.String("problem", p))
		return false
	}
	return true
}

// settle runs one transition, retried briefly on Redis trouble; it reports
// whether the reservation is settled (or was already).
func (aq *actQueue) settle(ctx context.Context, kind string, tok store.Token, f func(context.Context) (lua.Code, error)) bool {
	for attempt := 0; attempt < 3; attempt++ {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code, err := f(cctx)
		cancel()
		if err == nil {
			aq.q.m.Settlements.WithLabelValues("queue_"+kind, code.String()).Inc()
			if kind == "confirm" {
				aq.q.confirmLog.Settled("queue: confirm", tok.String(), code)
			}
			return true
		}
		aq.q.log.Warn("queue: "+kind+" failed", zap.Error(err))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond << attempt):
		}
	}
	aq.q.m.Settlements.WithLabelValues("queue_"+kind, "error").Inc()
	// Redis is still not answering: keep trying in the background until it
	// does (a shop-accepted order must not wait for the entry's takeover),
	// and leave the entry unacknowledged so a crash meanwhile is covered by
	// the takeover, whose claim then finds the reservation settled.
	aq.q.st.Retrier().Submit("queue_"+kind, kind, func(c context.Context) error {
		code, err := f(c)
		if err == nil && kind == "confirm" {
			aq.q.confirmLog.Settled("queue: confirm", tok.String(), code)
		}
		return err
	})
	return false
}

// forward sends one reservation to the shop: the buyer's own request as
// the proxy kept it (kept: body, cookies, query and headers, as sync mode
// sends them), else one rebuilt from the route; either with the X-Seckill-*
// headers of SPEC §5, signed now.
func (aq *actQueue) forward(ctx context.Context, tok store.Token, res store.Reservation, kept string) (int, string, error) {
	a := aq.a
	qty := strconv.FormatInt(res.Qty, 10)
	var req *http.Request
	if kept != "" {
		var err error
		if req, err = aq.keptRequest(ctx, kept); err != nil {
			// Written by the proxy, so this is a bug or a damaged entry:
			// the rebuilt request still places the order.
			aq.q.log.Error("queue: the kept request cannot be read; sending one rebuilt from the route",
				zap.String("token", tok.String()), zap.Error(err))
			req = nil
		}
	}
	if req == nil {
		var err error
		if req, err = aq.rebuilt(ctx, tok, res, qty); err != nil {
			return 0, "", fmt.Errorf("%w: %w", errNotSent, err)
		}
	}
	noReplay(req)
	t := tok.String()
	h := req.Header
	h["X-Seckill-Token"] = []string{t}
	h["X-Seckill-Activity"] = []string{a.ID}
	h["X-Seckill-Sku"] = []string{tok.SKU}
	h["X-Seckill-Qty"] = []string{qty}
	h["X-Seckill-User"] = []string{res.User}
	// v2 covers the request line net/http writes for req: method and
	// request-target (escaped path, "?" and the raw query when present).
	h["X-Seckill-Signature"] = []string{aq.keys.Sign(time.Now().UnixMilli(), signing.Request{Token: t, Activity: a.ID, SKU: tok.SKU,
		Qty: qty, User: res.User, Method: req.Method, Target: req.URL.RequestURI()})}
	t0 := time.Now()
	resp, err := aq.client.Do(req)
	if err != nil {
		aq.q.m.UpstreamLatency.WithLabelValues("queue_failed").Observe(time.Since(t0).Seconds())
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }() // read (capped) below; a close error changes nothing
	if resp.StatusCode < 200 {
		// A final status below 200: a 101 (the shop switched protocols for
		// a request that asked for none) or one below 100. What the shop
		// did with the buy is unknown, as sync mode judges it
		// (proxy/buytransport.go); never a definite no, with or without
		// verify.url.
		aq.q.m.UpstreamLatency.WithLabelValues("queue_failed").Observe(time.Since(t0).Seconds())
		return 0, "", fmt.Errorf("the shop answered %d: the buy's outcome is unknown", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	outcome := "queue_ok"
	if resp.StatusCode > 299 { // below 200 returned above
		outcome = "queue_refused"
	}
	aq.q.m.UpstreamLatency.WithLabelValues(outcome).Observe(time.Since(t0).Seconds())
	if err != nil && outcome == "queue_ok" {
		return 0, "", err // 2xx whose body was cut: outcome unknown
	}
	return resp.StatusCode, orderIDOf(resp.Header, b, a.OrderIDFrom), nil
}

// keptRequest reads the buyer's request the proxy kept in the stream entry
// (HTTP/1.1 wire form, see proxy.keptRequest) and points it at the shop.
func (aq *actQueue) keptRequest(ctx context.Context, kept string) (*http.Request, error) {
	in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(kept)))
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(in.RequestURI, "/") {
		return nil, fmt.Errorf("request target %q is not a path", in.RequestURI)
	}
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, in.Method, aq.base+in.RequestURI, rd)
	if err != nil {
		return nil, err
	}
	req.Header, req.Host = in.Header, in.Host
	// Nobody waits on this answer but the worker, which reads the order id
	// from it: net/http asks for gzip itself and decodes it, where the
	// buyer's Accept-Encoding (br, zstd) would leave it encoded.
	req.Header.Del("Accept-Encoding")
	return req, nil
}

// rebuilt is a buy request rebuilt from the activity's route, for an entry
// that carries no request (the buyer's request could not be kept, see
// proxy/keep.go): the path with {activity} and
// {sku} filled in, the SKU and quantity where sku_from / qty_from say
// (query, form or JSON body), the buyer's identity where identity.user
// says; a POST/PUT/PATCH with nothing to carry sends {}.
func (aq *actQueue) rebuilt(ctx context.Context, tok store.Token, res store.Reservation, qty string) (*http.Request, error) {
	a := aq.a
	path := strings.NewReplacer("{activity}", url.PathEscape(a.ID), "{sku}", url.PathEscape(tok.SKU)).Replace(a.Route.Path)
	query := url.Values{}
	form := url.Values{}
	body := map[string]any{}
	put := func(from, value string, number bool) {
		kind, name, _ := strings.Cut(from, ":")
		switch kind {
		case "query":
			query.Set(name, value)
		case "form":
			form.Set(name, value)
		case "json":
			var v any = value
			if number {
				v = json.Number(value)
			}
			jsonptr.Set(body, name, v)
		}
	}
	put(a.Route.SkuFrom, tok.SKU, false)
	if a.Route.QtyFrom != "" {
		put(a.Route.QtyFrom, qty, true)
	}
	id := aq.cfg.Identity.User
	if id.Query != "" {
		query.Set(id.Query, res.User)
	}
	u := aq.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	ctype := ""
	switch {
	case len(form) > 0:
		rd, ctype = strings.NewReader(form.Encode()), "application/x-www-form-urlencoded"
	case len(body) > 0 || a.Route.Method == http.MethodPost || a.Route.Method == http.MethodPut || a.Route.Method == http.MethodPatch:
		b, _ := json.Marshal(body)
		rd, ctype = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, a.Route.Method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	switch {
	case id.Header != "":
		req.Header.Set(id.Header, res.User)
	case id.Cookie != "":
		req.AddCookie(&http.Cookie{Name: id.Cookie, Value: res.User})
	}
	return req, nil
}

// noReplay makes req one net/http never sends twice. Its Transport sends a
// request again on another connection when a reused one is cut after
// writing it, if it deems the request replayable: a GET or HEAD, or one
// carrying Idempotency-Key or X-Idempotency-Key (many client SDKs add one
// to every POST), whose body it can rebuild. For a buy that is a second
// order while the shop may still work on the first, and a second slot of
// max_inflight spent by one send (red-team finding sb13).
func noReplay(req *http.Request) {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		// A body net/http cannot rebuild is never replayed; an empty one
		// is probed (these methods usually lack one) and sent as none.
		if req.Body == nil || req.Body == http.NoBody {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader("")), 0
		}
		req.GetBody = nil
	default:
		if req.Body != nil && req.Body != http.NoBody {
			req.GetBody = nil
			return
		}
		// No body (sent with Content-Length: 0): the only reason left to
		// replay it is the header, which net/http looks up by its
		// canonical key. Stored under the lower-case key it is still sent
		// (names are case-insensitive) but no longer read as one.
		for _, k := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
			if v, ok := req.Header[k]; ok {
				delete(req.Header, k)
				req.Header[strings.ToLower(k)] = v
			}
		}
	}
}

// sendOutcome is how a send ended, for the in-flight budget's adaptive limit.
func sendOutcome(ctx context.Context, status int, err error) inflight.Outcome {
	switch {
	case err != nil && isDefiniteNo(err):
		return inflight.NotSent
	case err != nil:
		// No answer (a timeout, the connection cut after sending, a
		// shutdown mid-send): the shop may still be working on it, as in
		// the proxy's own sends (proxy/overflow.go), so its slot stays
		// taken one more upstream.timeout.
		return inflight.Unknown
	case ctx.Err() != nil:
		return inflight.NotSent
	case status >= 500 || status == http.StatusTooManyRequests:
		return inflight.Overloaded
	}
	return inflight.Answered
}

// isDefiniteNo reports whether err proves the shop never got the request:
// the connection could not be made.
func isDefiniteNo(err error) bool {
	var op *net.OpError
	return errors.Is(err, errNotSent) || (errors.As(err, &op) && op.Op == "dial")
}

// errNotSent marks a send that failed before any request was written.
var errNotSent = errors.New("not sent")

// orderIDOf finds the order id in a 2xx answer: json:/pointer or header:NAME.
func orderIDOf(h http.Header, body []byte, from string) string {
	kind, name, _ := strings.Cut(from, ":")
	switch kind {
	case "header":
		return h.Get(name)
	case "json":
		// A leading byte order mark is not part of the document (RFC 8259 §8.1).
		id, _ := jsonptr.Find(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), name)
		return id
	}
	return ""
}

// StrandedQueues names the activities cfg does not have whose queue
// streams still hold entries in Redis (buyers told 202 QUEUED, not yet
// sent), found through the registry of preheated activities
// (store.DroppedActivities), as "id (N queued)". A reload drains such an
// activity (Start keeps the old config's copy); a fresh serve knows only
// its file, and the registry keeps neither the route, the rate nor the
// order id's place that a send needs, so serve refuses to start instead
// (cmd/seckill-proxy/serve.go): the entries stay until a file that names
// the activity again sends them.
func StrandedQueues(ctx context.Context, st *store.Store, cfg *config.Config, now time.Time) ([]string, error) {
	known := make([]string, len(cfg.Activities))
	for i := range cfg.Activities {
		known[i] = cfg.Activities[i].ID
	}
	drops, err := st.DroppedActivities(ctx, known, now)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range drops {
		if len(a.SKUs) == 0 {
			continue
		}
		// The shard streams are shared by the activity's SKUs.
		n, err := st.QueueLength(ctx, a.ID, a.SKUs[0].ID, a.Shards)
		if err != nil {
			return out, err
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s (%d queued)", a.ID, n))
		}
	}
	return out, nil
}
