package reservation_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// TestLeaseOfAPassThatFailedToAcquireIt: a repairing pass whose lease call
// got no reply in a Redis blip returned the error, and the call ran once
// Redis woke: the lease was taken for a pass that had already given up,
// and every other reconciler (`reconcile --repair` from the CLI, another
// instance's background pass) was refused "another reconciler holds the
// lease" for its TTL, two minutes (red team chaos, TestChaos seeds 2 and
// 3: the repair after the chaos was refused). A pass that fails to take
// the lease now gives up what its call may have taken.
func TestLeaseOfAPassThatFailedToAcquireIt(t *testing.T) {
	a := newActivity("lease", 10, 2)
	st, srv := setup(t, a)
	if _, err := srv.Do("CLIENT", "PAUSE", "1500", "WRITE"); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	first, _ := newReconciler(st)
	if _, err := first.Run(tctx(t), []*config.Activity{a}, true, time.Now()); err == nil {
		t.Fatalf("a pass during the pause succeeded")
	}
	second, _ := newReconciler(st)
	if _, err := second.Run(tctx(t), []*config.Activity{a}, true, time.Now()); err != nil {
		if errors.Is(err, reservation.ErrLeaseHeld) {
			t.Fatalf("after the pause: %v (the failed pass's late lease call took it)", err)
		}
		t.Fatalf("after the pause: %v", err)
	}
}
