package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// opsStore opens a store of its own on cfg's Redis, as a CLI command on
// another host does.
func opsStore(t *testing.T, cfg *config.Config) *store.Store {
	t.Helper()
	st, err := store.OpenNow(cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func opsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// opsWantInvariant fails unless every SKU of activity id keeps
// initial = remaining + pending + confirmed, reading Redis through a
// store of its own.
func opsWantInvariant(t *testing.T, st *store.Store, a *config.Activity) store.ActivityStatus {
	t.Helper()
	s, err := st.Status(opsCtx(t), a)
	if err != nil {
		t.Fatalf("status %s: %v", a.ID, err)
	}
	for _, k := range s.SKUs {
		if !k.OK || k.Initial != k.Remaining+k.Pending+k.Confirmed {
			t.Errorf("status %s/%s = %+v: invariant broken", a.ID, k.ID, k)
		}
	}
	return s
}

// TestRedTeamOpsPauseDuringFairStartHold: SPEC §2 — pause is a kill switch
// every instance obeys within 1 s. Buys held by fair_start (arrived inside
// the window, before the pause) are let on after the window: by then the
// activity has been paused for well over a second, so each must be
// answered PAUSED and reserve nothing, and the shop must receive no buy.
func TestRedTeamOpsPauseDuringFairStartHold(t *testing.T) {
	t0 := fairT0
	f := startFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "fp", Stock: 10, Start: t0,
		FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond}}})
	f.clock.at(t0, 5*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	f.fire(&wg, "fp", users("fp", 5), func(u string, r e2e.Resp) {
		mu.Lock()
		codes[r.Code]++
		mu.Unlock()
	})
	e2e.Eventually(t, 10*time.Second, "buys held", func() bool { return f.held() == 5 })

	// The operator pauses from another host.
	st := opsStore(t, f.p.Cfg)
	if err := st.SetPaused(opsCtx(t), "fp", true); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, 5*time.Second, "proxy sees the pause", func() bool {
		fl, err := f.p.Store.Flags(context.Background(), "fp")
		return err == nil && fl.Paused
	})
	time.Sleep(1100 * time.Millisecond) // SPEC: obeyed within 1 s

	// The window ends; the held buys are let on.
	f.clock.at(t0, 700*time.Millisecond)
	wg.Wait()
	t.Logf("answers after the pause: %v", codes)
	if codes["WIN"] != 0 || codes["PAUSED"] != 5 {
		t.Errorf("held buys answered %v after the activity was paused >1 s earlier; want 5 PAUSED, no winner", codes)
	}
	if n := len(f.shop.Buys()); n != 0 {
		t.Errorf("shop received %d buys while the activity was paused", n)
	}
	s := opsWantInvariant(t, st, f.p.Activity(t, "fp"))
	if k := s.SKUs[0]; k.Remaining != 10 {
		t.Errorf("paused activity sold %d units: %+v", 10-k.Remaining, k)
	}
}

