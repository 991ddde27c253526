package reservation_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// startDurableProxy is startProxy with the store opened from cfg.Redis
// (durable winners included); it also returns the metrics.
func startDurableProxy(t *testing.T, cfg *config.Config) (string, *store.Store) {
	t.Helper()
	log := zap.NewNop()
	st, err := store.OpenNow(cfg.Redis, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m := metrics.New()
	pipe := admission.New(st, m, log, time.Now)
	pipe.Apply(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go pipe.Run(ctx)
	srv, err := proxy.New(cfg, pipe, st, m, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		cancel()
		sctx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer c2()
		_ = srv.Shutdown(sctx)
	})
	if _, err := st.Preheat(tctx(t), &cfg.Activities[0], false, time.Now()); err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), st
}

// TestQueueDurableWinners (issue 11 §2, queue mode): with the replica
// stopped, a buyer is not told QUEUED but STORE_UNAVAILABLE and holds
// nothing, and the workers send nothing; a reservation queued while the
// replica ran but claimed by a worker while it is stopped is neither sent
// nor released: it stays pending, its entry deferred (decisions §56; before,
// the worker released it, not_durable); once the replica runs again, those
// buyers and the ones queued since get their orders.
func TestQueueDurableWinners(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{m.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 1000)
	// A healthy replica must never miss the timeout, also on a loaded machine.
	cfg.Redis.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: redistest.TimeoutScale * 200 * time.Millisecond, OnTimeout: config.DurableRefuse}
	a := &cfg.Activities[0]
	addr, st := startDurableProxy(t, cfg)

	// 1. Replica stopped, no workers yet: nobody is queued, nothing held.
	r.Pause(t)
	for _, u := range []string{"s1", "s2", "s3"} {
		if got := buy(addr, u); got.status != 503 || got.Code != "STORE_UNAVAILABLE" {
			t.Fatalf("buy %s with the replica stopped: %d %s", u, got.status, got.Code)
		}
	}
	if s := status(t, st, a); !s.OK || s.Remaining != 10 || s.Pending != 0 || s.Released != 3 {
		t.Fatalf("status with the replica stopped: %+v", s)
	}

	// 2. Queued while the replica ran, claimed while it is stopped.
	r.Resume(t)
	var queued []string
	eventually(t, 10*time.Second, "queued after SIGCONT", func() bool {
		got := buy(addr, "q1")
		if got.Code == "QUEUED" {
			queued = append(queued, got.Token)
		}
		return got.Code == "QUEUED"
	})
	if got := buy(addr, "q2"); got.Code != "QUEUED" {
		t.Fatalf("buy q2: %d %s", got.status, got.Code)
	} else {
		queued = append(queued, got.Token)
	}
	r.Pause(t)
	wm := metrics.New()
	q := reservation.NewQueue(st, wm, zap.NewNop(), reservation.QueueOptions{Consumer: "w-" + t.Name()})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 10*time.Second, "the workers claim what was queued", func() bool {
		return noneQueued(t, st, a, queued)
	})
	eventually(t, 10*time.Second, "the workers defer what the replicas did not acknowledge", func() bool {
		return counter(wm.DurableWinners, "queue", "deferred") >= float64(len(queued))
	})
	if n := sh.sends(); n != 0 {
		t.Fatalf("the shop got %d requests while the replica was stopped", n)
	}
	for _, tok := range queued {
		pt, _ := store.ParseToken(tok)
		res, _, err := st.Lookup(tctx(t), pt, a.Shards)
		if err != nil || res.State != store.StatePending {
			t.Fatalf("%s: %+v, %v; want pending (claimed, deferred, never released)", tok, res, err)
		}
	}
	if n := counter(wm.DurableWinners, "queue", "refused"); n != 0 {
		t.Fatalf("durable_winners{queue,refused} = %v, want 0", n)
	}
	if s := status(t, st, a); !s.OK || s.Remaining != 10-int64(len(queued)) || s.Pending != int64(len(queued)) {
		t.Fatalf("status while the workers defer: %+v", s)
	}

	// 3. Replica back: queued buyers get their orders.
	r.Resume(t)
	eventually(t, 10*time.Second, "queued after the second SIGCONT", func() bool {
		got := buy(addr, "q3")
		if got.Code == "QUEUED" {
			queued = append(queued, got.Token)
		}
		return got.Code == "QUEUED"
	})
	for _, u := range []string{"q4", "q5", "s1"} {
		got := buy(addr, u)
		if got.Code != "QUEUED" {
			t.Fatalf("buy %s after SIGCONT: %d %s", u, got.status, got.Code)
		}
		queued = append(queued, got.Token)
	}
	eventually(t, 10*time.Second, "queued buyers confirmed", func() bool {
		return status(t, st, a).Confirmed == int64(len(queued))
	})
	if s := status(t, st, a); !s.OK || s.Remaining != 10-int64(len(queued)) || s.Pending != 0 {
		t.Fatalf("status at the end: %+v", s)
	}
	if n, o := sh.sends(), sh.orderCount(); n != len(queued) || o != len(queued) {
		t.Fatalf("the shop got %d requests and holds %d orders, want %d each", n, o, len(queued))
	}
}

