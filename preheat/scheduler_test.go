package preheat

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// clock is a settable clock shared by the schedulers of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// testConfig is a parsed (defaulted) config with one activity "pact" of
// 10 units over 4 shards.
func testConfig(t *testing.T, addr string, start, end time.Time, preheatAt string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`upstream: { url: "http://127.0.0.1:1" }
redis: { addrs: [%q], timeout: %s }
activities:
  - id: pact
    start: %s
    end: %s
    skus: [{ id: sku1, stock: 10 }]
    shards: 4
`, addr, redistest.TimeoutScale*time.Second, start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
	if preheatAt != "" {
		y += "    preheat_at: " + preheatAt + "\n"
	}
	cfg, err := config.Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func openStore(t *testing.T, cfg *config.Config) *store.Store {
	t.Helper()
	rc := cfg.Redis
	rc.ClientCache = false
	st, err := store.OpenNow(rc, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// instance is one serve instance's scheduler, with its own connection.
func instance(t *testing.T, cfg *config.Config, c *clock, name string) *Scheduler {
	t.Helper()
	return New(openStore(t, cfg), func() *config.Config { return cfg }, zap.NewNop(), Options{Now: c.Now, Holder: name})
}

func count(ss []*Scheduler, outcome string) int {
	n := 0
	for _, s := range ss {
		var m dto.Metric
		if err := s.Runs().WithLabelValues("pact", outcome).Write(&m); err != nil {
			panic(err)
		}
		n += int(m.GetCounter().GetValue())
	}
	return n
}

func record(t *testing.T, st *store.Store) store.PreheatRecord {
	t.Helper()
	r, err := st.PreheatRecord(context.Background(), "pact")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Several instances reach the moment together: the stock is loaded
// exactly once, not before the moment, and buys at start succeed.
func TestScheduledPreheatOnceAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now()
	start := t0.Add(10 * time.Minute)
	cfg := testConfig(t, srv.Addr, start, t0.Add(time.Hour), "-5m")
	c := &clock{t: t0}
	var ss []*Scheduler
	for i := 0; i < 4; i++ {
		ss = append(ss, instance(t, cfg, c, fmt.Sprintf("inst%d", i)))
	}
	check := openStore(t, cfg)
	ctx := context.Background()

	// Before the moment nothing happens, and each pass sleeps until it.
	for _, s := range ss {
		if w := s.pass(ctx); w <= 0 || w > maxWait {
			t.Fatalf("sleep before the moment: %s", w)
		}
	}
	c.Set(start.Add(-5*time.Minute - time.Millisecond))
	for _, s := range ss {
		s.pass(ctx)
	}
	if r := record(t, check); r.Ready {
		t.Fatal("preheated before preheat_at")
	}

	// At the moment every instance tries at once, a few rounds.
	c.Set(start.Add(-5 * time.Minute))
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for _, s := range ss {
			wg.Add(1)
			go func(s *Scheduler) { defer wg.Done(); <-gate; s.pass(ctx) }(s)
		}
		close(gate)
		wg.Wait()
		c.Set(c.Now().Add(leasePoll))
	}
	if n := count(ss, "created"); n != 1 {
		t.Fatalf("created %d times, want exactly once", n)
	}
	if n := count(ss, "unchanged") + count(ss, "overwritten") + count(ss, OutcomeError); n != 0 {
		t.Fatalf("%d other preheat outcomes", n)
	}
	r := record(t, check)
	if !r.Ready || r.ScheduledBy == "" || r.At.IsZero() {
		t.Fatalf("record after the scheduled preheat: %+v", r)
	}
	// Through start every instance only watches.
	c.Set(start)
	for _, s := range ss {
		s.pass(ctx)
		if st := s.state["pact"]; !st.done {
			t.Fatalf("%s: not done at start: %+v", s.holder, st)
		}
	}
	if n := count(ss, "created"); n != 1 {
		t.Fatalf("created %d times after start", n)
	}
	// Buys at start succeed, and the stock adds up.
	a := &cfg.Activities[0]
	for i := 0; i < 12; i++ {
		res, err := check.Reserve(ctx, store.ReserveRequest{Activity: "pact", SKU: "sku1", User: fmt.Sprintf("u%d", i), Qty: 1,
			Limit: 1, Shards: 4, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)})
		want := lua.OK
		if i >= 10 {
			want = lua.Empty
		}
		if err != nil || res.Code != want {
			t.Fatalf("buy %d: %v %v (want %v)", i, res.Code, err, want)
		}
	}
	stt, err := check.Status(ctx, a)
	if err != nil || !stt.OK() || stt.SKUs[0].Pending != 10 || stt.SKUs[0].Remaining != 0 {
		t.Fatalf("status: %+v %v", stt, err)
	}
}

// The same with the schedulers' own loops on the real clock: two
// instances, the moment a few hundred ms ahead.
func TestScheduledPreheatRun(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	cfg := testConfig(t, srv.Addr, now.Add(1300*time.Millisecond), now.Add(time.Hour), "-1s")
	var ss []*Scheduler
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		s := New(openStore(t, cfg), func() *config.Config { return cfg }, zap.NewNop(), Options{Now: time.Now, Holder: fmt.Sprintf("run%d", i)})
		ss = append(ss, s)
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	check := openStore(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for !record(t, check).Ready {
		if time.Now().After(deadline) {
			t.Fatal("never preheated")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range ss {
		s.Kick() // a reload: must not preheat again
	}
	time.Sleep(300 * time.Millisecond)
	if n := count(ss, "created"); n != 1 || count(ss, OutcomeError) != 0 {
		t.Fatalf("created %d times (errors %d), want exactly once", n, count(ss, OutcomeError))
	}
}

// serve started after the moment (even after start) preheats at once.
func TestScheduledPreheatLate(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	for _, tt := range []struct {
		name  string
		start time.Time
	}{{"before start", now.Add(time.Minute)}, {"running", now.Add(-time.Minute)}} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, srv.Addr, tt.start, now.Add(time.Hour), "-5m")
			c := &clock{t: now}
			s := instance(t, cfg, c, "late")
			s.pass(context.Background())
			if n := count([]*Scheduler{s}, "created"); n != 1 || !record(t, openStore(t, cfg)).Ready {
				t.Fatalf("created %d", n)
			}
		})
	}
}

