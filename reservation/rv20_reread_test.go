package reservation_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestQueueReReadsOwnEntriesDeliveredLate: after Redis trouble a worker
// reads back the entries delivered to it and left unhandled. A read whose
// answer never came may run in Redis after that read-back, though sent
// before it: rueidis pipelines over more than one connection, and a Redis
// that stalled (CLIENT PAUSE ALL, SIGSTOP) runs each connection's backlog
// in turn on waking. MONITOR in red team rv20's failing runs: the re-reads
// "XREADGROUP … 0" that went over one connection ran (and found nothing)
// before the "XREADGROUP … >" held on the other, which then delivered 4
// entries to the consumer; nobody read them again, and they waited for a
// takeover after ClaimIdle (36 s with ClaimIdle 30 s; 6 of ~270 runs).
//
// Here the late XREADGROUP is played by the test, at the exact moment:
// right after the worker's first complete read-back of a shard that still
// has new entries. Every buyer must be confirmed well within ClaimIdle.
func TestQueueReReadsOwnEntriesDeliveredLate(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 12, 4, 1000)
	addr, st := startProxy(t, cfg)
	codes, tokens := spike(addr, 12, "late-")
	if codes["QUEUED"] != 12 || len(tokens) != 12 {
		t.Fatalf("answers: %v", codes)
	}

	var mu sync.Mutex
	delivered, lateShard := 0, -1
	restore := reservation.SetQueueTrouble(func(consumer string, shard int, complete bool) {
		mu.Lock()
		defer mu.Unlock()
		if delivered > 0 || !complete {
			return
		}
		// The lost XREADGROUP runs now, after the read-back that was sent
		// later: it delivers the shard's new entries to this consumer.
		key := st.SKUKeys("qact", "sku1", 4).Shards[shard].Log
		if _, err := srv.Do("XREADGROUP", "GROUP", store.QueueGroup, consumer, "COUNT", "100", "STREAMS", key, ">"); err != nil {
			t.Errorf("XREADGROUP: %v", err)
			return
		}
		out, err := srv.Do("XPENDING", key, store.QueueGroup)
		if err != nil {
			t.Errorf("XPENDING: %v", err)
			return
		}
		n, _ := strconv.Atoi(strings.SplitN(out, "\n", 2)[0])
		delivered, lateShard = n, shard
	})
	defer restore()

	const claimIdle = time.Minute
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "w", ClaimIdle: claimIdle})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 10*time.Second, "every QUEUED buyer confirmed (well before ClaimIdle: none waits for a takeover)", allConfirmed(addr, tokens))
	mu.Lock()
	defer mu.Unlock()
	if delivered == 0 {
		t.Fatal("the late XREADGROUP delivered nothing: the test reproduced nothing")
	}
	t.Logf("%d entries of shard %d delivered to the worker just after its read-back, all sent", delivered, lateShard)
	if n := sh.orderCount(); n != 12 {
		t.Fatalf("shop orders %d, want 12", n)
	}
}
