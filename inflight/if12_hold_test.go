package inflight_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestIf12UnknownOutcomeHoldsTheSlot: a request that got no answer (the
// proxy's timeout) may still be at the shop: its slot stays taken, for
// this instance and for the fleet, and comes back one SendWithin later
// with no further call. An answered one's slot comes back at once.
func TestIf12UnknownOutcomeHoldsTheSlot(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 1, TTL: 8 * time.Second, SendWithin: 2 * time.Second}
	a := instance(t, srv.Addr, "a", lim).Budget(act)
	b := instance(t, srv.Addr, "b", lim).Budget(act)

	s, res := a.Acquire(context.Background(), 0)
	if res != inflight.Got {
		t.Fatalf("slot: %v", res)
	}
	a.Done(s, time.Millisecond, inflight.Answered)
	s, res = a.Acquire(context.Background(), 0)
	if res != inflight.Got {
		t.Fatalf("slot after an answered request: %v", res)
	}
	a.Done(s, time.Millisecond, inflight.Overloaded) // a quick 503: answered
	s, res = a.Acquire(context.Background(), 0)
	if res != inflight.Got {
		t.Fatalf("slot after a quick overloaded answer: %v", res)
	}
	a.Done(s, lim.SendWithin, inflight.Unknown)
	if n := a.InUse(); n != 1 {
		t.Fatalf("in use after an unknown outcome: %d, want 1 (held)", n)
	}
	if _, res := a.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("same instance, slot held after an unknown outcome: %v, want full", res)
	}
	if _, res := b.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("other instance, slot held after an unknown outcome: %v, want full", res)
	}
	if h := fleetHeld(t, srv); h != 1 {
		t.Fatalf("fleet holds %d, want 1", h)
	}
	// The hold runs out by itself: the slot comes back to the fleet.
	eventually(t, 10*time.Second, "held slot back", func() bool { return a.InUse() == 0 })
	eventually(t, 10*time.Second, "other instance served", func() bool {
		s, res := b.Acquire(context.Background(), 0)
		if res == inflight.Got {
			b.Done(s, time.Millisecond, inflight.Answered)
		}
		return res == inflight.Got
	})
	eventually(t, 5*time.Second, "slots given back", func() bool { return fleetHeld(t, srv) == 0 })
}

// TestIf12HeldSlotWakesAWaiter: a sender waiting for the only slot gets it
// when the hold after a timeout runs out. The send is reported as a queue
// worker reports its timeout: Overloaded, after the whole SendWithin.
func TestIf12HeldSlotWakesAWaiter(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 1, TTL: 4 * time.Second, SendWithin: 500 * time.Millisecond}
	b := instance(t, srv.Addr, "a", lim).Budget(act)
	s, res := b.Acquire(context.Background(), 0)
	if res != inflight.Got {
		t.Fatalf("slot: %v", res)
	}
	b.Done(s, lim.SendWithin, inflight.Overloaded)
	if n := b.InUse(); n != 1 {
		t.Fatalf("in use after a send that lasted the whole timeout: %d, want 1 (held)", n)
	}
	s, res = b.Acquire(context.Background(), 10*time.Second)
	if res != inflight.Got || !s.Waited {
		t.Fatalf("waiter: %v (waited %v), want got after waiting", res, s.Waited)
	}
	b.Done(s, time.Millisecond, inflight.Answered)
	eventually(t, 5*time.Second, "slots given back", func() bool { return fleetHeld(t, srv) == 0 })
}

// TestIf12RetiredBudgetDrainsUnderItsOwnName: max_inflight lifted, then
// set again (two reloads) while two requests of the first budget are
// still at the shop: the new budget counts them, and gets the slots as
// they finish.
func TestIf12RetiredBudgetDrainsUnderItsOwnName(t *testing.T) {
	srv := redistest.Start(t)
	lim := inflight.Limits{Max: 2, TTL: 4 * time.Second, SendWithin: 500 * time.Millisecond}
	f := instance(t, srv.Addr, "one", lim)
	old := f.Budget(act)
	var slots []inflight.Slot
	for i := 0; i < 2; i++ {
		s, res := old.Acquire(context.Background(), 0)
		if res != inflight.Got {
			t.Fatalf("slot %d: %v", i, res)
		}
		slots = append(slots, s)
	}
	f.Set(act, inflight.Limits{})
	f.Set(act, lim)
	cur := f.Budget(act)
	if cur == nil || cur == old {
		t.Fatalf("budget after the bound came back: %p (old %p)", cur, old)
	}
	if _, res := cur.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("new budget with the retired one's two still in flight: %v, want full", res)
	}
	old.Done(slots[0], time.Millisecond, inflight.Answered)
	s1, res := cur.Acquire(context.Background(), 10*time.Second)
	if res != inflight.Got {
		t.Fatalf("slot freed by the retired budget: %v", res)
	}
	if _, res := cur.Acquire(context.Background(), 0); res != inflight.Full {
		t.Fatalf("second slot with one still at the shop: %v, want full", res)
	}
	old.Done(slots[1], time.Millisecond, inflight.Answered)
	s2, res := cur.Acquire(context.Background(), 10*time.Second)
	if res != inflight.Got {
		t.Fatalf("second slot once the retired budget drained: %v", res)
	}
	// The retired budget's last call removed only its own record.
	eventually(t, 5*time.Second, "fleet holds the new budget's two", func() bool { return fleetHeld(t, srv) == 2 })
	cur.Done(s1, time.Millisecond, inflight.Answered)
	cur.Done(s2, time.Millisecond, inflight.Answered)
	eventually(t, 5*time.Second, "slots given back", func() bool { return fleetHeld(t, srv) == 0 })
}

// TestIf12LeaseCoversTheHold: the lease from a config outlives a slot's
// longest use, the request and the hold after it (2 × upstream.timeout),
// with room for renewals to fail.
func TestIf12LeaseCoversTheHold(t *testing.T) {
	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second, config.MaxUpstreamTimeout} {
		u := config.Upstream{Timeout: d, MaxInflight: 4}
		lim := inflight.LimitsOf(&u)
		if margin := lim.TTL - 2*lim.SendWithin; margin < config.InflightLeaseMargin {
			t.Errorf("timeout %v: lease %v outlives two timeouts by %v, want at least %v", d, lim.TTL, margin, config.InflightLeaseMargin)
		}
	}
}