func counter(vec *prometheus.CounterVec, labels ...string) float64 {
	var m dto.Metric
	if err := vec.WithLabelValues(labels...).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// queuedWithReplica buys users in queue mode until each is told QUEUED
// (the replica may acknowledge only from its first REPLCONF ACK) and
// returns their tokens.
func queuedWithReplica(t *testing.T, addr string, users ...string) []string {
	t.Helper()
	var toks []string
	for _, u := range users {
		eventually(t, 10*time.Second, "buy "+u+" QUEUED", func() bool {
			got := buy(addr, u)
			if got.Code == "QUEUED" {
				toks = append(toks, got.Token)
				return true
			}
			if got.Code != "STORE_UNAVAILABLE" {
				t.Fatalf("buy %s: %d %s", u, got.status, got.Code)
			}
			return false
		})
	}
	return toks
}

// noneQueued reports whether every token's reservation has left the
// queued state (claimed by a worker, or settled).
func noneQueued(t *testing.T, st *store.Store, a *config.Activity, toks []string) bool {
	for _, tok := range toks {
		pt, _ := store.ParseToken(tok)
		res, ok, err := st.Lookup(tctx(t), pt, a.Shards)
		if err != nil || !ok || res.State == store.StateQueued {
			return false
		}
	}
	return true
}

func (s *shop) sends() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// TestQueueDurableWorkerWaitsForReplica (decisions §56): a buyer told
// QUEUED holds a reservation the replicas acknowledged before the 202 (its
// stream entry is written only then, §53). A worker whose own wait after
// its claim fails — the replica stopped — neither sends it nor releases
// it: it stays pending (the buyer's poll says so), and once the replica is
// back it is sent, once, and confirmed (also across a reload of the
// workers meanwhile). Before §56 the worker released it (not_durable): a
// buyer told QUEUED lost a durable reservation.
func TestQueueDurableWorkerWaitsForReplica(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{m.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 1000)
	cfg.Redis.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: redistest.TimeoutScale * 200 * time.Millisecond, OnTimeout: config.DurableRefuse}
	a := &cfg.Activities[0]
	addr, st := startDurableProxy(t, cfg)

	queued := queuedWithReplica(t, addr, "q1", "q2", "q3")
	r.Pause(t)
	wm := metrics.New()
	q := reservation.NewQueue(st, wm, zap.NewNop(), reservation.QueueOptions{Consumer: "w-" + t.Name()})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 10*time.Second, "every queued reservation claimed by a worker", func() bool {
		return noneQueued(t, st, a, queued)
	})
	// The workers' waits fail for as long as the replica is stopped, and
	// their entries come back to them meanwhile: nothing is sent, nothing
	// released.
	time.Sleep(redistest.TimeoutScale * 1500 * time.Millisecond)
	for _, tok := range queued {
		pt, _ := store.ParseToken(tok)
		res, _, err := st.Lookup(tctx(t), pt, a.Shards)
		if err != nil || res.State != store.StatePending {
			t.Fatalf("%s with the replica stopped: %+v, %v; want pending (claimed, not sent, not released)", tok, res, err)
		}
		if got := reservationState(addr, tok); got != store.StatePending {
			t.Fatalf("%s: the buyer's poll says %q with the replica stopped, want pending", tok, got)
		}
	}
	if n := sh.sends(); n != 0 {
		t.Fatalf("the shop got %d requests while the replica was stopped", n)
	}
	if n := counter(wm.DurableWinners, "queue", "deferred"); n < float64(len(queued)) {
		t.Fatalf("durable_winners{queue,deferred} = %v, want at least %d", n, len(queued))
	}

	// A reload restarts the workers: the deferred entries still come back
	// within their back-off, not after ClaimIdle (30 s and more here).
	q.Start(cfg)
	r.Resume(t)
	eventually(t, 15*time.Second, "the deferred buyers confirmed once the replica is back", allConfirmed(addr, queued))
	for _, tok := range queued {
		if _, ok := sh.order(tok); !ok {
			t.Fatalf("%s confirmed without an order at the shop", tok)
		}
	}
	if n, o := sh.sends(), sh.orderCount(); n != len(queued) || o != len(queued) {
		t.Fatalf("the shop got %d requests and holds %d orders; want %d each (every buyer sent once)", n, o, len(queued))
	}
	if s := status(t, st, a); !s.OK || s.Remaining != 10-int64(len(queued)) || s.Pending != 0 || s.Confirmed != int64(len(queued)) {
		t.Fatalf("status at the end: %+v", s)
	}
	if n := counter(wm.DurableWinners, "queue", "refused"); n != 0 {
		t.Fatalf("durable_winners{queue,refused} = %v, want 0", n)
	}
	eventually(t, 10*time.Second, "the stream drained", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, a.SKUs[0].ID, a.Shards)
		return err == nil && n == 0
	})
}

