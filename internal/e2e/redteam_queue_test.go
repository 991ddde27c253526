package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// rqProxy starts one proxy for opts, with edit applied to the parsed
// config (queue workers, rate, backlog: knobs the harness options lack),
// and preheats every activity.
func rqProxy(t *testing.T, opts e2e.Options, edit func(*config.Config)) *e2e.Proxy {
	t.Helper()
	cfg := opts.Config(t)
	if edit != nil {
		edit(cfg)
	}
	p := e2e.StartProxy(t, cfg)
	for _, a := range cfg.Activities {
		p.Preheat(t, a.ID)
	}
	return p
}

// rqRes is GET /_seckill/reservations/{token} as a buyer polls it.
type rqRes struct {
	Status   int
	State    string `json:"state"`
	Queued   bool   `json:"queued"`
	Reason   string `json:"reason"`
	OrderID  string `json:"order_id"`
	Position *int64 `json:"position"`
	EtaMs    *int64 `json:"eta_ms"`
}

func (r rqRes) String() string {
	pos, eta := "-", "-"
	if r.Position != nil {
		pos = fmt.Sprint(*r.Position)
	}
	if r.EtaMs != nil {
		eta = fmt.Sprint(*r.EtaMs)
	}
	return fmt.Sprintf("%d state=%s queued=%v reason=%q position=%s eta_ms=%s", r.Status, r.State, r.Queued, r.Reason, pos, eta)
}

