package store_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestChaos2DurableQueueRefusalIsNeverSent (red team chaos2,
// docs/decisions.md §53): queue mode with durable winners (on_timeout:
// refuse). The buyer's reserve wrote its stream entry before the wait for
// the replicas, so a worker could read and claim it during that wait. If
// the wait then fails and the release of the refused winner cannot reach
// Redis at once (Redis stalled or restarting: it goes to the retrier), the
// buyer hears 503 STORE_UNAVAILABLE — "nothing is held" (SPEC §9) — while
// the worker's claim makes the later release find a reservation that is
// the worker's, and the worker sends it: the buyer told STORE_UNAVAILABLE
// gets an order (TestChaos seed 22, mix durable,restart: a confirmed and
// four pending reservations no client was told). Expected: a refused
// winner's reservation is released, never sent.
func TestChaos2DurableQueueRefusalIsNeverSent(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	s := openStore(t, durableConfig([]string{m.Addr}, false, config.DurableRefuse))
	a := newActivity("act_c2dq", 5, 1, 1)
	a.Mode = config.ModeQueue
	mustPreheat(t, s, a)
	if err := s.EnsureQueueGroup(ctx(t), a.ID, testSKU, a.Shards, 0, store.ExpireAt(a)); err != nil {
		t.Fatalf("queue group: %v", err)
	}
	r.Pause(t) // the buyer's wait for the replica will fail

	q := reserveReq(a, "u1", 1)
	q.Queue = true
	res, err := s.Reserve(ctx(t), q)
	if err != nil || res.Code != lua.OK {
		t.Fatalf("queued reserve = %+v, %v", res, err)
	}
	// A worker reads the stream meanwhile (any time it likes) and claims
	// what it finds, as reservation.Queue's workers do before a send.
	entries, err := s.ReadQueue(ctx(t), a.ID, testSKU, a.Shards, 0, "worker", 10)
	if err != nil {
		t.Fatalf("read queue: %v", err)
	}
	for _, e := range entries {
		tok, err := store.ParseToken(e.Token)
		if err != nil {
			t.Fatalf("entry token %q: %v", e.Token, err)
		}
		if c, err := s.Claim(ctx(t), tok, a.Shards, time.Now().UnixMilli(), q.ExpireAt); err != nil || c != lua.OK {
			t.Fatalf("worker's claim = %v, %v", c, err)
		}
	}
	// Redis stalls while the buyer waits: the wait fails, and so does the
	// release's first try (it is handed to the retrier). The buyer is told
	// STORE_UNAVAILABLE.
	m.Pause(t)
	d, err := s.MakeDurable(ctx(t), q, store.ReserveResult{Token: res.Token})
	m.Resume(t)
	r.Resume(t)
	if d != store.DurableRefused {
		t.Fatalf("MakeDurable with Redis stalled = %v, %v; want refused (the buyer hears STORE_UNAVAILABLE)", d, err)
	}
	eventually(t, 10*time.Second, "the retrier drained", func() bool { return s.Retrier().Len() == 0 })
	got, ok, err := s.Lookup(ctx(t), res.Token, a.Shards)
	if err != nil || !ok {
		t.Fatalf("lookup: %+v, %v, %v", got, ok, err)
	}
	if got.State != store.StateReleased {
		t.Fatalf("a winner refused as not durable (told STORE_UNAVAILABLE) is %s, claimed by a worker that read %d entries during the buyer's wait: it will be sent to the shop", got.State, len(entries))
	}
	wantStatus(t, s, a, 5, 0, 0)
}
