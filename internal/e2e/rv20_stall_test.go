package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// The red-team round rv20 aims Redis stalls at the two places rv19 left
// out: a steal between its two steps (the units left the donor shard and
// are not on the buyer's home shard yet), and queue mode (buyers told
// QUEUED, sent later by the workers of two instances).

// rv20Fault is one way Redis stops answering for a while.
type rv20Fault struct {
	name string
	// The fault starts once the proxies have answered wins WIN or QUEUED,
	// their steals have moved stock moves times, and the shop has received
	// sent buys (whichever are set).
	wins  int
	moves float64
	sent  int64
	fault func(t *testing.T, node *redistest.Server)
}

// ready is stallWave's trigger for f: its wins, moves and shop buys reached.
func (f rv20Fault) ready(shop *rv20Shop, pa, pb *Proxy, act string) func(won int) bool {
	return func(won int) bool {
		moved := pa.Counter(pa.Metrics.StockMoves, act) + pb.Counter(pb.Metrics.StockMoves, act)
		return won >= f.wins && shop.received.Load() >= f.sent && (f.moves == 0 || moved >= f.moves)
	}
}

func rv20Pause(mode string, d time.Duration) func(t *testing.T, node *redistest.Server) {
	return func(t *testing.T, node *redistest.Server) {
		_, _ = node.Do("CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), mode)
		time.Sleep(d)
	}
}

func rv20Stop(d time.Duration) func(t *testing.T, node *redistest.Server) {
	return func(t *testing.T, node *redistest.Server) {
		node.Pause(t)
		time.Sleep(d)
		node.Resume(t)
	}
}

func rv20Sleep(d time.Duration) func(t *testing.T, node *redistest.Server) {
	return func(t *testing.T, node *redistest.Server) {
		_, _ = node.Do("DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	}
}

// rv20Shop is ra12Shop counting every buy it receives per token: a token
// sent twice is a buyer forwarded twice.
type rv20Shop struct {
	*ra12Shop
	sentMu sync.Mutex
	sent   map[string]int
}

func rv20StartShop(t *testing.T, latency time.Duration) *rv20Shop {
	s := &rv20Shop{ra12Shop: &ra12Shop{orders: map[string]string{}, users: map[string]int{}}, sent: map[string]int{}}
	s.latency.Store(int64(latency))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.Header.Get("X-Seckill-Token"); tok != "" && r.URL.Path != "/internal/orders" {
			s.sentMu.Lock()
			s.sent[tok]++
			s.sentMu.Unlock()
		}
		s.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *rv20Shop) sends() map[string]int {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	out := make(map[string]int, len(s.sent))
	for k, v := range s.sent {
		out[k] = v
	}
	return out
}

// rv20Retries counts the background settlements (retrier jobs) of p by
// kind and outcome: "move" and "abort" jobs carrying a move are the units
// a stall caught in transit.
type rv20Retries struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rv20Retries) watch(ps ...*Proxy) {
	r.n = map[string]int{}
	for _, p := range ps {
		p.Store.Retrier().Observe(func(kind, outcome string) {
			r.mu.Lock()
			r.n[kind+"/"+outcome]++
			r.mu.Unlock()
		})
	}
}

func (r *rv20Retries) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.n))
	for k := range r.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for _, k := range keys {
		out += fmt.Sprintf("%s=%d ", k, r.n[k])
	}
	return out
}

