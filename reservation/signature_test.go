package reservation_test

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// TestQueueWorkerSignsWhatItSends: a queue worker rebuilds the buy; its v2
// verifies at the shop over the method and request-target the shop got
// (the upstream base path included), with the key id of the signing key.
func TestQueueWorkerSignsWhatItSends(t *testing.T) {
	srv := redistest.Start(t)
	shop := e2e.StartShop(t)
	shop.SetKeys(signing.Keyring{{ID: config.DefaultSigningKeyID, Secret: []byte("s3cret")}})
	cfg := proxyConfig(t, []string{srv.Addr}, shop.URL+"/base", config.ModeQueue, 2, 1, 100)
	addr, st := startProxy(t, cfg)
	if a := buy(addr, "q-user"); a.Code != "QUEUED" {
		t.Fatalf("buy: %+v", a)
	}
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "sig"})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	eventually(t, 10*time.Second, "the worker forwards the buy", func() bool { return len(shop.Buys()) == 1 })
	o := shop.Buys()[0]
	if o.Method != "POST" || o.Target != "/base/api/seckill/qact/sku1/buy" {
		t.Errorf("shop got %s %s", o.Method, o.Target)
	}
	if !o.SigOK || o.SigKey != config.DefaultSigningKeyID || !o.SigV1OK {
		t.Errorf("v2 %v (key %q), v1 ok %v; header %q", o.SigErr, o.SigKey, o.SigV1OK, o.Signature)
	}
}
