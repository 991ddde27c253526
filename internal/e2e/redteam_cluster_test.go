//go:build failover

package e2e_test

// Red-team tests of the cluster paths (failover, slot migration, the kill
// switch across a failover), asserting from Redis's own state and the
// shop's orders.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rcCheckBook asserts, after a sale, what SPEC §6 promises from Redis's
// own state and the shop: the stock invariant, nothing pending, confirmed
// == the shop's orders <= stock, no user with two orders, every order's
// token confirmed.
func rcCheckBook(t *testing.T, p *e2e.Proxy, shop *e2e.Shop, act string, shards int, stock int64) {
	t.Helper()
	var k store.SKUStatus
	e2e.Eventually(t, 10*time.Second, "nothing pending", func() bool {
		k = p.SKUStatus(t, act)
		return k.Pending == 0
	})
	orders := shop.Orders()
	t.Logf("status %+v; shop orders %d", k, len(orders))
	if !k.OK {
		t.Errorf("stock invariant broken: %+v", k)
	}
	if int64(len(orders)) > stock {
		t.Errorf("oversold: the shop holds %d orders for %d units", len(orders), stock)
	}
	if k.Confirmed != int64(len(orders)) {
		t.Errorf("Redis confirmed %d units, the shop holds %d orders", k.Confirmed, len(orders))
	}
	users := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for tok, o := range orders {
		users[o.User]++
		pt, err := store.ParseToken(tok)
		if err != nil {
			t.Errorf("bad token %q", tok)
			continue
		}
		r, found, err := p.Store.Lookup(ctx, pt, shards)
		if err != nil || !found || r.State != store.StateConfirmed {
			t.Errorf("order %s of %s: reservation found %v state %v err %v", tok, o.User, found, r.State, err)
		}
	}
	for u, n := range users {
		if n > 1 {
			t.Errorf("user %s holds %d orders, limit 1", u, n)
		}
	}
}

// TestRedTeamClusterSlotMigrationDuringSale: while a spike runs through two
// proxies, the slots of the activity's shards are migrated between masters
// again and again (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
// NODE): ASK/MOVED/TRYAGAIN under live scripts, steals across shards whose
// slots are moving. README: "a sale on an uneven placement is still
// correct"; SPEC §6 at every moment. Every answer must be a SPEC code
// (STORE_UNAVAILABLE allowed, nothing held), and once the moves stop the
// whole stock sells, exactly, with the book matching the shop.
func TestRedTeamClusterSlotMigrationDuringSale(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster failover run: in the plain pass (make test), not under -race")
	}
	const act, stock, shards = "rcmig", 200, 6
	rd := e2e.StartCluster(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: rd.Addrs, Cluster: true, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: act, Stock: stock, Shards: shards}}}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, act)
	p2.WaitPreheated(t, act)
	keys := p1.Store.SKUKeys(act, e2e.SKU, shards)
	var slots []int
	for _, sk := range keys.Shards {
		s, err := rd.Nodes.Slot(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	stop := make(chan struct{})
	var moves atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			slot := slots[i%len(slots)]
			to := rd.Nodes.Nodes[(i/len(slots)+i)%len(rd.Nodes.Nodes)]
			if err := rd.Nodes.MoveSlot(slot, to); err != nil {
				t.Logf("move slot %d to %s: %v", slot, to.Addr, err)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			moves.Add(1)
		}
	}()
	res := e2e.Spike{Addrs: []string{p1.Addr, p2.Addr}, Activity: act, Users: 1200, Tries: 2, Conc: 24, UserPrefix: "m"}.Fire(t)
	close(stop)
	wg.Wait()
	t.Logf("during %d slot moves: %v, odd %d", moves.Load(), res.ByCode, len(res.Odd))
	if moves.Load() == 0 {
		t.Fatal("no slot moved during the spike")
	}
	for _, o := range res.Odd[:min(5, len(res.Odd))] {
		t.Errorf("odd answer during migration: %s", o)
	}
	for code, n := range res.ByCode {
		switch code {
		case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING", "STORE_UNAVAILABLE":
		default:
			t.Errorf("%d answers %s during migration", n, code)
		}
	}
	// Leftovers (units of STORE_UNAVAILABLE buyers) sell once the moves stop.
	for round := 0; round < 10; round++ {
		if k := p1.SKUStatus(t, act); k.Remaining == 0 && k.Pending == 0 {
			break
		}
		e2e.Spike{Addrs: []string{p2.Addr, p1.Addr}, Activity: act, Users: 100, Tries: 1, Conc: 16,
			UserPrefix: "late" + strconv.Itoa(round) + "-"}.Fire(t)
		time.Sleep(200 * time.Millisecond)
	}
	rcCheckBook(t, p1, shop, act, shards, stock)
	if n := len(shop.Orders()); n != stock {
		t.Errorf("after the moves stopped the sale sold %d of %d units", n, stock)
	}
}