// rv20OneShard moves every unit of act's SKU onto shard 0, as if every
// steal towards it had landed and been forgotten: each shard keeps
// i = r + p + c, Σi stays the initial stock, the other shards are marked
// out. Every buyer homed elsewhere must then steal from shard 0.
func rv20OneShard(t *testing.T, node *redistest.Server, p *Proxy, act string, stock int64, shards int) {
	t.Helper()
	k := p.Store.SKUKeys(act, SKU, shards)
	for s, sk := range k.Shards {
		n := int64(0)
		if s == 0 {
			n = stock
		}
		if _, err := node.Do("HSET", sk.Stock, "i", strconv.FormatInt(n, 10), "r", strconv.FormatInt(n, 10)); err != nil {
			t.Fatalf("HSET %s: %v", sk.Stock, err)
		}
		if s > 0 {
			pt, err := node.Do("PTTL", sk.Stock)
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if _, err := node.Do("SET", sk.Out, "1", "PX", pt); err != nil {
				t.Fatalf("SET %s: %v", sk.Out, err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // the instances' cached flags invalidated
}

// TestRV20StealStall: stock 50 all on shard 0 of 4 or 8 shards, two
// instances (redis.timeout 100 ms), 400 buyers homed on the other shards
// at once (half with an X-Request-Id, retried on the other instance when
// answered STORE_UNAVAILABLE / PENDING / BUSY): every win is a steal from
// shard 0 and a deposit on the buyer's home shard, and Redis stalls while
// the steals run (SIGSTOP past redis.timeout and past the client's write
// timeout, CLIENT PAUSE WRITE / ALL, DEBUG SLEEP), catching moves between
// their steal and their deposit. Afterwards, as rv19: no held unit a
// client was not told of, every WIN an order; after one reconcile
// --repair nothing pending or in transit, stock adds up per shard and per
// SKU, shop orders == confirmed, nobody above the limit.
func TestRV20StealStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("several seconds per fault")
	}
	for _, tc := range []rv20Fault{
		{"sigstop short after 5 steals", 0, 5, 0, rv20Stop(150 * time.Millisecond)},
		{"sigstop long after 20 steals", 0, 20, 0, rv20Stop(1300 * time.Millisecond)},
		{"pause write after 10 steals", 0, 10, 0, rv20Pause("WRITE", 500*time.Millisecond)},
		{"pause all after 30 steals", 0, 30, 0, rv20Pause("ALL", 500*time.Millisecond)},
		{"debug sleep after 40 steals", 0, 40, 0, rv20Sleep(400 * time.Millisecond)},
	} {
		for _, shards := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { rv20StealWave(t, shards, tc) })
		}
	}
}

func rv20StealWave(t *testing.T, shards int, tc rv20Fault) {
	const stock, limit, users = 50, 1, 400
	const act = "rv20s"
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := rv20StartShop(t, 100*time.Millisecond)
	o := Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 2 * time.Second,
		Activities:      []Activity{{ID: act, Stock: stock, PerUserLimit: limit, Shards: shards, Pending: 10 * time.Second}}}
	pa := StartProxy(t, o.Config(t))
	pb := StartProxy(t, o.Config(t))
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)
	rv20OneShard(t, node, pa, act, stock, shards)
	var retries rv20Retries
	retries.watch(pa, pb)

	var names []string
	for i := 0; len(names) < users; i++ {
		if u := fmt.Sprintf("s%d", i); store.HomeShard(u, shards) != 0 {
			names = append(names, u)
		}
	}
	finals, finalAt, stalled, told, codes, odd := stallWave(t, node, pa, pb, act, names, tc.ready(shop, pa, pb, act), tc.fault)
	waitSettled(t, 10*time.Second, pa, pb)
	// The donor's moves: every steal that ran (home >= 0) and every
	// tombstone left by a settle that came first (home -1). Steals that
	// ran beyond the ones whose reply came back ran late: their units were
	// in transit until a settle or an abort deposited them.
	replied := pa.Counter(pa.Metrics.StockMoves, act) + pb.Counter(pb.Metrics.StockMoves, act)
	ran, tomb := donorMoves(t, node.Do, pa.Store.SKUKeys(act, SKU, shards).Shards[0].Moves)
	t.Logf("answers: %v; steals ran %d (replied %v), tombstones %d; retrier jobs: %s", codes, ran, replied, tomb, &retries)
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	before := pa.SKUStatus(t, act)
	rv20CheckTold(t, node, act, stock, limit, told)
	orders := shop.orderMap()
	wins := 0
	for i, r := range finals {
		if r.Code == "WIN" || ra12Replay(r) {
			wins++
			if _, ok := orders[r.Token()]; !ok {
				t.Errorf("%s told WIN with token %s: no order at the shop", names[i], r.Token())
			}
		}
	}
	for tok, n := range shop.sends() {
		if n > 1 {
			t.Errorf("token %s sent to the shop %d times", tok, n)
		}
	}
	rv20SoldOutBesidePhantoms(t, t.Errorf, node, pa, act, shards, names, finals, finalAt, stalled)
	afterRepair(t, node, pa, act, stock, limit, orders, shop)
	t.Logf("final wins %d; before reconcile %+v", wins, before)
}