// TestQueueDurableReplicaNeverReturns (decisions §56): with the replica
// gone for good, the reservations a worker claimed and could not make
// durable stay pending, unsent, however often their entries come back, and
// the reconciler settles them once pending_timeout has passed since the
// claim (verify.url: absent): the redeliveries do not re-stamp the send
// time, so the bound holds. Every unit is back on sale, nothing leaked.
func TestQueueDurableReplicaNeverReturns(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{m.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 1000)
	cfg.Redis.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: redistest.TimeoutScale * 200 * time.Millisecond, OnTimeout: config.DurableRefuse}
	a := &cfg.Activities[0]
	// The least pending_timeout validation allows with upstream.timeout 2s.
	a.PendingTimeout = config.MinPendingTimeout(cfg.Upstream)
	addr, st := startDurableProxy(t, cfg)

	queued := queuedWithReplica(t, addr, "n1", "n2", "n3")
	r.Pause(t)
	wm := metrics.New()
	q := reservation.NewQueue(st, wm, zap.NewNop(), reservation.QueueOptions{Consumer: "w-" + t.Name()})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	claimedBy := time.Now()
	eventually(t, 10*time.Second, "every queued reservation claimed by a worker", func() bool {
		claimedBy = time.Now()
		return noneQueued(t, st, a, queued)
	})

	rc, _ := newReconciler(st)
	deadline := claimedBy.Add(a.PendingTimeout + 15*time.Second)
	for {
		if _, err := rc.Run(tctx(t), []*config.Activity{a}, true, time.Now()); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		left := 0
		for _, tok := range queued {
			pt, _ := store.ParseToken(tok)
			res, _, err := st.Lookup(tctx(t), pt, a.Shards)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case res.State == store.StateReleased && res.Reason == "verify_absent":
			case res.State == store.StatePending:
				left++
			default:
				t.Fatalf("%s with the replica gone: %+v; want pending until the reconciler releases it (verify_absent)", tok, res)
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reservation(s) still pending %s after their claim (pending_timeout %s): the bound does not hold",
				left, time.Since(claimedBy).Round(time.Millisecond), a.PendingTimeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := counter(wm.DurableWinners, "queue", "deferred"); n <= float64(len(queued)) {
		t.Fatalf("durable_winners{queue,deferred} = %v: the entries did not come back while the replica was gone", n)
	}
	if n := sh.sends(); n != 0 {
		t.Fatalf("the shop got %d requests with the replica gone", n)
	}
	if s := status(t, st, a); !s.OK || s.Remaining != 10 || s.Pending != 0 || s.Confirmed != 0 {
		t.Fatalf("status after the reconciler: %+v", s)
	}
	eventually(t, 15*time.Second, "the stream drained (released entries acknowledged)", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, a.SKUs[0].ID, a.Shards)
		return err == nil && n == 0
	})
}

