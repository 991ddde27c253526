package reservation_test

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestQueueTakeoverOfABacklog: an instance that died holding a backlog
// (every queued entry delivered to its consumer, none handled) is taken
// over at the pace of the surviving workers, not of the claim timer. A
// reader claimed at most its free workers' worth once per ClaimIdle/4
// (red team qst): with serve's defaults, 1,000 entries of a dead instance
// took a survivor about half an hour. Here 40 entries, one worker,
// ClaimIdle 2 s: one claim per 500 ms took 20 s; claiming again while
// XAUTOCLAIM's cursor says more are idle, a second or two.
func TestQueueTakeoverOfABacklog(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	const n = 40
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, n, 1, 1000)
	addr, st := startProxy(t, cfg)
	codes, tokens := spike(addr, n, "backlog-")
	if codes["QUEUED"] != n || len(tokens) != n {
		t.Fatalf("answers: %v", codes)
	}
	// The dead instance's consumer read every entry and handled none.
	for _, sk := range st.SKUKeys("qact", "sku1", 4).Shards {
		_, _ = srv.Do("XGROUP", "CREATE", sk.Log, store.QueueGroup, "0", "MKSTREAM")
		if _, err := srv.Do("XREADGROUP", "GROUP", store.QueueGroup, "dead", "COUNT", "1000", "STREAMS", sk.Log, ">"); err != nil {
			t.Fatalf("XREADGROUP: %v", err)
		}
	}
	const claimIdle = 2 * time.Second
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "survivor", ClaimIdle: claimIdle})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	// ClaimIdle, then the sends: well under the 20 s of one claim per
	// ClaimIdle/4.
	eventually(t, claimIdle+6*time.Second, "the dead consumer's 40 entries taken over and confirmed", allConfirmed(addr, tokens))
	if got := sh.orderCount(); got != n {
		t.Fatalf("shop orders %d, want %d (each entry sent once)", got, n)
	}
}