// TestRedTeamOpsBlockDuringFairStartHold: README (Operations) — blocklists
// are shared by every instance and obeyed within milliseconds; a blocked
// user is answered 403 BLOCKED. A scalper whose buy is already held by
// fair_start when the operator blocks them must not be let on to Redis
// after the window: the held buy is answered BLOCKED and reserves nothing.
func TestRedTeamOpsBlockDuringFairStartHold(t *testing.T) {
	t0 := fairT0
	f := startFair(t, e2e.Options{Activities: []e2e.Activity{{ID: "fb", Stock: 10, Start: t0,
		FairStart: 500 * time.Millisecond, FairStartSpread: 100 * time.Millisecond},
		{ID: "probe", Stock: 10, Start: t0.Add(-time.Minute)}}})
	f.clock.at(t0, 5*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	f.fire(&wg, "fb", []string{"scalper"}, func(u string, r e2e.Resp) {
		mu.Lock()
		codes[r.Code]++
		mu.Unlock()
	})
	e2e.Eventually(t, 10*time.Second, "buy held", func() bool { return f.held() == 1 })

	st := opsStore(t, f.p.Cfg)
	if err := st.BlockAdd(opsCtx(t), "user", []string{"scalper"}, 3*time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A buy of the scalper on another activity (no fair_start) is refused
	// once the proxy has the list: that is how the test knows the block
	// reached it.
	e2e.Eventually(t, 5*time.Second, "block reached the proxy", func() bool {
		return f.buy("probe", "scalper").Code == "BLOCKED"
	})
	f.clock.at(t0, 700*time.Millisecond)
	wg.Wait()
	t.Logf("held buy of a user blocked meanwhile: %v", codes)
	if codes["WIN"] != 0 {
		t.Errorf("held buy of a blocked user won (%v); want BLOCKED", codes)
	}
	for _, r := range f.shop.Requests() {
		// (The probe on the other activity may have won before the block
		// reached the proxy.)
		if r.Header.Get("X-Seckill-User") == "scalper" && r.Header.Get("X-Seckill-Activity") == "fb" {
			t.Error("shop received the held buy of a blocked user")
		}
	}
	s := opsWantInvariant(t, st, f.p.Activity(t, "fb"))
	if k := s.SKUs[0]; k.Remaining != 10 {
		t.Errorf("blocked user took %d units: %+v", 10-k.Remaining, k)
	}
}

// TestRedTeamOpsConcurrentPreheatsLoseNoUnit: a scheduled preheat racing a
// manual `preheat` on another host, both plain (no --force) on a fresh
// activity: each saw "not preheated" and loaded the stock shard by shard,
// each with its own stock generation (its clock), so about 1 try in 5 left
// shards of mixed generations; units a buyer then took from a shard of one
// generation for a home of the other were never deposited (5–14 of 16
// sold, status still "ok"). Preheats of one activity now take a lease:
// after every race all shards carry the meta's generation, the second
// preheat finds the stock as configured, and buyers homed on one shard
// (their home empties, then they take units from the others) buy every
// unit, with the reconciler's move settling in between.
func TestRedTeamOpsConcurrentPreheatsLoseNoUnit(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	const tries, shards, stock = 20, 16, 16
	var acts []e2e.Activity
	for i := 0; i < tries; i++ {
		acts = append(acts, e2e.Activity{ID: fmt.Sprintf("race%d", i), Stock: stock, Shards: shards})
	}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: acts}.Config(t))
	hostA, hostB := opsStore(t, p.Cfg), opsStore(t, p.Cfg)
	for _, ea := range acts {
		a := p.Activity(t, ea.ID)
		now := time.Now()
		var wg sync.WaitGroup
		var outA, outB store.PreheatOutcome
		var errA, errB error
		wg.Add(2)
		go func() { defer wg.Done(); outA, errA = hostA.Preheat(context.Background(), a, false, now) }()
		go func() {
			defer wg.Done()
			outB, errB = hostB.Preheat(context.Background(), a, false, now.Add(time.Millisecond))
		}()
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("%s: preheats: %v / %v", a.ID, errA, errB)
		}
		if outA == outB || (outA != store.PreheatUnchanged && outB != store.PreheatUnchanged) {
			t.Errorf("%s: outcomes %v and %v, want one created and one unchanged", a.ID, outA, outB)
		}
		ver, _ := r.Node.Do("HGET", "seckill:{"+a.ID+"}:meta", "ver")
		for s := 0; s < shards; s++ {
			if g, _ := r.Node.Do("HGET", fmt.Sprintf("seckill:{%s:%d}:stock:%s", a.ID, s, e2e.SKU), "g"); g != ver {
				t.Fatalf("%s: shard %d has stock generation %s, the meta %s: two preheats interleaved", a.ID, s, g, ver)
			}
		}
		p.WaitPreheated(t, a.ID)
		// Buyers all homed on one shard.
		home := store.HomeShard(a.ID, shards)
		var buyers []string
		for u := 0; len(buyers) < stock+10; u++ {
			if name := fmt.Sprintf("%s-u%d", a.ID, u); store.HomeShard(name, shards) == home {
				buyers = append(buyers, name)
			}
		}
		wins := 0
		codes := map[string]int{}
		for _, u := range buyers {
			got := e2e.Buy(p.Addr, a.ID, u)
			codes[got.Code]++
			if got.Code == "WIN" {
				wins++
			}
		}
		// The reconciler's move settling (what `reconcile --repair` does to
		// moves older than 30 s), then more buyers: the units must be sold.
		if _, err := hostA.SettleMoves(context.Background(), a, 0, time.Now().Add(time.Minute)); err != nil {
			t.Logf("%s: settle moves: %v", a.ID, err)
		}
		for u := 0; u < 10 && wins < stock; u++ {
			if got := e2e.Buy(p.Addr, a.ID, fmt.Sprintf("%s-late%d", a.ID, u)); got.Code == "WIN" {
				wins++
			}
		}
		s := opsWantInvariant(t, hostA, a)
		if wins != stock || s.SKUs[0].Remaining != 0 {
			t.Errorf("%s: %d of %d units sold to %d buyers (%v), status %+v: units lost after two concurrent preheats", a.ID, wins, stock, len(buyers), codes, s.SKUs[0])
		}
	}
}