// stallWave runs the buyers of names against pa and pb at once, and fault
// once ready (given the WIN or QUEUED answers so far) says so.
// A buyer answered STORE_UNAVAILABLE, PENDING or BUSY asks again (the
// other instance every other time) until 6 s have passed. It returns each
// buyer's final answer, every token a client was told (with the codes it
// was told with), the answers by code and any answer outside SPEC.
func stallWave(t *testing.T, node *redistest.Server, pa, pb *Proxy, act string, names []string, ready func(won int) bool, fault func(t *testing.T, node *redistest.Server)) ([]Resp, []time.Time, [2]time.Time, map[string]map[string]bool, map[string]int, []string) {
	buy := func(p *Proxy, user, rid string) Resp { return ra12Buy(p.Addr, act, user, rid, 5*time.Second) }
	return stallWaveBy(t, node, pa, pb, names, buy, ready, fault)
}

// stallWaveBy is stallWave with each request sent by buy (a bundle, a
// buy of another SKU).
func stallWaveBy(t *testing.T, node *redistest.Server, pa, pb *Proxy, names []string, buy func(p *Proxy, user, rid string) Resp, ready func(won int) bool, fault func(t *testing.T, node *redistest.Server)) ([]Resp, []time.Time, [2]time.Time, map[string]map[string]bool, map[string]int, []string) {
	users := len(names)
	var mu sync.Mutex
	told := map[string]map[string]bool{} // token -> the codes it was told with
	codes := map[string]int{}
	var won atomic.Int64
	finals := make([]Resp, users)
	finalAt := make([]time.Time, users) // when finals[i] was answered
	var odd []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	deadline := time.Now().Add(6 * time.Second)
	for j := 0; j < users+users/5; j++ {
		i, second := j, false
		if j >= users {
			i, second = (j-users)*5, true // a second request of the same user, another request id
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			user, rid := names[i], ""
			if i%2 == 0 || second {
				rid = fmt.Sprintf("rid-%d-%v", i, second)
			}
			for n := 0; time.Now().Before(deadline); n++ {
				if second {
					n++
				}
				p := pa
				if (i+n)%2 == 1 {
					p = pb
				}
				r := buy(p, user, rid)
				mu.Lock()
				codes[fmt.Sprintf("%s/%d", r.Code, r.Status)]++
				if tok := r.Token(); tok != "" {
					if told[tok] == nil {
						told[tok] = map[string]bool{}
					}
					told[tok][r.Code] = true
				}
				if r.Code == "WIN" || r.Code == "QUEUED" {
					won.Add(1)
				}
				if r.Err == nil && !ra12SpecCode(r) {
					odd = append(odd, fmt.Sprintf("%s: %d %s", user, r.Status, r.Body))
				}
				if !second || r.Code == "WIN" || ra12Replay(r) || r.Code == "QUEUED" {
					finals[i], finalAt[i] = r, time.Now()
				}
				mu.Unlock()
				switch r.Code {
				case "STORE_UNAVAILABLE", "PENDING", "BUSY":
					time.Sleep(60 * time.Millisecond)
					continue
				}
				if r.Err != nil {
					continue
				}
				return
			}
		}()
	}
	faulted := make(chan struct{})
	var stalled [2]time.Time // when the fault began and ended
	close(start)
	go func() {
		defer close(faulted)
		for !ready(int(won.Load())) {
			if time.Now().After(deadline) {
				// Never reached (e.g. wins without a counted steal: units
				// an abort gave back onto a home shard after a call that
				// timed out on a loaded box); the wave is over, harmless.
				t.Logf("the fault's trigger was not reached within the wave")
				break
			}
			time.Sleep(500 * time.Microsecond)
		}
		stalled[0] = time.Now()
		fault(t, node)
		stalled[1] = time.Now()
	}()
	wg.Wait()
	<-faulted
	return finals, finalAt, stalled, told, codes, odd
}