// rqAwaitSettled polls every token until each shows an end state or
// within passes; it returns each one's last poll.
func rqAwaitSettled(addr string, toks []string, within time.Duration) []rqRes {
	out := make([]rqRes, len(toks))
	deadline := time.Now().Add(within)
	for {
		all := true
		for i, tok := range toks {
			if !out[i].settled() {
				out[i] = rqPoll(addr, tok)
				all = all && out[i].settled()
			}
		}
		if all || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rqPoll(addr, tok string) rqRes {
	r := e2e.Do(nil, addr, e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
	out := rqRes{Status: r.Status}
	if r.Err == nil {
		_ = json.Unmarshal(r.Body, &out)
	}
	return out
}

// rqSettled reports whether the buyer's poll shows an end state: confirmed,
// or released with a reason.
func (r rqRes) settled() bool {
	return r.Status == http.StatusOK && !r.Queued &&
		(r.State == store.StateConfirmed || (r.State == store.StateReleased && r.Reason != ""))
}

// rqWantStock fails unless the activity's default SKU keeps
// initial = remaining + pending + confirmed, reading Redis through st.
func rqWantStock(t *testing.T, st *store.Store, a *config.Activity) store.SKUStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := st.Status(ctx, a)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	k := s.SKUs[0]
	if !k.OK || k.Initial != k.Remaining+k.Pending+k.Confirmed {
		t.Errorf("status %s = %+v: stock does not add up", a.ID, k)
	}
	return k
}

// TestRedTeamQueueForcedPreheatKeepsNewBuyers: a rehearsal's last queued
// buyer is still at the shop (one worker, the shop slow) when the operator
// runs `preheat --force` to start the real sale over. Three real buyers
// are then told 202 QUEUED. SPEC §9: each QUEUED buyer ends confirmed or
// released with a reason. The worker finishing the rehearsal's request
// acknowledges its old stream entry id (0-1) — which, in the re-created
// stream, is the first real buyer's entry.
func TestRedTeamQueueForcedPreheatKeepsNewBuyers(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rqf", Stock: 5, Shards: 1, Mode: "queue"}}},
		func(c *config.Config) { c.Activities[0].Queue.Workers = 1; c.Activities[0].Queue.Rate = 200 })
	a := p.Activity(t, "rqf")
	p.StartQueue(t)

	release := shop.Hang("rehearsal")
	defer release()
	if got := e2e.Buy(p.Addr, "rqf", "rehearsal"); got.Code != "QUEUED" {
		t.Fatalf("rehearsal buy: %d %s", got.Status, got.Body)
	}
	e2e.Eventually(t, 3*time.Second, "rehearsal buy at the shop", func() bool { return shop.SeenBuy("rehearsal") })

	host := opsStore(t, p.Cfg)
	if _, err := host.Preheat(opsCtx(t), a, true, time.Now()); err != nil {
		t.Fatalf("preheat --force: %v", err)
	}
	p.WaitPreheated(t, "rqf")
	var toks []string
	for i := 0; i < 3; i++ {
		got := e2e.Buy(p.Addr, "rqf", fmt.Sprintf("real%d", i))
		if got.Code != "QUEUED" {
			t.Fatalf("real buyer %d after the forced preheat: %d %s", i, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	release() // the rehearsal's order completes; the worker settles and acks it

	last := rqAwaitSettled(p.Addr, toks, 6*time.Second)
	for i, tok := range toks {
		if !last[i].settled() {
			keys, _ := r.Node.Do("KEYS", "*rqf*log*")
			var xlen []string
			for _, key := range strings.Fields(keys) {
				n, _ := r.Node.Do("XLEN", key)
				xlen = append(xlen, key+"="+n)
			}
			t.Errorf("QUEUED buyer %d (%s) never settled in 6 s with the worker idle: %s; shop saw it: %v; streams %v",
				i, tok, last[i], shop.Orders()[tok].Token != "", xlen)
		}
	}
	k := rqWantStock(t, host, a)
	t.Logf("after: %+v", k)
}

// TestRedTeamQueue5xxAfterOrderIsNotANo: a queue worker sends a buyer and
// the shop takes the order but a balancer in front of it answers 502.
// README "A 5xx is not a no": with verify.url the reservation stays pending
// until verify settles it; SPEC §6 no oversell; reconcile makes shop orders
// equal confirmed. Stock 1: if the worker releases on the 502, the unit goes
// back on sale and a second buyer gets a second order for one unit.
func TestRedTeamQueue5xxAfterOrderIsNotANo(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rq5", Stock: 1, Shards: 1, Mode: "queue"}}}, nil)
	a := p.Activity(t, "rq5")
	shop.AnswerAfterOrder("first", http.StatusBadGateway)
	first := e2e.Buy(p.Addr, "rq5", "first")
	if first.Code != "QUEUED" {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	p.StartQueue(t)
	e2e.Eventually(t, 3*time.Second, "first buy at the shop", func() bool { return shop.SeenBuy("first") })
	time.Sleep(300 * time.Millisecond) // the worker settles by the 502

	second := e2e.Buy(p.Addr, "rq5", "second")
	if second.Code == "QUEUED" {
		e2e.Eventually(t, 3*time.Second, "second buy at the shop", func() bool { return shop.SeenBuy("second") })
		time.Sleep(300 * time.Millisecond)
	}
	host := opsStore(t, p.Cfg)
	rc := reservation.NewReconciler(host, metrics.New(), zap.NewNop()).WithLeaseWait(5 * time.Second)
	rep, err := rc.Run(opsCtx(t), []*config.Activity{a}, true, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	k := rqWantStock(t, host, a)
	orders := len(shop.Orders())
	st := rqPoll(p.Addr, first.Token())
	t.Logf("first: %+v; second: %s; status %+v; shop orders %d; alerts %v", st, second.Code, k, orders, rep.Activities[0].Alerts)
	if int64(orders) > k.Initial {
		t.Errorf("shop holds %d orders for %d unit(s): oversold (first buyer %s, reason %q; second buyer %s)",
			orders, k.Initial, st.State, st.Reason, second.Code)
	}
	if int64(orders) != k.Confirmed {
		t.Errorf("after reconcile --repair: shop orders %d, confirmed %d", orders, k.Confirmed)
	}
	if st.State == store.StateReleased {
		t.Errorf("buyer whose order the shop holds was released (reason %q)", st.Reason)
	}
}

// rqQueue runs p's queue workers under consumer name, with claimIdle (0:
// the default), as serve runs them; they stop when the test ends.
func rqQueue(t *testing.T, p *e2e.Proxy, name string, claimIdle time.Duration) *reservation.Queue {
	t.Helper()
	q := reservation.NewQueue(p.Store, p.Metrics, zap.NewNop(), reservation.QueueOptions{
		Consumer: name, ClaimIdle: claimIdle, Inflight: p.Server.Inflight()})
	q.Start(p.Cfg)
	t.Cleanup(q.Stop)
	return q
}

// TestRedTeamQueueWorkerKilledMidSendTakenOver: two instances share the
// queue. Instance A's four workers are at the shop (it holds them) when A
// is killed; the shop never completes those requests. Instance B takes the
// entries over (XAUTOCLAIM) and must end every QUEUED buyer confirmed with
// exactly one order per token; stock adds up; shop orders == confirmed.
func TestRedTeamQueueWorkerKilledMidSendTakenOver(t *testing.T) {
	const n = 12
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rqk", Stock: n, Shards: 2, Mode: "queue"}}}
	edit := func(c *config.Config) { c.Activities[0].Queue.Workers = 4; c.Activities[0].Queue.Rate = 500 }
	pa := rqProxy(t, opts, edit)
	cfgB := opts.Config(t)
	edit(cfgB)
	pb := e2e.StartProxy(t, cfgB)
	pb.WaitPreheated(t, "rqk")
	a := pa.Activity(t, "rqk")

	var releases []func()
	var toks []string
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("k%d", i)
		releases = append(releases, shop.Hang(u))
		addr := pa.Addr
		if i%2 == 1 {
			addr = pb.Addr
		}
		got := e2e.Buy(addr, "rqk", u)
		if got.Code != "QUEUED" {
			t.Fatalf("buy %s: %d %s", u, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	qa := rqQueue(t, pa, "A", 1500*time.Millisecond)
	e2e.Eventually(t, 3*time.Second, "A's 4 workers at the shop", func() bool { return len(shop.Requests()) >= 4 })
	qa.Kill()
	for _, rel := range releases {
		rel()
	}
	rqQueue(t, pb, "B", 1500*time.Millisecond)
	last := rqAwaitSettled(pb.Addr, toks, 7*time.Second)
	orders := shop.Orders()
	for i, tok := range toks {
		if last[i].State != store.StateConfirmed {
			t.Errorf("buyer %d (%s): %s, want confirmed", i, tok, last[i])
		}
		if _, ok := orders[tok]; !ok {
			t.Errorf("buyer %d (%s): no order at the shop", i, tok)
		}
	}
	perUser := map[string]int{}
	for _, b := range shop.Buys() {
		if b.Status/100 == 2 {
			perUser[b.User]++
		}
	}
	for u, c := range perUser {
		if c > 1 {
			t.Errorf("user %s got %d orders (per_user_limit 1)", u, c)
		}
	}
	k := rqWantStock(t, opsStore(t, pa.Cfg), a)
	if int64(len(orders)) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d (%+v)", len(orders), k.Confirmed, k)
	}
}

// TestRedTeamQueueStallStoreUnavailableHoldsNothing: queue mode with the
// workers running, Redis stalled (DEBUG SLEEP 400 ms, redis.timeout 100 ms)
// three times with 10 buyers in flight each. SPEC §9: STORE_UNAVAILABLE
// means nothing is held, also when Redis answered late: such a buyer never
// gets an order; every QUEUED buyer ends confirmed or released with a
// reason; stock adds up; shop orders == confirmed. A race (the worker's
// claim against the background abort): failed 8 of 13 runs when written.
func TestRedTeamQueueStallStoreUnavailableHoldsNothing(t *testing.T) {
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		Activities: []e2e.Activity{{ID: "rqs", Stock: 100, Mode: "queue"}}}, nil)
	a := p.Activity(t, "rqs")
	p.StartQueue(t)
	warm := e2e.Buy(p.Addr, "rqs", "warm-up")
	if warm.Code != "QUEUED" {
		t.Fatalf("warm-up: %d %s", warm.Status, warm.Body)
	}
	if s := rqAwaitSettled(p.Addr, []string{warm.Token()}, 3*time.Second); s[0].State != store.StateConfirmed {
		t.Fatalf("warm-up: %s", s[0])
	}
	var mu sync.Mutex
	var unavailable []string
	var toks []string
	for round := 0; round < 3; round++ {
		done := make(chan struct{})
		go func() { defer close(done); _, _ = node.Do("DEBUG", "SLEEP", "0.4") }()
		time.Sleep(30 * time.Millisecond)
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			u := fmt.Sprintf("s%d-%d", round, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := e2e.Buy(p.Addr, "rqs", u)
				mu.Lock()
				defer mu.Unlock()
				switch got.Code {
				case "STORE_UNAVAILABLE":
					unavailable = append(unavailable, u)
				case "QUEUED":
					toks = append(toks, got.Token())
				default:
					t.Errorf("%s during a stall: %d %s (%v)", u, got.Status, got.Body, got.Err)
				}
			}()
		}
		wg.Wait()
		<-done
	}
	last := rqAwaitSettled(p.Addr, toks, 5*time.Second)
	for i, tok := range toks {
		if !last[i].settled() {
			t.Errorf("QUEUED %s never settled: %s", tok, last[i])
		} else if last[i].State != store.StateConfirmed {
			t.Errorf("QUEUED %s not confirmed: %s", tok, last[i])
		}
	}
	time.Sleep(500 * time.Millisecond) // late aborts and worker sends land
	for _, u := range unavailable {
		if shop.SeenBuy(u) {
			t.Errorf("buyer %s was told STORE_UNAVAILABLE but the shop got their buy (orders: %v)", u, rqOrdersOf(shop, u))
		}
	}
	k := rqWantStock(t, opsStore(t, p.Cfg), a)
	if int64(len(shop.Orders())) != k.Confirmed || k.Pending != 0 {
		t.Errorf("shop orders %d, status %+v: want orders == confirmed, nothing pending", len(shop.Orders()), k)
	}
	t.Logf("%d unavailable, %d queued, status %+v", len(unavailable), len(toks), k)
}

func rqOrdersOf(shop *e2e.Shop, user string) []string {
	var out []string
	for tok, o := range shop.Orders() {
		if o.User == user {
			out = append(out, tok)
		}
	}
	return out
}

// TestRedTeamQueueDurableReplicaFlaps: queue mode with durable winners
// (refuse), the workers running, 40 buyers in parallel while the replica is
// stopped, resumed and stopped again. README "Durable winners": a buyer
// told STORE_UNAVAILABLE holds nothing (no order, no unit); a QUEUED buyer
// ends confirmed (its reservation was on the replica before its 202; a
// worker whose own wait fails leaves it pending for its next delivery,
// decisions §56; before, it released it, not_durable); the shop never
// holds an order Redis does not count as confirmed; stock adds up; the
// refused buyers can buy again once the replica runs.
func TestRedTeamQueueDurableReplicaFlaps(t *testing.T) {
	if testing.Short() {
		t.Skip("replica stops timed against a spike: in the plain pass (make test), not under -race")
	}
	const n = 40
	m := redistest.Start(t)
	rep := redistest.StartReplica(t, m)
	shop := e2e.StartShop(t)
	timeout := redistest.TimeoutScale * 150 * time.Millisecond
	p := rqProxy(t, e2e.Options{Redis: []string{m.Addr}, ShopURL: shop.URL,
		RedisExtra: []string{"durable_winners: { replicas: 1, timeout: " + timeout.String() + ", on_timeout: refuse }"},
		Activities: []e2e.Activity{{ID: "rqd", Stock: 60, Shards: 2, Mode: "queue"}}},
		func(c *config.Config) { c.Activities[0].Queue.Workers = 8; c.Activities[0].Queue.Rate = 1000 })
	a := p.Activity(t, "rqd")
	p.StartQueue(t)

	var mu sync.Mutex
	answers := map[string]e2e.Resp{}
	var wg sync.WaitGroup
	stopFlap := make(chan struct{})
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		for i := 0; ; i++ {
			select {
			case <-stopFlap:
				rep.Resume(t)
				return
			default:
			}
			if i%2 == 0 {
				rep.Pause(t)
			} else {
				rep.Resume(t)
			}
			time.Sleep(time.Duration(150+150*((i+1)%2)) * time.Millisecond) // stopped 300 ms, running 150 ms
		}
	}()
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("d%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i*25) * time.Millisecond)
			got := e2e.Buy(p.Addr, "rqd", u)
			mu.Lock()
			answers[u] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stopFlap)
	<-flapped

	var toks []string
	codes := map[string]int{}
	for u, r := range answers {
		codes[r.Code]++
		switch r.Code {
		case "QUEUED":
			toks = append(toks, r.Token())
		case "STORE_UNAVAILABLE", "SOLD_OUT":
		default:
			t.Errorf("%s: %d %s (%v)", u, r.Status, r.Body, r.Err)
		}
	}
	last := rqAwaitSettled(p.Addr, toks, 6*time.Second)
	reasons := map[string]int{}
	for i, tok := range toks {
		if !last[i].settled() {
			t.Errorf("QUEUED %s never settled: %s", tok, last[i])
		} else if last[i].State != store.StateConfirmed {
			t.Errorf("QUEUED %s not confirmed: %s", tok, last[i])
		}
		reasons[last[i].State+"/"+last[i].Reason]++
	}
	for u, r := range answers {
		if r.Code == "STORE_UNAVAILABLE" && shop.SeenBuy(u) {
			t.Errorf("buyer %s told STORE_UNAVAILABLE reached the shop (orders %v)", u, rqOrdersOf(shop, u))
		}
	}
	host := opsStore(t, p.Cfg)
	k := rqWantStock(t, host, a)
	if int64(len(shop.Orders())) != k.Confirmed || k.Pending != 0 {
		t.Errorf("shop orders %d, status %+v: want orders == confirmed, nothing pending", len(shop.Orders()), k)
	}
	// The refused buyers hold nothing: with the replica running they are queued.
	for u, r := range answers {
		if r.Code != "STORE_UNAVAILABLE" {
			continue
		}
		var again e2e.Resp
		for try := 0; try < 50; try++ {
			if again = e2e.Buy(p.Addr, "rqd", u); again.Code != "STORE_UNAVAILABLE" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if again.Code != "QUEUED" && again.Code != "SOLD_OUT" {
			t.Errorf("refused buyer %s buying again: %d %s", u, again.Status, again.Body)
		}
	}
	t.Logf("answers %v; queued ended %v; status %+v", codes, reasons, k)
	if codes["STORE_UNAVAILABLE"] == 0 || codes["QUEUED"] == 0 {
		// Every invariant above held; only the scenario did not happen
		// (the replica's stops missed every buyer's wait: timing under a
		// loaded machine, seen once in .ci/run). Inconclusive, not failed.
		t.Skipf("answers %v: the replica's stops did not bite the buyers' waits this run (the checks above held)", codes)
	}
}

// TestRedTeamQueueSpilledBundleIsSent: a sync activity that sells bundles,
// upstream.max_inflight 1 with overflow: queue. One single buy holds the
// shop's only slot; a bundle winner then finds no room. It was answered
// 202 QUEUED and never sent nor released (the workers send single buys).
// Now a bundle is never queued: 503 BUSY with its units back; were it
// queued, the workers would have to settle it (SPEC §9: a QUEUED buyer ends
// confirmed or released with a reason); stock of every SKU adds up.
func TestRedTeamQueueSpilledBundleIsSent(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		UpstreamExtra: []string{"max_inflight: 1", "overflow: queue"},
		Activities: []e2e.Activity{{ID: "rqb", Shards: 2, PerUserLimit: 3,
			BundleRoute: bundleRoute, SKUs: []config.SKU{{ID: "a", Stock: 5}, {ID: "b", Stock: 5}}}}}, nil)
	p.StartQueue(t)
	release := shop.Hang("holder")
	defer release()
	held := make(chan e2e.Resp, 1)
	go func() {
		held <- e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rqb/a/buy", Header: [][2]string{{"X-User-Id", "holder"}}})
	}()
	e2e.Eventually(t, 3*time.Second, "holder at the shop", func() bool { return shop.SeenBuy("holder") })
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rqb/bundle", Body: []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`),
		Header: [][2]string{{"X-User-Id", "bun"}, {"Content-Type", "application/json"}}})
	release()
	if h := <-held; h.Code != "WIN" {
		t.Fatalf("holder: %d %s", h.Status, h.Body)
	}
	if got.Code != "QUEUED" {
		// A bundle is never queued (the workers send single buys): BUSY,
		// with every item's unit back on sale.
		if got.Code != "BUSY" {
			t.Errorf("bundle with the slot taken: %d %s, want 202 QUEUED or 503 BUSY", got.Status, got.Body)
		}
		st, err := p.Store.Status(opsCtx(t), p.Activity(t, "rqb"))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range st.SKUs {
			want := int64(5)
			if k.ID == "a" {
				want = 4 // the holder's
			}
			if !k.OK || k.Remaining != want || k.Pending != 0 {
				t.Errorf("after a BUSY bundle, sku %s: %+v, want remaining %d and nothing pending", k.ID, k, want)
			}
		}
		return
	}
	tok := got.Token()
	last := rqAwaitSettled(p.Addr, []string{tok}, 5*time.Second)[0]
	if !last.settled() {
		keys, _ := r.Node.Do("KEYS", "*rqb*log*")
		var xlen []string
		for _, key := range strings.Fields(keys) {
			n, _ := r.Node.Do("XLEN", key)
			xlen = append(xlen, key+"="+n)
		}
		t.Errorf("QUEUED bundle %s never settled in 5 s: %s; shop saw it: %v; streams %v", tok, last, shop.SeenBuy("bun"), xlen)
	}
	st, err := p.Store.Status(opsCtx(t), p.Activity(t, "rqb"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.SKUs {
		if !k.OK || k.Initial != k.Remaining+k.Pending+k.Confirmed {
			t.Errorf("sku %s: %+v", k.ID, k)
		}
	}
	t.Logf("bundle %s: %s; skus %+v", tok, last, st.SKUs)
}

// TestRedTeamQueueDrainHandsOverQueuedBuyers: SIGTERM as serve handles it
// (Drain, then the queue workers stop, then Shutdown) with 10 buyers
// queued and two of them at a slow shop. A buy during the drain is 503 BUSY
// and reserves nothing; the two in flight are settled before the workers
// stop; the 8 not yet sent stay queued (never released) and another
// instance's workers send them; in the end every QUEUED buyer is confirmed,
// shop orders == confirmed, stock adds up.
func TestRedTeamQueueDrainHandsOverQueuedBuyers(t *testing.T) {
	const n = 10
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rqt", Stock: 20, Shards: 2, Mode: "queue"}}}
	edit := func(c *config.Config) { c.Activities[0].Queue.Workers = 2; c.Activities[0].Queue.Rate = 500 }
	pa := rqProxy(t, opts, edit)
	a := pa.Activity(t, "rqt")
	var toks []string
	var releases []func()
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("t%d", i)
		releases = append(releases, shop.Hang(u))
		got := e2e.Buy(pa.Addr, "rqt", u)
		if got.Code != "QUEUED" {
			t.Fatalf("buy %s: %d %s", u, got.Status, got.Body)
		}
		toks = append(toks, got.Token())
	}
	qa := rqQueue(t, pa, "A", 0)
	e2e.Eventually(t, 3*time.Second, "two at the shop", func() bool { return len(shop.Requests()) >= 2 })

	pa.Server.Drain()
	if got := e2e.Buy(pa.Addr, "rqt", "late"); got.Code != "BUSY" || got.Status != 503 {
		t.Errorf("buy while draining: %d %s, want 503 BUSY", got.Status, got.Body)
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); qa.Stop() }()
	time.Sleep(300 * time.Millisecond)
	for _, rel := range releases {
		rel()
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("queue workers did not stop within 5 s of the shop answering")
	}
	host := opsStore(t, pa.Cfg)
	k := rqWantStock(t, host, a)
	if k.Confirmed != int64(len(shop.Orders())) || k.Released != 0 || k.Pending+k.Confirmed != n {
		t.Errorf("after A stopped: %+v, shop orders %d; want the sent ones confirmed, the rest still held, none released", k, len(shop.Orders()))
	}
	cfgB := opts.Config(t)
	edit(cfgB)
	pb := e2e.StartProxy(t, cfgB)
	pb.WaitPreheated(t, "rqt")
	rqQueue(t, pb, "B", 0)
	last := rqAwaitSettled(pb.Addr, toks, 5*time.Second)
	for i, tok := range toks {
		if last[i].State != store.StateConfirmed {
			t.Errorf("buyer %d (%s): %s, want confirmed", i, tok, last[i])
		}
	}
	k = rqWantStock(t, host, a)
	if k.Confirmed != n || len(shop.Orders()) != n || k.Pending != 0 {
		t.Errorf("end: %+v, shop orders %d; want %d confirmed", k, len(shop.Orders()), n)
	}
	if shop.SeenBuy("late") {
		t.Error("a buy refused while draining reached the shop")
	}
}