// TestRedTeamOpsReleaseAndReconcileTwiceFromTwoHosts: an operator's bad
// day — `release TOKEN` run concurrently from two hosts (10 times in all)
// for a confirmed order, and `reconcile --repair` run concurrently from two
// hosts for a buy whose outcome was unknown (the shop cut the connection
// and holds no order). SPEC §2: release is idempotent and never lifts stock
// above initial; §5/§6: the reconciler settles a stale pending reservation
// once (verify 404 → released). Counters must add up exactly.
func TestRedTeamOpsReleaseAndReconcileTwiceFromTwoHosts(t *testing.T) {
	f := newFixture(t)
	act := f.act(t, actOpen)
	win := f.buy(actOpen, "payer")
	wantWin(t, win)
	f.shop.Cut("ghost")
	if got := f.buy(actOpen, "ghost"); got.Status != 504 {
		t.Fatalf("cut buy: %d %s", got.Status, got.Body)
	}
	f.p.WantStock(t, actOpen, 98, 1, 1)

	hostA, hostB := opsStore(t, f.p.Cfg), opsStore(t, f.p.Cfg)
	tok, err := store.ParseToken(win.Token())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for i := 0; i < 10; i++ {
		st := hostA
		if i%2 == 1 {
			st = hostB
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.Release(context.Background(), tok, act.Shards, "refund", time.Now().UnixMilli(), false)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes["error"]++
				return
			}
			codes[c.String()]++
		}()
	}
	// Two reconcile --repair passes at once, as if an hour later.
	later := time.Now().Add(time.Hour)
	reps := make([]reservation.Report, 2)
	errs := make([]error, 2)
	for i, st := range []*store.Store{hostA, hostB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := reservation.NewReconciler(st, metrics.New(), zap.NewNop()).WithLeaseWait(5 * time.Second)
			reps[i], errs[i] = rc.Run(context.Background(), []*config.Activity{act}, true, later)
		}()
	}
	wg.Wait()
	t.Logf("releases: %v; reconcile errors %v", codes, errs)
	if codes["OK"] != 1 || codes["SAME"] != 9 {
		t.Errorf("10 concurrent releases of one token answered %v, want 1 OK and 9 SAME", codes)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("reconcile %d: %v", i, err)
		}
	}
	s := opsWantInvariant(t, hostA, act)
	k := s.SKUs[0]
	if k.Remaining != 100 || k.Pending != 0 || k.Confirmed != 0 || k.Released != 2 {
		t.Errorf("status %+v, want remaining 100, pending 0, confirmed 0, released 2", k)
	}
	if got := len(f.shop.Orders()); got != 1 {
		t.Errorf("shop holds %d orders, want 1 (the refunded one)", got)
	}
	// Both buyers may buy again (released units come off their records).
	wantWin(t, f.buy(actOpen, "payer"))
	wantWin(t, f.buy(actOpen, "ghost2"))
}