// A Redis error at the moment is retried with backoff until it works.
func TestScheduledPreheatRetries(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	cfg := testConfig(t, srv.Addr, now.Add(time.Minute), now.Add(time.Hour), "-5m")
	c := &clock{t: now}
	s := instance(t, cfg, c, "retry")
	srv.Kill()
	ctx := context.Background()
	s.pass(ctx)
	if n := count([]*Scheduler{s}, OutcomeError); n != 1 {
		t.Fatalf("errors %d, want 1", n)
	}
	// Still down: the next try waits out a growing backoff.
	c.Set(now.Add(minBackoff))
	s.pass(ctx)
	if st := s.state["pact"]; st.backoff != 2*minBackoff {
		t.Fatalf("backoff %s", st.backoff)
	}
	srv.Restart(t)
	// Not before the backoff is over...
	c.Set(now.Add(minBackoff + time.Millisecond))
	s.pass(ctx)
	if n := count([]*Scheduler{s}, "created"); n != 0 {
		t.Fatal("retried before the backoff")
	}
	// ...then at once, as many times as Redis needs to come back.
	deadline := time.Now().Add(10 * time.Second)
	for count([]*Scheduler{s}, "created") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("never preheated after Redis came back (errors %d)", count([]*Scheduler{s}, OutcomeError))
		}
		c.Set(c.Now().Add(maxBackoff))
		s.pass(ctx)
		time.Sleep(20 * time.Millisecond)
	}
	if !record(t, openStore(t, cfg)).Ready {
		t.Fatal("not ready")
	}
}

// While another instance holds the lease, this one waits; once it is
// free and the stock still not loaded, this one loads it.
func TestScheduledPreheatLeaseHeld(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	cfg := testConfig(t, srv.Addr, now.Add(time.Minute), now.Add(time.Hour), "-5m")
	c := &clock{t: now}
	s := instance(t, cfg, c, "mine")
	other := openStore(t, cfg)
	ctx := context.Background()
	if held, err := other.TryLease(ctx, LeaseName("pact"), "other", time.Minute); err != nil || !held {
		t.Fatalf("lease: %v %v", held, err)
	}
	s.pass(ctx)
	if record(t, other).Ready || count([]*Scheduler{s}, "created") != 0 {
		t.Fatal("preheated under another instance's lease")
	}
	if err := other.ReleaseLease(ctx, LeaseName("pact"), "other"); err != nil {
		t.Fatal(err)
	}
	c.Set(now.Add(leasePoll))
	s.pass(ctx)
	if n := count([]*Scheduler{s}, "created"); n != 1 {
		t.Fatalf("created %d", n)
	}
}