// TestRedTeamQueueBacklogBoundUnderBurst: SPEC §9, queue admission is
// bounded by backlog (503 BUSY beyond). queue.max_backlog 10 over 4
// shards, no workers, 60 buyers at once: QUEUED answers stay below
// max_backlog + shards (README), each BUSY carries Retry-After and holds
// nothing (pending == QUEUED answers == stream entries), stock adds up.
func TestRedTeamQueueBacklogBoundUnderBurst(t *testing.T) {
	const n, backlog, shards = 60, 10, 4
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := rqProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rqm", Stock: 100, Shards: shards, Mode: "queue"}}},
		func(c *config.Config) { c.Activities[0].Queue.MaxBacklog = backlog })
	a := p.Activity(t, "rqm")
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := e2e.Buy(p.Addr, "rqm", fmt.Sprintf("m%d", i))
			mu.Lock()
			defer mu.Unlock()
			codes[got.Code]++
			switch got.Code {
			case "QUEUED":
			case "BUSY":
				if got.Status != 503 || got.Header["Retry-After"] == "" {
					t.Errorf("BUSY: %d %v %s", got.Status, got.Header, got.Body)
				}
			default:
				t.Errorf("m%d: %d %s", i, got.Status, got.Body)
			}
		}()
	}
	wg.Wait()
	if codes["QUEUED"] >= backlog+shards || codes["QUEUED"] == 0 {
		t.Errorf("answers %v: QUEUED must stay below max_backlog + shards = %d", codes, backlog+shards)
	}
	host := opsStore(t, p.Cfg)
	k := rqWantStock(t, host, a)
	entries, err := host.QueueLength(opsCtx(t), "rqm", e2e.SKU, shards)
	if err != nil {
		t.Fatal(err)
	}
	if k.Pending != int64(codes["QUEUED"]) || entries != int64(codes["QUEUED"]) || k.Released != 0 {
		t.Errorf("answers %v; status %+v; stream entries %d: want pending == entries == QUEUED, nothing released", codes, k, entries)
	}
	t.Logf("answers %v; status %+v", codes, k)
}