// rv20SoldOutBesidePhantoms fails for a buyer whose final answer was
// SOLD_OUT, given after the stall, while a reservation of theirs still held
// a unit: a reserve that ran after its caller was told STORE_UNAVAILABLE
// ("nothing is held", SPEC §9) and that abort.lua released (reason
// store_timeout) only after the SOLD_OUT. Once released, that unit was back
// on sale after the buyer (and maybe everybody) had been told there was
// none. Before the fix: up to 22 of 50 units unsold, 400 buyers told
// SOLD_OUT. A SOLD_OUT given while Redis was stalled (stalled) cannot have
// been given beside a held unit (no script ran): its unit was in transit,
// taken from shard 0 by a steal whose deposit was stalled, and landed
// after the stall (README known limit); those are counted, not failed.
//
// node is the single node, or anything that sends a command to the node
// of its key (a cluster: keyedDo). It returns the late reservations, the
// buyers told SOLD_OUT beside theirs after the stall (reported through
// fail: t.Errorf, or t.Logf where the case is a documented gap) and during
// it.
func rv20SoldOutBesidePhantoms(t *testing.T, fail func(format string, args ...any), node interface {
	Do(args ...string) (string, error)
}, p *Proxy, act string, shards int, names []string, finals []Resp, finalAt []time.Time, stalled [2]time.Time) (late, bad, inTransit int) {
	t.Helper()
	releasedAt := map[string][]int64{} // user -> release ms of their late reservations
	for _, sk := range p.Store.SKUKeys(act, SKU, shards).Shards {
		raw, err := node.Do("HGETALL", sk.Res)
		if err != nil {
			t.Fatalf("HGETALL %s: %v", sk.Res, err)
		}
		f := rtLines(raw)
		for j := 1; j < len(f); j += 2 {
			parts := strings.Split(f[j], "|")
			if len(parts) < 7 || parts[0] != "x" || parts[2] == "0" || parts[5] != "store_timeout" {
				continue
			}
			ms, _ := strconv.ParseInt(parts[6], 10, 64)
			releasedAt[parts[1]] = append(releasedAt[parts[1]], ms)
		}
	}
	for _, v := range releasedAt {
		late += len(v)
	}
	for i, r := range finals {
		if r.Code != "SOLD_OUT" {
			continue
		}
		for _, ms := range releasedAt[names[i]] {
			if finalAt[i].UnixMilli() >= ms {
				continue
			}
			if !finalAt[i].After(stalled[1]) {
				inTransit++
				continue
			}
			bad++
			if bad <= 12 {
				fail("%s (request id %v) told SOLD_OUT at %s, after the stall, while their late reservation held a unit until %s (released store_timeout %d ms later)",
					names[i], i%2 == 0, finalAt[i].Format("15:04:05.000"), time.UnixMilli(ms).Format("15:04:05.000"), ms-finalAt[i].UnixMilli())
			}
		}
	}
	t.Logf("late reservations released by their aborts: %d; buyers told SOLD_OUT before theirs was released: %d after the stall, %d during it (their unit in transit)", late, bad, inTransit)
	return late, bad, inTransit
}

// rv20CheckTold audits Redis (rtAudit: per shard i = r + p + c, counters
// == records, users hash == records, nobody above limit) and fails for a
// held reservation whose token no client was told.
func rv20CheckTold(t *testing.T, node *redistest.Server, act string, stock, limit int64, told map[string]map[string]bool) map[string]string {
	t.Helper()
	toldField := map[string]bool{}
	for tok := range told {
		if tk, err := store.ParseToken(tok); err == nil {
			toldField[tk.Field()] = true
		}
	}
	states := rtAudit(t, node.Addr, act, stock, limit)
	for field, st := range states {
		if st != "x" && !toldField[field] {
			t.Errorf("reservation %s is %s but no client was told its token (a STORE_UNAVAILABLE that holds)", field, st)
		}
	}
	return states
}

