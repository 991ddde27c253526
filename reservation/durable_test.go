package reservation_test

import (
	"context"
	"net"
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
// replica ran but claimed by a worker while it is stopped is released by
// the worker, not sent; once the replica runs again, queued buyers get
// their orders.
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
	eventually(t, 10*time.Second, "the workers release what the replicas did not acknowledge", func() bool {
		for _, tok := range queued {
			if reservationState(addr, tok) != store.StateReleased {
				return false
			}
		}
		return true
	})
	if n := sh.orderCount(); n != 0 {
		t.Fatalf("the shop holds %d orders sent while the replica was stopped", n)
	}
	for _, tok := range queued {
		pt, _ := store.ParseToken(tok)
		res, _, err := st.Lookup(tctx(t), pt, a.Shards)
		if err != nil || res.Reason != "not_durable" {
			t.Fatalf("%s: %+v, %v; want released as not_durable", tok, res, err)
		}
	}
	if n := counter(wm.DurableWinners, "queue", "refused"); n != float64(len(queued)) {
		t.Fatalf("durable_winners{queue,refused} = %v, want %d", n, len(queued))
	}
	if s := status(t, st, a); !s.OK || s.Remaining != 10 || s.Pending != 0 {
		t.Fatalf("status after the workers' refusals: %+v", s)
	}

	// 3. Replica back: queued buyers get their orders.
	r.Resume(t)
	queued = queued[:0]
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
	if n := sh.orderCount(); n != len(queued) {
		t.Fatalf("the shop holds %d orders, want %d", n, len(queued))
	}
}

func counter(vec *prometheus.CounterVec, labels ...string) float64 {
	var m dto.Metric
	if err := vec.WithLabelValues(labels...).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