// rqSlowShop is a shop that counts buys in flight (peak) and slows down
// from fast to slow once it has taken slowAfter orders; every buy gets an
// order (one per token) and /internal/orders answers verify.
type rqSlowShop struct {
	URL            string
	mu             sync.Mutex
	inflight, peak int
	orders         map[string]string // token -> user
	fast, slow     time.Duration
	slowAfter      int
}

func rqStartSlowShop(t *testing.T, fast, slow time.Duration, slowAfter int) *rqSlowShop {
	s := &rqSlowShop{orders: map[string]string{}, fast: fast, slow: slow, slowAfter: slowAfter}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/internal/orders" {
			s.mu.Lock()
			_, ok := s.orders[r.URL.Query().Get("token")]
			s.mu.Unlock()
			if !ok {
				http.NotFound(w, r)
			}
			return
		}
		tok := r.Header.Get("X-Seckill-Token")
		if tok == "" {
			return
		}
		s.mu.Lock()
		s.inflight++
		s.peak = max(s.peak, s.inflight)
		d := s.fast
		if len(s.orders) >= s.slowAfter {
			d = s.slow
		}
		s.mu.Unlock()
		time.Sleep(d)
		s.mu.Lock()
		s.inflight--
		s.orders[tok] = r.Header.Get("X-Seckill-User")
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"order_id":"o-%s"}`, tok[len(tok)-6:])
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// TestRedTeamQueueAdaptiveInflightShopSlows: queue mode on two instances,
// upstream.max_inflight 6 adaptive (min 2), a shop that goes from 10 ms to
// 120 ms an order after 20 orders. README "Protecting the shop": the fleet
// never has more than max_inflight in flight (queue workers take the same
// slots); every QUEUED buyer ends confirmed; shop orders == confirmed.
func TestRedTeamQueueAdaptiveInflightShopSlows(t *testing.T) {
	const n, limit = 60, 6
	r := e2e.StartRedis(t)
	shop := rqStartSlowShop(t, 10*time.Millisecond, 120*time.Millisecond, 20)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 2 * time.Second,
		UpstreamExtra: []string{"max_inflight: 6", "adaptive: true", "min_inflight: 2"},
		Activities:    []e2e.Activity{{ID: "rqa", Stock: n, Mode: "queue"}}}
	edit := func(c *config.Config) { c.Activities[0].Queue.Workers = 16; c.Activities[0].Queue.Rate = 2000 }
	p1 := rqProxy(t, opts, edit)
	cfg2 := opts.Config(t)
	edit(cfg2)
	p2 := e2e.StartProxy(t, cfg2)
	p2.WaitPreheated(t, "rqa")
	p1.StartQueue(t)
	p2.StartQueue(t)
	var mu sync.Mutex
	var toks []string
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := []string{p1.Addr, p2.Addr}[i%2]
			got := e2e.Buy(addr, "rqa", fmt.Sprintf("a%d", i))
			mu.Lock()
			defer mu.Unlock()
			if got.Code != "QUEUED" {
				t.Errorf("a%d: %d %s", i, got.Status, got.Body)
				return
			}
			toks = append(toks, got.Token())
		}()
	}
	wg.Wait()
	last := rqAwaitSettled(p1.Addr, toks, 8*time.Second)
	for i, tok := range toks {
		if last[i].State != store.StateConfirmed {
			t.Errorf("%s: %s, want confirmed", tok, last[i])
		}
	}
	k := rqWantStock(t, opsStore(t, p1.Cfg), p1.Activity(t, "rqa"))
	shop.mu.Lock()
	peak, orders := shop.peak, len(shop.orders)
	shop.mu.Unlock()
	if peak > limit {
		t.Errorf("the shop had %d orders in flight at once, max_inflight %d", peak, limit)
	}
	if int64(orders) != k.Confirmed {
		t.Errorf("shop orders %d, confirmed %d", orders, k.Confirmed)
	}
	t.Logf("peak %d, orders %d, status %+v, limit gauge %v/%v", peak, orders, k,
		p1.Gauge(p1.Metrics.InflightLimit.WithLabelValues("rqa")), p2.Gauge(p2.Metrics.InflightLimit.WithLabelValues("rqa")))
}