// TestRV20QueueStall: queue mode, stock 50, per_user_limit 1, two
// instances each running queue workers (4 workers, ClaimIdle 30 s, the
// shop 50 ms per buy, verify configured), 400 buyers at once on 1 or 4
// shards, and Redis stalled while buyers are queued and workers claim,
// send and confirm (SIGSTOP short and past the client's write timeout,
// CLIENT PAUSE WRITE / ALL, DEBUG SLEEP, late in the drain too). Afterwards:
// every buyer told QUEUED (or PENDING with a token) ends confirmed with
// exactly one buy at the shop — the shop takes every buy, so a released
// one was released without the shop refusing it — no token is sent
// twice, no user is told two tokens, no held unit a client was not told
// of; every told token settles within 20 s of the wave (well before
// ClaimIdle: nothing waits for a takeover); after one reconcile --repair
// stock adds up, orders == confirmed.
func TestRV20QueueStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("several seconds per fault")
	}
	for _, tc := range []struct {
		rv20Fault
		shards int
	}{
		{rv20Fault{"sigstop short after 10 queued", 10, 0, 0, rv20Stop(150 * time.Millisecond)}, 4},
		{rv20Fault{"sigstop long after 25 queued", 25, 0, 0, rv20Stop(1300 * time.Millisecond)}, 1},
		{rv20Fault{"pause write after 5 sent", 0, 0, 5, rv20Pause("WRITE", 600*time.Millisecond)}, 4},
		{rv20Fault{"debug sleep after 20 sent", 0, 0, 20, rv20Sleep(500 * time.Millisecond)}, 1},
		{rv20Fault{"sigstop long after 35 sent", 0, 0, 35, rv20Stop(1300 * time.Millisecond)}, 4},
		{rv20Fault{"pause all after 45 queued", 45, 0, 0, rv20Pause("ALL", 800*time.Millisecond)}, 1},
	} {
		t.Run(fmt.Sprintf("%s/shards %d", tc.name, tc.shards), func(t *testing.T) { rv20QueueWave(t, tc.shards, tc.rv20Fault) })
	}
}

