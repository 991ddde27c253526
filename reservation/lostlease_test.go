package reservation_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// A repairing pass that loses Redis mid-pass cannot always give its lease
// back: its let-go may reach no master before it gives up, or reach a
// stopped master that answers it only once its replica has been promoted
// (a zombie, whose writes its resync then drops). Either way the promoted
// replica keeps the lease the pass took, replicated before the stall, and
// nobody holds it (red team chaos seed 325: a SIGSTOP failover 10 ms after
// an operator's `reconcile --repair` took the lease; every reconcile, the
// background passes and the operator's, was refused "another reconciler
// holds the lease" for the rest of the sale, the 2-minute lease outliving
// the CLI's 30 s wait). The lease is left here as that pass leaves it; the
// CLI's next run, with its default --lease-wait, must get the lease and
// repair, once it has expired: its TTL is shorter than that wait.
func TestCLIOutwaitsALeaseLostWithItsPass(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease (20 s)")
	}
	a := newActivity("lostlease", 1, 1)
	st, _ := setup(t, a)
	lost, err := st.AcquireLease(tctx(t), reservation.LeaseName, "gone/1/1", reservation.LeaseTTL())
	if err != nil || !lost.Held {
		t.Fatalf("the lost pass's lease: %+v %v", lost, err)
	}
	rec, _ := newReconciler(st)
	ctx, cancel := context.WithTimeout(context.Background(), 2*reservation.DefaultLeaseWait)
	defer cancel()
	rep, err := rec.WithLeaseWait(reservation.DefaultLeaseWait).Run(ctx, []*config.Activity{a}, true, time.Now())
	if err != nil {
		t.Fatalf("reconcile --repair after a pass that could not let its lease go: %v (lease TTL %v, CLI wait %v)",
			err, reservation.LeaseTTL(), reservation.DefaultLeaseWait)
	}
	if rep.Fence <= lost.Token {
		t.Errorf("fence %d, want above the lost pass's %d", rep.Fence, lost.Token)
	}
}

// slowVerify answers 404 for every token after wait, calling during (in
// the handler, once) while the first call waits.
func slowVerify(t *testing.T, wait time.Duration, during func()) string {
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() {
			time.Sleep(wait / 2)
			during()
			time.Sleep(wait / 2)
		})
		http.Error(w, `{"code":"NOT_FOUND"}`, http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/internal/orders?token={token}"
}

// One step of a pass longer than the lease (verify taking its 5 s timeout,
// three times for one reservation while trust is checked, against a TTL
// renewed only between steps) lost it: the next activity's renewal found it
// expired and the pass stopped "lease lost", every pass, before that
// activity was settled; and while it waited, another reconciler could take
// the lease. A pass now renews its lease in the background. Scaled down:
// lease 1 s, one verify call of 1.6 s.
func TestPassKeepsItsLeaseThroughAStepLongerThanIt(t *testing.T) {
	defer reservation.SetLeaseTTL(time.Second)()
	slow := newActivity("lslow", 1, 1)
	st, _ := setup(t, slow)
	var other store.Lease
	var otherErr error
	slow.Verify.URL = slowVerify(t, 1600*time.Millisecond, func() {
		other, otherErr = st.AcquireLease(context.Background(), reservation.LeaseName, "other/1/1", time.Second)
	})
	next := newActivity("lnext", 1, 1)
	next.Verify.URL = newShop(t).srv.URL + "/internal/orders?token={token}"
	if _, err := st.Preheat(tctx(t), next, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	tSlow, tNext := reserve(t, st, slow, "u1", old, false), reserve(t, st, next, "u2", old, false)

	rec, _ := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{slow, next}, true, time.Now())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	if otherErr != nil || other.Held {
		t.Errorf("another reconciler during the pass's 1.6 s step (lease 1 s): %+v %v, want refused", other, otherErr)
	}
	for _, tok := range []store.Token{tSlow, tNext} {
		if res, ok, err := st.Lookup(tctx(t), tok, 1); err != nil || !ok || res.State != store.StateReleased {
			t.Errorf("%s (verify: 404): %+v %v %v, want released (fence %d)", tok, res, ok, err, rep.Fence)
		}
	}
}

// A pass whose lease another reconciler takes (it expired while this one
// stalled, say) stops with ErrLeaseLost at the next renewal, even in the
// middle of a step, and settles nothing more.
func TestPassStopsWhenItsLeaseIsTaken(t *testing.T) {
	defer reservation.SetLeaseTTL(time.Second)()
	slow := newActivity("tslow", 1, 1)
	st, srv := setup(t, slow)
	slow.Verify.URL = slowVerify(t, 4*time.Second, func() {
		if _, err := srv.Do("DEL", "seckill:{lease}:"+reservation.LeaseName); err != nil {
			t.Error(err)
		}
		if l, err := st.AcquireLease(context.Background(), reservation.LeaseName, "other/1/1", time.Minute); err != nil || !l.Held {
			t.Errorf("taking the lease over: %+v %v", l, err)
		}
	})
	next := newActivity("tnext", 1, 1)
	next.Verify.URL = newShop(t).srv.URL + "/internal/orders?token={token}"
	if _, err := st.Preheat(tctx(t), next, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	reserve(t, st, slow, "u1", old, false)
	tNext := reserve(t, st, next, "u2", old, false)

	rec, _ := newReconciler(st)
	_, err := rec.Run(tctx(t), []*config.Activity{slow, next}, true, time.Now())
	if !errors.Is(err, reservation.ErrLeaseLost) {
		t.Fatalf("pass whose lease was taken: %v, want %v", err, reservation.ErrLeaseLost)
	}
	if res, ok, err := st.Lookup(tctx(t), tNext, 1); err != nil || !ok || res.State != store.StatePending {
		t.Errorf("the next activity's reservation after the lease was lost: %+v %v %v, want still pending", res, ok, err)
	}
}
