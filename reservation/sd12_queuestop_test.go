package reservation_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Stop with the shop's in-flight budget full (upstream.max_inflight 1):
// the worker whose send is in flight finishes it, and the workers waiting
// for a slot claim nothing more — they waited on the kill context, not the
// stop, and once they got the slot claimed and sent, one at a time, so a
// stopping serve sent workers × shop latency after SIGTERM (red-team
// finding, cmd/seckill-proxy TestRC12SigtermWaitsForQueueWorkersBeyondShutdownTimeout).
// Nothing is lost: the entries they held stay in the streams, queued, and
// another consumer's takeover sends every one; stock adds up throughout.
func TestSD12QueueStopLeavesUnclaimedEntriesForTakeover(t *testing.T) {
	const buyers, stock = 8, 20
	srv := redistest.Start(t)
	sh := newShop(t)
	sh.slow = func(string) time.Duration { return 700 * time.Millisecond }
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, stock, buyers, 1000)
	cfg.Upstream.MaxInflight = 1
	addr, st := startProxy(t, cfg)
	codes, tokens := spike(addr, buyers, "q-")
	if codes["QUEUED"] != buyers || len(tokens) != buyers {
		t.Fatalf("answers: %v", codes)
	}
	requests := func() int { sh.mu.Lock(); defer sh.mu.Unlock(); return sh.requests }

	// Worker A: every entry read, one sent, the others waiting for the slot
	// (ClaimIdle long: they would wait up to half of it).
	m := metrics.New()
	fleet := inflight.NewFleet(st, m.Inflight, m.InflightLimit, zap.NewNop(), "")
	fleet.Apply(cfg)
	t.Cleanup(fleet.Close)
	a := reservation.NewQueue(st, m, zap.NewNop(), reservation.QueueOptions{Consumer: "A", ClaimIdle: time.Minute, Inflight: fleet})
	a.Start(cfg)
	eventually(t, 10*time.Second, "A's first send at the shop", func() bool { return requests() >= 1 })
	a.Stop()
	if n := requests(); n != 1 {
		t.Errorf("the shop got %d requests from a stopped worker set, want only the 1 in flight at Stop (max_inflight 1)", n)
	}
	s := status(t, st, &cfg.Activities[0])
	left, err := st.QueueLength(tctx(t), "qact", "sku1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if !s.OK || s.Remaining != stock-buyers || s.Confirmed != int64(requests()) || s.Pending != buyers-s.Confirmed || left != s.Pending {
		t.Fatalf("after Stop: %+v, %d stream entries; want the sent one confirmed, every other queued with its entry in the stream", s, left)
	}

	// Worker B takes A's unclaimed entries over and sends every one, once.
	sh.mu.Lock()
	sh.slow = nil
	sh.mu.Unlock()
	b := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "B", ClaimIdle: time.Second})
	b.Start(cfg)
	t.Cleanup(b.Stop)
	eventually(t, 30*time.Second, "every buyer confirmed after the takeover", allConfirmed(addr, tokens))
	if n, o := requests(), sh.orderCount(); n != buyers || o != buyers {
		t.Errorf("shop: %d orders from %d requests, want %d from %d", o, n, buyers, buyers)
	}
	s = status(t, st, &cfg.Activities[0])
	if !s.OK || s.Confirmed != buyers || s.Pending != 0 || s.Remaining != stock-buyers {
		t.Errorf("status after the takeover: %+v", s)
	}
}

// Shutdown (serve's graceful stop) bounds the wait for a send in flight:
// when its context ends first the send is cut as by Kill, Shutdown says
// so, and nothing is lost — the reservation stays pending, its entry
// unacknowledged, and the takeover verifies and confirms it.
func TestSD12QueueShutdownCutsSendAtDeadline(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	sh.slow = func(string) time.Duration { return 3 * time.Second } // the order taken, the answer late
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 5, 1, 1000)
	addr, st := startProxy(t, cfg)
	if a := buy(addr, "u1"); a.Code != "QUEUED" {
		t.Fatalf("buy: %+v", a)
	}
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "A", ClaimIdle: time.Minute})
	q.Start(cfg)
	eventually(t, 10*time.Second, "the send at the shop", func() bool { return sh.orderCount() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := q.Shutdown(ctx); err == nil {
		t.Fatalf("Shutdown returned nil with the shop still holding the send")
	}
	s := status(t, st, &cfg.Activities[0])
	if !s.OK || s.Pending != 1 || s.Confirmed != 0 {
		t.Fatalf("after a cut Shutdown: %+v, want the cut send pending", s)
	}
	sh.mu.Lock()
	sh.slow = nil
	sh.mu.Unlock()
	b := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "B", ClaimIdle: time.Second})
	b.Start(cfg)
	t.Cleanup(b.Stop)
	eventually(t, 30*time.Second, "the cut send confirmed by the takeover", func() bool {
		s := status(t, st, &cfg.Activities[0])
		return s.OK && s.Confirmed == 1 && s.Pending == 0
	})
	if n := sh.orderCount(); n != 1 {
		t.Errorf("shop orders %d, want 1", n)
	}
}