func rv20QueueWave(t *testing.T, shards int, tc rv20Fault) {
	const stock, limit, users = 50, 1, 400
	const act = "rv20q"
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := rv20StartShop(t, 50*time.Millisecond)
	o := Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 700 * time.Millisecond,
		Activities:      []Activity{{ID: act, Stock: stock, PerUserLimit: limit, Shards: shards, Mode: "queue", Pending: 10 * time.Second}}}
	var ps []*Proxy
	for i := 0; i < 2; i++ {
		cfg := o.Config(t)
		cfg.Activities[0].Queue.Workers = 4
		cfg.Activities[0].Queue.Rate = 200
		ps = append(ps, StartProxy(t, cfg))
	}
	pa, pb := ps[0], ps[1]
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)
	var retries rv20Retries
	retries.watch(pa, pb)
	for i, p := range ps {
		// ClaimIdle as serve's default would be, about: 30 s and more.
		// Entries a worker was delivered during the stall and never
		// handled waited for a takeover after it (20 of 50 QUEUED buyers
		// unsent 20 s after the wave) until red team rv20.
		q := reservation.NewQueue(p.Store, p.Metrics, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), reservation.QueueOptions{
			Consumer: fmt.Sprintf("rv20-%d", i), Inflight: p.Server.Inflight(), Hold: p.Pipeline.ClockProblem,
			ClaimIdle: 30 * time.Second, Poll: 50 * time.Millisecond,
		})
		q.Start(p.Cfg)
		t.Cleanup(q.Stop)
	}
	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
	}
	finals, finalAt, stalled, told, codes, odd := stallWave(t, node, pa, pb, act, names, tc.ready(shop, pa, pb, act), tc.fault)
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	// Every token a client was told of ends confirmed or released.
	a := pa.Activity(t, act)
	final := map[string]store.Reservation{}
	waveEnd := time.Now()
	settled := func() bool {
		all := true
		for tok := range told {
			if r, ok := final[tok]; ok && (r.State == store.StateConfirmed || r.State == store.StateReleased) {
				continue
			}
			tk, err := store.ParseToken(tok)
			if err != nil {
				t.Fatalf("token %q: %v", tok, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, ok, err := pa.Store.Lookup(ctx, tk, a.Shards)
			cancel()
			if err == nil && ok {
				final[tok] = r
			}
			if err != nil || !ok || (r.State != store.StateConfirmed && r.State != store.StateReleased) {
				all = false
			}
		}
		return all
	}
	// Within 20 s of the wave, well before ClaimIdle: nothing waits for a
	// takeover. CLIENT PAUSE ALL was allowed the takeover until qst found
	// why one worker round (4 entries) waited for it in ~2% of runs: the
	// lost XREADGROUP ran after the worker's re-read, over the other of the
	// client's two connections (docs/decisions.md §49; reservation
	// TestQueueReReadsOwnEntriesDeliveredLate). The worker now reads its
	// own entries back twice; 450 runs of this subtest after that, none
	// waited.
	within := 20 * time.Second
	for deadline := time.Now().Add(within); !settled(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			for tok, how := range told {
				if r := final[tok]; r.State != store.StateConfirmed && r.State != store.StateReleased {
					t.Errorf("told %v %s: still %q (entry %q, stamp %d ms ago, shop saw it %d times) %v after the wave",
						how, tok, r.State, r.QueueEntry, time.Now().UnixMilli()-r.CreatedMs, shop.sends()[tok], within)
				}
			}
			for _, sk := range pa.Store.SKUKeys(act, SKU, shards).Shards {
				xp, _ := node.Do("XPENDING", sk.Log, store.QueueGroup, "-", "+", "100") // id, consumer, idle, deliveries
				xl, _ := node.Do("XLEN", sk.Log)
				xc, _ := node.Do("XINFO", "CONSUMERS", sk.Log, store.QueueGroup)
				t.Logf("%s: XLEN %s, XPENDING %q, consumers %q", sk.Log, xl, xp, xc)
			}
			t.Logf("clock problems: a %q, b %q", pa.Pipeline.ClockProblem(), pb.Pipeline.ClockProblem())
			t.FailNow()
		}
	}
	settledAfter := time.Since(waveEnd)
	waitSettled(t, 10*time.Second, pa, pb)
	t.Logf("every told token settled %v after the wave", settledAfter.Round(time.Millisecond))
	t.Logf("answers: %v; retrier jobs: %s; queue settlements a %v / b %v", codes, &retries,
		pa.Counter(pa.Metrics.Settlements, "queue_confirm", "OK"), pb.Counter(pb.Metrics.Settlements, "queue_confirm", "OK"))
	sends := shop.sends()
	orders := shop.orderMap()
	perUser := map[string]map[string]bool{}
	phantoms := 0
	for tok, how := range told {
		r := final[tok]
		if perUser[r.User] == nil {
			perUser[r.User] = map[string]bool{}
		}
		perUser[r.User][tok] = true
		switch {
		case r.State == store.StateReleased && !how["QUEUED"] && sends[tok] == 0 && r.Reason == "store_timeout":
			// A late reserve of a buyer told STORE_UNAVAILABLE, shown to
			// their repeat as PENDING before its abort released it (store
			// TestStallRetryElsewhereKeepsLimit): never QUEUED, never sent.
			phantoms++
		case r.State == store.StateReleased && sends[tok] == 0:
			t.Errorf("%s: token %s (told %v) released (%s) and never sent to the shop", r.User, tok, how, r.Reason)
		case r.State == store.StateReleased:
			t.Errorf("%s: token %s (told %v) released (%s) though the shop took it", r.User, tok, how, r.Reason)
		case r.State == store.StateConfirmed && orders[tok] == "":
			t.Errorf("%s: token %s (told %v) confirmed, no order at the shop", r.User, tok, how)
		}
	}
	for user, toks := range perUser {
		held := 0
		for tok := range toks {
			if final[tok].State != store.StateReleased {
				held++
			}
		}
		if int64(held) > limit {
			t.Errorf("%s told %d tokens that hold: %v", user, held, toks)
		}
	}
	twice := 0
	for tok, n := range sends {
		if n > 1 {
			twice++
			t.Errorf("token %s (told %v) sent to the shop %d times", tok, told[tok], n)
		}
		if told[tok] == nil {
			t.Errorf("token %s sent to the shop, told to no client", tok)
		}
	}
	rv20CheckTold(t, node, act, stock, limit, told)
	rv20SoldOutBesidePhantoms(t, t.Errorf, node, pa, act, shards, names, finals, finalAt, stalled)
	afterRepair(t, node, pa, act, stock, limit, orders, shop)
	t.Logf("told tokens %d (phantoms shown as PENDING %d), shop sends %d (tokens sent twice %d), orders %d", len(told), phantoms, len(sends), twice, len(orders))
}

// donorMoves counts a donor shard's moves hash (key, read with do): steals
// that ran (home >= 0) and tombstones a settle left first (home -1).
func donorMoves(t *testing.T, do func(args ...string) (string, error), key string) (ran, tomb int) {
	t.Helper()
	raw, err := do("HGETALL", key)
	if err != nil {
		t.Fatalf("HGETALL moves: %v", err)
	}
	f := rtLines(raw)
	for j := 1; j < len(f); j += 2 {
		if strings.HasPrefix(f[j], "-1|") {
			tomb++
		} else {
			ran++
		}
	}
	return ran, tomb
}