// TestRedTeamClusterPauseAcrossFailover: the kill switch across a failover
// of the master holding the activity's meta hash (where the paused flag
// lives, read through client-side caching). SPEC: pause/resume obeyed by
// every instance within 1 s; the proxy must not sell during a pause, nor
// refuse forever. Sequence: pause; kill the meta's master; while it is
// replaced no buy may win; after the promotion a resume must let buys win
// within a bounded time, and a pause on the new master must stop them
// within ~1 s.
func TestRedTeamClusterPauseAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster failover run: in the plain pass (make test), not under -race")
	}
	const act, stock, shards = "rcpause", 40, 6
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: cl.Addrs(), Cluster: true, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: act, Stock: stock, Shards: shards}}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, act)
	e2e.Eventually(t, 10*time.Second, "preheat replicated", cl.Replicated)
	ctl, err := store.OpenNow(p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	setPaused := func(v bool) {
		t.Helper()
		var err error
		for try := 0; try < 50; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = ctl.SetPaused(ctx, act, v)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("SetPaused(%v): %v", v, err)
	}
	n := 0
	buy := func() e2e.Resp {
		n++
		return e2e.Buy(p.Addr, act, "pz"+strconv.Itoa(n))
	}
	if r := buy(); r.Code != "WIN" {
		t.Fatalf("first buy: %d %s", r.Status, r.Body)
	}
	setPaused(true)
	e2e.Eventually(t, 2*time.Second, "paused", func() bool { return buy().Code == "PAUSED" })
	e2e.Eventually(t, 10*time.Second, "pause replicated", cl.Replicated)
	meta, err := cl.MasterFor(p.Store.MetaKey(act))
	if err != nil {
		t.Fatal(err)
	}
	meta.Kill()
	tKill := time.Now()
	codes := map[string]int{}
	healthy := time.Time{}
	for time.Since(tKill) < 20*time.Second {
		r := buy()
		codes[r.Code]++
		if r.Code == "WIN" {
			t.Errorf("a buy won %v after the kill while the activity is paused", time.Since(tKill))
		}
		if healthy.IsZero() {
			if ok, _ := cl.Healthy(); ok {
				healthy = time.Now()
			}
		} else if time.Since(healthy) > 2*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if healthy.IsZero() {
		t.Fatalf("no promotion within 20 s")
	}
	t.Logf("paused, meta master %s killed; promoted after %v; answers %v", meta.Addr, healthy.Sub(tKill).Round(time.Millisecond), codes)

	setPaused(false)
	tResume := time.Now()
	e2e.Eventually(t, 5*time.Second, "sells again after resume on the promoted master", func() bool { return buy().Code == "WIN" })
	t.Logf("first win %v after the resume", time.Since(tResume).Round(time.Millisecond))

	setPaused(true)
	tPause := time.Now()
	var firstPaused time.Time
	for time.Since(tPause) < 3*time.Second {
		r := buy()
		if r.Code == "PAUSED" && firstPaused.IsZero() {
			firstPaused = time.Now()
		}
		if r.Code == "WIN" && time.Since(tPause) > 1500*time.Millisecond {
			t.Errorf("a buy won %v after the pause on the promoted master", time.Since(tPause))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if firstPaused.IsZero() {
		t.Fatalf("pause on the promoted master never obeyed within 3 s")
	}
	t.Logf("pause obeyed %v after it was set", firstPaused.Sub(tPause).Round(time.Millisecond))
	setPaused(false)
	k := p.SKUStatus(t, act)
	if !k.OK || int64(len(shop.Orders())) != k.Confirmed+k.Pending || k.Confirmed+k.Pending > stock {
		t.Errorf("after the failover: %+v, shop orders %d", k, len(shop.Orders()))
	}
}

// rcPromoted reports whether the live masters other than victim see every
// slot served by a master that is not victim and not failing.
func rcPromoted(cl *redistest.Cluster, victim *redistest.Server) bool {
	for _, s := range cl.All() {
		if s == victim || !s.Alive() {
			continue
		}
		out, err := s.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(out, "cluster_state:ok") || !strings.Contains(out, "cluster_slots_ok:16384") {
			return false
		}
		nodes, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			return false
		}
		for _, n := range redistest.ParseNodes(nodes) {
			if len(n.Slots) > 0 && (n.Addr == victim.Addr || n.Has("fail") || n.Has("fail?")) {
				return false
			}
		}
	}
	return true
}

// TestRedTeamClusterPausedMasterDurable: durable winners on (README
// "Durable winners": orders the shop holds are never lost to a failover,
// no unit sold twice). Mid-spike the master of shard 0 is SIGSTOPped (not
// killed: its sockets stay open, buffered commands run when it wakes, as
// a master, before it learns it was replaced), its replica is promoted,
// then it is SIGCONTed and rejoins as a replica. The sale must then sell
// out, and after one reconcile pass the book must match the shop: no
// oversell, no user twice, every order confirmed, nothing pending.
func TestRedTeamClusterPausedMasterDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster failover run: in the plain pass (make test), not under -race")
	}
	const act, stock, shards = "rcstop", 60, 6
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: cl.Addrs(), Cluster: true, ShopURL: shop.URL,
		RedisExtra: []string{"durable_winners: { replicas: 1, timeout: 200ms, on_timeout: refuse }"},
		Activities: []e2e.Activity{{ID: act, Stock: stock, Shards: shards}}}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, act)
	p2.WaitPreheated(t, act)
	e2e.Eventually(t, 10*time.Second, "preheat replicated", cl.Replicated)
	victim, err := cl.MasterFor(p1.Store.SKUKeys(act, e2e.SKU, shards).Shards[0].Stock)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < 24; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			addr := []string{p1.Addr, p2.Addr}[w%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := e2e.Do(nil, addr, e2e.Req{URI: "/api/seckill/" + act + "/" + e2e.SKU + "/buy",
					Header: [][2]string{{"X-User-Id", "sp" + strconv.FormatInt(next.Add(1), 10)}}, Timeout: 10 * time.Second})
				mu.Lock()
				if r.Err != nil {
					codes["ERR"]++
				} else {
					codes[r.Code]++
				}
				mu.Unlock()
				time.Sleep(40 * time.Millisecond)
			}
		}(w)
	}
	defer func() { close(stop); wg.Wait() }()
	e2e.Eventually(t, 20*time.Second, "15 orders", func() bool { return len(shop.Orders()) >= 15 })
	victim.Pause(t)
	tStop := time.Now()
	e2e.Eventually(t, 20*time.Second, "replica promoted", func() bool { return rcPromoted(cl, victim) })
	t.Logf("stopped %s at %d orders; promoted after %v", victim.Addr, len(shop.Orders()), time.Since(tStop).Round(time.Millisecond))
	victim.Resume(t)
	e2e.Eventually(t, 30*time.Second, "old master back as a replica", func() bool {
		return victim.Info("replication", "master_link_status") == "up" && cl.Replicated()
	})
	tBack := time.Now()
	e2e.Eventually(t, 20*time.Second, "sold out after recovery", func() bool {
		k := p1.SKUStatus(t, act)
		return k.Remaining == 0 && k.InTransit == 0
	})
	t.Logf("sold out %v after the old master rejoined", time.Since(tBack).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	mu.Lock()
	t.Logf("answers: %v", codes)
	if codes["ERR"] > 0 {
		t.Errorf("%d transport errors", codes["ERR"])
	}
	mu.Unlock()

	a := p1.Activity(t, act)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := reservation.NewReconciler(p1.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, ar := range rep.Activities {
		t.Logf("reconcile: %d stale settled, alerts %v", len(ar.Stale), ar.Alerts)
	}
	rcCheckBook(t, p1, shop, act, shards, stock)
}
