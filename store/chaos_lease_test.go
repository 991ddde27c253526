package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestReleaseLeaseOutlastsABlip: a reconcile pass that fails in a Redis
// blip gives its lease up on the way out (a 2 s context of its own). The
// release was one call within redis.timeout: in the blip it failed, and the
// lease stayed held for its TTL (2 minutes), so `reconcile --repair` from
// the CLI or another instance was refused ("another reconciler holds the
// lease") long after Redis was back (red team chaos: the final repair of
// seeds 2 and 3). The release is compare-and-delete, safe to repeat: it is
// retried until its caller's context ends.
func TestReleaseLeaseOutlastsABlip(t *testing.T) {
	node := redistest.Start(t)
	s := openStore(t, redisConfig([]string{node.Addr}, false))
	l, err := s.AcquireLease(ctx(t), "reconcile", "a", 2*time.Minute)
	if err != nil || !l.Held {
		t.Fatalf("AcquireLease: %+v %v", l, err)
	}
	if _, err := node.Do("CLIENT", "PAUSE", "600", "WRITE"); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.ReleaseLease(rctx, "reconcile", "a"); err != nil {
		t.Fatalf("ReleaseLease through a 600 ms pause: %v", err)
	}
	l2, err := s.AcquireLease(ctx(t), "reconcile", "b", 2*time.Minute)
	if err != nil || !l2.Held {
		t.Fatalf("another holder after the release: %+v %v (the lease was left held)", l2, err)
	}
}