// Stock preheated by hand is left alone; stock that vanishes before start
// is loaded again (nothing sold yet); stock that vanishes after start is
// not (it would sell again), and that is counted and logged.
func TestScheduledPreheatByHandAndLost(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	start := now.Add(time.Minute)
	cfg := testConfig(t, srv.Addr, start, now.Add(time.Hour), "-5m")
	a := &cfg.Activities[0]
	check := openStore(t, cfg)
	ctx := context.Background()
	if _, err := check.Preheat(ctx, a, false, now); err != nil {
		t.Fatal(err)
	}
	c := &clock{t: now}
	s := instance(t, cfg, c, "watch")
	ss := []*Scheduler{s}
	s.pass(ctx)
	if count(ss, "created") != 0 || record(t, check).ScheduledBy != "" {
		t.Fatal("re-preheated stock preheated by hand")
	}
	// Redis loses everything before start: loaded again.
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	c.Set(now.Add(watchEvery))
	s.pass(ctx)
	if count(ss, "created") != 1 || !record(t, check).Ready {
		t.Fatal("stock lost before start not loaded again")
	}
	// And after start: not loaded again.
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	c.Set(start)
	s.pass(ctx)
	if count(ss, "created") != 1 || count(ss, OutcomeLost) != 1 || record(t, check).Ready {
		t.Fatalf("after start: created %d lost %d", count(ss, "created"), count(ss, OutcomeLost))
	}
	c.Set(start.Add(time.Minute))
	s.pass(ctx)
	if count(ss, OutcomeLost) != 1 {
		t.Fatal("lost counted twice")
	}
}

// An activity that is over, or has no preheat_at, is never preheated.
func TestScheduledPreheatSkips(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	for _, cfg := range []*config.Config{
		testConfig(t, srv.Addr, now.Add(-2*time.Hour), now.Add(-time.Hour), "-5m"),
		testConfig(t, srv.Addr, now.Add(-time.Minute), now.Add(time.Hour), ""),
	} {
		s := instance(t, cfg, &clock{t: now}, "skip")
		s.pass(context.Background())
		if record(t, openStore(t, cfg)).Ready || len(s.state) != 0 {
			t.Fatalf("preheated %+v", cfg.Activities[0])
		}
	}
}

// Last week's sale of the same id sold its stock and ended; its keys live
// on for key_ttl_after_end. This week's file (same id, SKU and stock) has
// preheat_at: the scheduler took the old meta's ready=1 as "already
// preheated", and the new sale would open on the old, sold-out stock with
// the old buyers at their limit. It now asks the preheat, which refuses
// (what to do in the error), and never counts the stock as loaded.
func TestScheduledPreheatNotFooledByAnEarlierSaleOfTheID(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now()
	old := testConfig(t, srv.Addr, now.Add(-2*time.Hour), now.Add(-time.Hour), "")
	check := openStore(t, old)
	ctx := context.Background()
	oldAct := &old.Activities[0]
	if _, err := check.Preheat(ctx, oldAct, false, now.Add(-3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	r, err := check.Reserve(ctx, store.ReserveRequest{Activity: "pact", SKU: "sku1", User: "u1", Qty: 1, Limit: 1,
		Shards: oldAct.Shards, NowMs: now.Add(-90 * time.Minute).UnixMilli(), ExpireAt: store.ExpireAt(oldAct)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	if c, err := check.Confirm(ctx, r.Token, oldAct.Shards, "O-1"); err != nil || c != lua.OK {
		t.Fatalf("confirm: %v %v", c, err)
	}

	next := testConfig(t, srv.Addr, now.Add(time.Minute), now.Add(time.Hour), "-5m")
	if !record(t, check).ForEarlierSale(&next.Activities[0]) {
		t.Fatalf("record %+v not seen as an earlier sale's", record(t, check))
	}
	c := &clock{t: now}
	s := instance(t, next, c, "week2")
	ss := []*Scheduler{s}
	s.pass(ctx)
	if n := count(ss, OutcomeError); n != 1 || count(ss, "unchanged") != 0 || count(ss, "created") != 0 {
		t.Fatalf("errors %d unchanged %d created %d: the earlier sale's stock was taken as this sale's", n, count(ss, "unchanged"), count(ss, "created"))
	}
	st, err := check.Status(ctx, &next.Activities[0])
	if err != nil {
		t.Fatal(err)
	}
	if k := st.SKUs[0]; k.Confirmed != 1 || k.Remaining != 9 {
		t.Errorf("the earlier sale's stock was touched: %+v", k)
	}
}