// TestRedTeamOpsQueuedBuyersSurviveOperatorMistakes: queue mode, the
// workers down (every instance restarting) while 5 buyers wait QUEUED.
// The operator runs a plain `preheat` (stock as configured: must change
// nothing), then `reconcile --repair` as if an hour later (must
// not release a queued buyer: it was never sent), then the workers come
// back. SPEC §9: a QUEUED buyer ends confirmed or released with a reason,
// never released because it was not sent yet; §6 counters add up.
func TestRedTeamOpsQueuedBuyersSurviveOperatorMistakes(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "qops", Stock: 5, Mode: "queue"}}}.Config(t))
	p.Preheat(t, "qops")
	a := p.Activity(t, "qops")
	var toks []string
	for i := 0; i < 5; i++ {
		got := e2e.Buy(p.Addr, "qops", fmt.Sprintf("q%d", i))
		if got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	host := opsStore(t, p.Cfg)
	// Stock as configured: idempotent (unchanged), never a reload.
	if out, err := host.Preheat(context.Background(), a, false, time.Now()); err != nil || out != store.PreheatUnchanged {
		t.Errorf("plain preheat of a running activity with 5 queued buyers: %v, %v; want unchanged", out, err)
	}
	rc := reservation.NewReconciler(host, metrics.New(), zap.NewNop()).WithLeaseWait(5 * time.Second)
	if _, err := rc.Run(context.Background(), []*config.Activity{a}, true, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	k := opsWantInvariant(t, host, a).SKUs[0]
	if k.Pending != 5 || k.Remaining != 0 || k.Released != 0 {
		t.Errorf("after preheat + reconcile with 5 queued buyers: %+v, want pending 5", k)
	}
	p.StartQueue(t)
	e2e.Eventually(t, 8*time.Second, "queued buyers confirmed", func() bool {
		s, err := host.Status(context.Background(), a)
		return err == nil && s.SKUs[0].Confirmed == 5
	})
	k = opsWantInvariant(t, host, a).SKUs[0]
	if k.Confirmed != 5 || len(shop.Orders()) != 5 {
		t.Errorf("status %+v, shop orders %d; want 5 confirmed and 5 orders", k, len(shop.Orders()))
	}
	for _, tok := range toks {
		if _, ok := shop.Orders()[tok]; !ok {
			t.Errorf("queued buyer %s has no order", tok)
		}
	}
}

// TestRedTeamOpsPauseHoldsTheQueue: the kill switch stops what goes to the
// shop, queue mode included. Five buyers wait QUEUED (workers not yet
// running); the operator pauses; the workers start: while paused nothing is
// sent and nobody is released (the red team found queued buyers sent during
// a pause: the workers looked only at Ready). On resume every one is sent
// and confirmed, and the counters add up.
func TestRedTeamOpsPauseHoldsTheQueue(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "qp", Stock: 5, Mode: "queue"}}}.Config(t))
	p.Preheat(t, "qp")
	a := p.Activity(t, "qp")
	for i := 0; i < 5; i++ {
		if got := e2e.Buy(p.Addr, "qp", fmt.Sprintf("q%d", i)); got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
	}
	host := opsStore(t, p.Cfg)
	if err := host.SetPaused(opsCtx(t), "qp", true); err != nil {
		t.Fatal(err)
	}
	// The instance learns of the pause through Redis's invalidation (within
	// 1 s, SPEC): its workers start once it has.
	e2e.Eventually(t, 2*time.Second, "the instance sees the pause", func() bool {
		f, err := p.Store.Flags(context.Background(), "qp")
		return err == nil && f.Paused
	})
	p.StartQueue(t)
	time.Sleep(1500 * time.Millisecond) // the workers run, paused
	if n := len(shop.Buys()); n != 0 {
		t.Fatalf("the shop got %d queued buys during the pause", n)
	}
	if k := opsWantInvariant(t, host, a).SKUs[0]; k.Pending != 5 || k.Released != 0 {
		t.Fatalf("during the pause: %+v, want 5 pending (queued), none released", k)
	}
	if err := host.SetPaused(opsCtx(t), "qp", false); err != nil {
		t.Fatal(err)
	}
	e2e.Eventually(t, 8*time.Second, "queued buyers confirmed after resume", func() bool {
		s, err := host.Status(context.Background(), a)
		return err == nil && s.SKUs[0].Confirmed == 5
	})
	if k := opsWantInvariant(t, host, a).SKUs[0]; k.Confirmed != 5 || len(shop.Orders()) != 5 {
		t.Errorf("after resume: %+v, shop orders %d; want 5 confirmed, 5 orders", k, len(shop.Orders()))
	}
}
