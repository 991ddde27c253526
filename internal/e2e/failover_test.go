// The plain cluster failover test (~18 s) runs in `make test`; -short
// skips it (the race pass). Its two lagging-replica variants
// (failover_variants_test.go, build tag failover) run in `make
// test-failover` and, on their own, in .ci/run.

package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const (
	foAct    = "fo"
	foStock  = 300
	foShards = 8
	foUsers  = 4000 // distinct buyers, one try each
	foRate   = 400  // buys sent per second, over both proxies
	foConc   = 256  // at most this many in flight
	// foKillAt is how many orders the shop holds when the master is killed:
	// a third of the stock, so most of it is sold after the failover.
	foKillAt = 100
	// foSlow is the answer time past which a buyer would call the proxy hung.
	foSlow = 3 * time.Second
)

// foAnswer is one buy of the failover spike.
type foAnswer struct {
	user       string
	onVictim   bool // the buyer's home shard is on the killed master
	sent, done time.Time
	status     int
	code       string
	token      string
	err        error
}

// TestClusterFailover: a spike over two proxies against a 3-master,
// 3-replica cluster; a third of the way through the sale the master that
// holds the most stock shards is SIGKILLed. Buys meanwhile are answered
// (STORE_UNAVAILABLE at worst, never a transport error or another 5xx),
// buys on the killed master's shards work again once its replica is
// promoted, without restarting the proxies, and afterwards Redis keeps the
// stock invariant and no user holds more than per_user_limit. Units lost to
// asynchronous replication (orders the shop holds whose reservation the
// promoted replica never received) are measured and logged, not failed on.
func TestClusterFailover(t *testing.T) {
	e2e.Soak(t)
	if testing.Short() {
		t.Skip("a 6-node cluster failover under a spike (~18 s)")
	}
	runFailover(t, foCase{})
}

// foCase is one variant of the failover spike.
type foCase struct {
	lag     time.Duration // the victim's replica is stopped this long before the kill
	durable bool          // redis.durable_winners on
}

