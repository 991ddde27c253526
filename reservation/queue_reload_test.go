package reservation_test

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// A reload whose config no longer has a queue-mode activity (dropped once
// its sale is over) still sends the buyers it told QUEUED: the workers
// drain the streams of an activity the last config had.
func TestQueueReloadDrainsDroppedActivity(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 5, 2, 100)
	addr, st := startProxy(t, cfg)
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "R"})
	t.Cleanup(q.Stop)
	q.Start(cfg)
	q.Stop() // the buys below wait in the streams
	codes, tokens := spike(addr, 3, "buyer-")
	if codes["QUEUED"] != 3 || len(tokens) != 3 {
		t.Fatalf("answers: %v", codes)
	}
	next := *cfg
	next.Activities = nil
	q.Start(&next)
	eventually(t, 10*time.Second, "the 3 queued buyers confirmed", allConfirmed(addr, tokens))
	if n := sh.orderCount(); n != 3 {
		t.Errorf("the shop got %d orders, want 3", n)
	}
}

// Draining workers for a sync activity that never queued anything create
// no stream and send nothing.
func TestQueueDrainLeavesSyncActivityAlone(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeSync, 5, 2, 100)
	addr, st := startProxy(t, cfg)
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "S"})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	codes, _ := spike(addr, 2, "buyer-")
	if codes["200"] != 2 { // the shop's own answers
		t.Fatalf("answers: %v", codes)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := sh.orderCount(); n != 2 {
		t.Errorf("the shop got %d orders, want the 2 sync winners", n)
	}
	n, err := st.QueueLength(tctx(t), "qact", "sku1", cfg.Activities[0].Shards)
	if err != nil || n != 0 {
		t.Errorf("queue length %d, %v; want 0", n, err)
	}
}