// TestQueueDurableDeferralsSpareTheWorkers (decisions §56): with the
// replica stopped and a backlog deferred, the workers do not spend their
// time in WAITs that fail: after a failed wait on a shard the others of
// that shard are deferred without one (and not handed out) until one
// worker's probe is due, about one a second per shard. Otherwise every
// deferred entry took a WAIT of `timeout` a second, and on a cluster the
// backlog of one node whose replica is away kept the workers from every
// other node's entries. Once the replica is back, all are sent.
func TestQueueDurableDeferralsSpareTheWorkers(t *testing.T) {
	const workers, buyers = 4, 24
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{m.Addr}, sh.srv.URL, config.ModeQueue, 30, workers, 1000)
	cfg.Redis.DurableWinners = config.DurableWinners{Replicas: 1, Timeout: redistest.TimeoutScale * 200 * time.Millisecond, OnTimeout: config.DurableRefuse}
	a := &cfg.Activities[0]
	addr, st := startDurableProxy(t, cfg)
	var users []string
	for i := 0; i < buyers; i++ {
		users = append(users, "h"+strconv.Itoa(i))
	}
	queued := queuedWithReplica(t, addr, users...)
	r.Pause(t)
	wm := metrics.New()
	q := reservation.NewQueue(st, wm, zap.NewNop(), reservation.QueueOptions{Consumer: "w-" + t.Name()})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 10*time.Second, "every queued reservation claimed by a worker", func() bool {
		return noneQueued(t, st, a, queued)
	})
	waits := func() int {
		v := m.Info("commandstats", "cmdstat_wait")
		n, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(v, ",")[0], "calls="))
		return n
	}
	const window = 3 * time.Second
	w0, d0 := waits(), counter(wm.DurableWinners, "queue", "deferred")
	time.Sleep(window)
	w, d := waits()-w0, counter(wm.DurableWinners, "queue", "deferred")-d0
	t.Logf("in %s with the replica stopped: %d WAITs, %v deferrals", window, w, d)
	// One probe per shard when its back-off (at most 1 s) ends. Without
	// the gate: 48 in 3 s here, the 4 workers in WAITs most of the time.
	if limit := int(window/time.Second+1) * a.Shards; w > limit {
		t.Fatalf("%d WAITs in %s with %d shards, %d workers and %d deferred entries: want at most %d", w, window, a.Shards, workers, buyers, limit)
	}
	if n := sh.sends(); n != 0 {
		t.Fatalf("the shop got %d requests with the replica stopped", n)
	}
	r.Resume(t)
	eventually(t, 15*time.Second, "the deferred buyers confirmed once the replica is back", allConfirmed(addr, queued))
	if n, o := sh.sends(), sh.orderCount(); n != buyers || o != buyers {
		t.Fatalf("the shop got %d requests and holds %d orders; want %d each", n, o, buyers)
	}
}