func runFailover(t *testing.T, fc foCase) {
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: cl.Addrs(), Cluster: true, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: foAct, Stock: foStock, Shards: foShards}}}
	if fc.durable {
		opts.RedisExtra = []string{"durable_winners: { replicas: 1, timeout: 50ms, on_timeout: refuse }"}
	}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, foAct)
	p2.WaitPreheated(t, foAct)
	e2e.Eventually(t, 10*time.Second, "preheat replicated", cl.Replicated)

	// The victim: the master holding the most stock shards.
	keys := p1.Store.SKUKeys(foAct, e2e.SKU, foShards)
	byMaster := map[*redistest.Server][]int{}
	for i, sk := range keys.Shards {
		m, err := cl.MasterFor(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		byMaster[m] = append(byMaster[m], i)
	}
	var victim *redistest.Server
	for _, m := range cl.Nodes {
		if victim == nil || len(byMaster[m]) > len(byMaster[victim]) {
			victim = m
		}
	}
	onVictim := map[int]bool{}
	for _, i := range byMaster[victim] {
		onVictim[i] = true
	}
	t.Logf("victim master %s holds shards %v of %d", victim.Addr, byMaster[victim], foShards)
	var victimReplica *redistest.Server
	if fc.lag > 0 {
		var err error
		if victimReplica, err = cl.ReplicaOf(victim); err != nil {
			t.Fatal(err)
		}
		if victimReplica == nil {
			t.Fatalf("no replica of the victim %s", victim.Addr)
		}
	}

	// The spike, paced, in the background.
	addrs := []string{p1.Addr, p2.Addr}
	clients := []*fasthttp.Client{
		{MaxConnsPerHost: foConc, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second},
		{MaxConnsPerHost: foConc, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second},
	}
	answers := make([]foAnswer, foUsers)
	sem := make(chan struct{}, foConc)
	spikeDone := make(chan struct{})
	t0 := time.Now()
	go func() {
		var wg sync.WaitGroup
		defer close(spikeDone)
		defer wg.Wait()
		for i := 0; i < foUsers; i++ {
			if d := time.Until(t0.Add(time.Duration(i) * time.Second / foRate)); d > 0 {
				time.Sleep(d) // pacing the load, not synchronisation
			}
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer func() { <-sem; wg.Done() }()
				user := "fo" + strconv.Itoa(i)
				a := foAnswer{user: user, onVictim: onVictim[store.HomeShard(user, foShards)], sent: time.Now()}
				r := e2e.Do(clients[i%2], addrs[i%2], e2e.Req{URI: "/api/seckill/" + foAct + "/" + e2e.SKU + "/buy",
					Header: [][2]string{{"X-User-Id", user}}, Timeout: 10 * time.Second})
				a.done, a.status, a.code, a.token, a.err = time.Now(), r.Status, r.Code, r.Token(), r.Err
				if r.Err == nil && r.Code == "" {
					a.code = fmt.Sprintf("?%d %s", r.Status, r.Body)
				}
				answers[i] = a
			}(i)
		}
	}()

	// Kill mid-spike: once a third of the stock is sold.
	e2e.Eventually(t, 20*time.Second, "a third of the stock sold", func() bool { return len(shop.Orders()) >= foKillAt })
	var tLag time.Time
	ordersAtLag := len(shop.Orders())
	if victimReplica != nil {
		// The replica stops reading, and its link is cut: what the
		// master writes from now on never reaches it (a SIGSTOP alone
		// would leave the link open, the writes waiting in its socket
		// buffer, read on SIGCONT even after the master's death).
		victimReplica.Pause(t)
		if _, err := victim.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
			t.Fatalf("cut the replica's link: %v", err)
		}
		tLag = time.Now()
		time.Sleep(fc.lag) // the fault injected: the replica lags this long
	}
	ordersAtKill := len(shop.Orders())
	victim.Kill()
	tKill := time.Now()
	if victimReplica != nil {
		victimReplica.Resume(t)
		t.Logf("replica %s stopped %v before the kill (%d orders then, %d at the kill)",
			victimReplica.Addr, tKill.Sub(tLag).Round(time.Millisecond), ordersAtLag, ordersAtKill)
	}
	for deadline := tKill.Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, why := cl.Healthy()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica promoted within 30 s: %s", why)
		}
	}
	tPromoted := time.Now()
	newMaster, err := cl.MasterFor(keys.Shards[byMaster[victim][0]].Stock)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s at %v (%d orders); cluster healthy again %v later, %s now serves its slots",
		victim.Addr, tKill.Sub(t0).Round(time.Millisecond), ordersAtKill, tPromoted.Sub(tKill).Round(time.Millisecond), newMaster.Addr)
	if fc.durable {
		// The promoted replica has no replica of its own: bring the killed
		// master back (empty), it rejoins as the new master's replica.
		victim.Restart(t)
		e2e.Eventually(t, 30*time.Second, "the killed master back as a replica", func() bool {
			return victim.Info("replication", "master_link_status") == "up" && cl.Replicated()
		})
		t.Logf("%s back as a replica %v after the promotion", victim.Addr, time.Since(tPromoted).Round(time.Millisecond))
	}

	// Recovery without restarting the proxies: a buyer homed on each of
	// the killed master's shards gets a Redis decision, not STORE_UNAVAILABLE.
	for _, shard := range byMaster[victim] {
		user := userHomedOn(shard, "probe")
		var last e2e.Resp
		e2e.Eventually(t, 15*time.Second, "a decision on shard "+strconv.Itoa(shard), func() bool {
			last = e2e.Do(nil, p2.Addr, e2e.Req{URI: "/api/seckill/" + foAct + "/" + e2e.SKU + "/buy",
				Header: [][2]string{{"X-User-Id", user}}, Timeout: 10 * time.Second})
			return last.Err == nil && (last.Code == "WIN" || last.Code == "SOLD_OUT" || last.Code == "ALREADY_PURCHASED")
		})
	}
	select {
	case <-spikeDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the spike did not finish within 2 minutes")
	}

	// (a) Every buy answered with a SPEC code; the only 5xx is 503 STORE_UNAVAILABLE.
	type window struct {
		name     string
		from, to time.Time
		byCode   map[string]int
		victim   map[string]int
		maxLat   time.Duration
		n        int
		firstWin time.Time // first win homed on the victim's shards
	}
	wins := []*window{
		{name: "before kill", from: t0, to: tKill},
		{name: "kill→promoted", from: tKill, to: tPromoted},
		{name: "after promoted", from: tPromoted, to: time.Now().Add(time.Hour)},
	}
	for _, w := range wins {
		w.byCode, w.victim = map[string]int{}, map[string]int{}
	}
	var firstUnavail, lastUnavail, firstVictimWinAfterKill time.Time
	for _, a := range answers {
		if a.err != nil {
			t.Errorf("%s: transport error after %v: %v", a.user, a.done.Sub(a.sent), a.err)
			continue
		}
		switch a.code {
		case "WIN", "SOLD_OUT", "ALREADY_PURCHASED", "PENDING":
		case "STORE_UNAVAILABLE":
			if a.status != 503 {
				t.Errorf("%s: STORE_UNAVAILABLE with status %d", a.user, a.status)
			}
			if firstUnavail.IsZero() || a.done.Before(firstUnavail) {
				firstUnavail = a.done
			}
			if a.done.After(lastUnavail) {
				lastUnavail = a.done
			}
		default:
			t.Errorf("%s: unexpected answer %d %s", a.user, a.status, a.code)
		}
		if a.status >= 500 && a.code != "STORE_UNAVAILABLE" {
			t.Errorf("%s: %d %s", a.user, a.status, a.code)
		}
		if lat := a.done.Sub(a.sent); lat > foSlow {
			t.Errorf("%s: answered after %v", a.user, lat)
		}
		if a.code == "WIN" && a.onVictim && a.sent.After(tKill) && (firstVictimWinAfterKill.IsZero() || a.done.Before(firstVictimWinAfterKill)) {
			firstVictimWinAfterKill = a.done
		}
		for _, w := range wins {
			if !a.sent.Before(w.from) && a.sent.Before(w.to) {
				w.n++
				w.byCode[a.code]++
				if a.onVictim {
					w.victim[a.code]++
				}
				w.maxLat = max(w.maxLat, a.done.Sub(a.sent))
			}
		}
	}
	for _, w := range wins {
		t.Logf("%-15s %5d buys, max %6v; by code %v; homed on the killed master: %v", w.name, w.n, w.maxLat.Round(time.Millisecond), w.byCode, w.victim)
	}
	since := func(x time.Time) string {
		if x.IsZero() {
			return "never"
		}
		return x.Sub(tKill).Round(time.Millisecond).String()
	}
	t.Logf("after the kill: first STORE_UNAVAILABLE %s, last %s, promoted %s, first win on the killed master's shards %s",
		since(firstUnavail), since(lastUnavail), since(tPromoted), since(firstVictimWinAfterKill))

	// (c) After the failover. Pending reservations whose confirm hit the dead
	// master are settled the way an operator would: one reconcile pass
	// (as if pending_timeout had passed), which asks the shop.
	a := p1.Activity(t, foAct)
	pendingBefore := p1.SKUStatus(t, foAct).Pending
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := reservation.NewReconciler(p1.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	settled := 0
	for _, ar := range rep.Activities {
		settled += len(ar.Stale)
		for _, al := range ar.Alerts {
			t.Logf("reconcile alert: %s", al)
		}
	}
	k := p1.SKUStatus(t, foAct)
	t.Logf("status after reconcile: %+v (pending before reconcile %d, %d stale settled)", k, pendingBefore, settled)
	if !k.OK {
		// A shard's own counters are written by one script at a time and
		// replicated as a unit: they must add up whatever was lost.
		if strings.HasPrefix(k.Problem, "shard ") || strings.Contains(k.Problem, "missing") {
			t.Errorf("stock invariant broken on a shard: %s", k.Problem)
		} else {
			t.Logf("SKU-level invariant off after the failover (a stock move straddled the kill): %s", k.Problem)
		}
	}
	if k.Pending != 0 {
		t.Errorf("%d units still pending after the reconcile pass", k.Pending)
	}

	// No user holds more than per_user_limit (1) in Redis.
	c, err := p1.Store.Client()
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	for _, sk := range keys.Shards {
		m, err := c.Do(ctx, c.B().Hgetall().Key(sk.Users).Build()).AsStrMap()
		if err != nil {
			t.Fatalf("users of %s: %v", sk.Users, err)
		}
		for u, v := range m {
			units, _, _ := strings.Cut(v, "|")
			n, _ := strconv.ParseInt(units, 10, 64)
			held[u] += n
		}
	}
	for u, n := range held {
		if n > a.PerUserLimit {
			t.Errorf("user %s holds %d units in Redis, limit %d", u, n, a.PerUserLimit)
		}
	}

	// Shop orders against the reservation book.
	orders := shop.Orders()
	perUser := map[string]int{}
	var lost, confirmedOK, otherState []string
	byReconcile := 0
	for tok, o := range orders {
		perUser[o.User]++
		pt, err := store.ParseToken(tok)
		if err != nil {
			t.Errorf("shop order with a bad token %q", tok)
			continue
		}
		r, found, err := p1.Store.Lookup(ctx, pt, foShards)
		switch {
		case err != nil:
			t.Errorf("lookup %s: %v", tok, err)
		case !found:
			lost = append(lost, tok+" (shard "+strconv.Itoa(pt.Shard)+")")
		case r.State == store.StateConfirmed && r.OrderID == o.OrderID:
			confirmedOK = append(confirmedOK, tok)
		case r.State == store.StateConfirmed && r.OrderID == "":
			// Its confirm hit the dead master; the reconcile pass confirmed
			// it from the shop's verify endpoint, which (in this harness)
			// answers 200 without an order id.
			confirmedOK = append(confirmedOK, tok)
			byReconcile++
		default:
			otherState = append(otherState, fmt.Sprintf("%s: %s order %q", tok, r.State, r.OrderID))
		}
	}
	if len(otherState) > 0 {
		sort.Strings(otherState)
		t.Errorf("%d shop orders whose reservation is not confirmed with their order id: %v", len(otherState), otherState)
	}
	twice := 0
	for _, n := range perUser {
		if n > 1 {
			twice++
		}
	}
	sort.Strings(lost)
	t.Logf("shop: %d orders from %d users (stock %d); Redis confirmed %d (%d by the reconcile pass); orders with no reservation record after the failover (lost to async replication): %d %v; users with two orders: %d",
		len(orders), len(perUser), foStock, k.Confirmed, byReconcile, len(lost), lost, twice)
	if int64(len(confirmedOK)) != k.Confirmed {
		t.Errorf("Redis confirmed %d units, but %d shop orders match a confirmed reservation", k.Confirmed, len(confirmedOK))
	}
	// A lost order's unit is back in stock on the promoted replica: sold
	// again, it is a unit sold twice.
	soldTwice := len(lost)
	t.Logf("SUMMARY lag=%v durable=%v promoted_after=%v first_victim_win_after=%s unavailable_answers=%d orders=%d confirmed=%d lost=%d sold_twice=%d oversold=%d reconciled=%d",
		fc.lag, fc.durable, tPromoted.Sub(tKill).Round(time.Millisecond), since(firstVictimWinAfterKill),
		wins[0].byCode["STORE_UNAVAILABLE"]+wins[1].byCode["STORE_UNAVAILABLE"]+wins[2].byCode["STORE_UNAVAILABLE"],
		len(orders), k.Confirmed, len(lost), soldTwice, max(0, len(orders)-foStock), settled)
	if fc.durable {
		if soldTwice != 0 || len(orders) > foStock || twice != 0 {
			t.Errorf("durable winners: %d units sold twice (orders lost to the failover), %d orders for %d units, %d users with two orders",
				soldTwice, len(orders), foStock, twice)
		}
		if k.OK && k.Confirmed != int64(len(orders)) {
			t.Errorf("Redis confirmed %d units, the shop holds %d orders", k.Confirmed, len(orders))
		}
	}
}

// userHomedOn returns a user id whose home shard is shard.
func userHomedOn(shard int, prefix string) string {
	for i := 0; ; i++ {
		u := prefix + strconv.Itoa(i)
		if store.HomeShard(u, foShards) == shard {
			return u
		}
	}
}
