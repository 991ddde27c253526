package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// bhKeyedDo sends a command to the master of its key (args[1]) as the
// cluster sees it; for set-up and inspection, never while a node is
// stopped (a stopped node would be asked and hang).
func bhKeyedDo(c *redistest.Cluster) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		if len(args) < 2 {
			return c.Do(args...)
		}
		m, err := c.MasterFor(args[1])
		if err != nil {
			return "", err
		}
		return m.Do(args...)
	}
}

type bhKeyed func(args ...string) (string, error)

func (d bhKeyed) Do(args ...string) (string, error) { return d(args...) }

// TestBHClusterDonorStall: a real 3-master cluster (placed shard tags),
// stock 50 all on shard 0 of 4 or 8 shards, two instances (redis.timeout
// 100 ms), 400 buyers homed on the other shards at once (half with an
// X-Request-Id, retried on the other instance when answered
// STORE_UNAVAILABLE / PENDING / BUSY), and only the master owning shard 0
// — the donor of every steal — stalled while the steals run (SIGSTOP short
// and long, below the cluster's node timeout; CLIENT PAUSE WRITE / ALL):
// the buyers' home shards on the other masters keep answering, the steals
// and the home shards that share the donor's master do not. Afterwards, as
// TestRV20StealStall: answers within SPEC, no held unit a client was not
// told of, every WIN an order, no token sent twice, no buyer told SOLD_OUT
// after the stall beside a late reservation of theirs; after one
// reconcile --repair nothing pending or in transit, stock adds up, orders
// == confirmed; a sweep of fresh buyers finds no unit stuck; and no unit
// was left on sale after every buyer heard SOLD_OUT unless some heard it
// during the stall (units in transit then, decisions §49) — and, since
// §54, not even then: an instance whose settles may put units back on
// sale answers STORE_UNAVAILABLE, not SOLD_OUT, until they are answered,
// so no unit may be left on sale after the wave at all (§51: 317 buyers
// told SOLD_OUT during a 1.3 s stop, 9 units back after it).
func TestBHClusterDonorStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("starts a cluster per fault")
	}
	for _, tc := range []rv20Fault{
		{"donor sigstop short after 5 steals", 0, 5, 0, rv20Stop(150 * time.Millisecond)},
		{"donor sigstop long after 20 steals", 0, 20, 0, rv20Stop(1300 * time.Millisecond)},
		{"donor pause write after 10 steals", 0, 10, 0, rv20Pause("WRITE", 500*time.Millisecond)},
		{"donor pause all after 30 steals", 0, 30, 0, rv20Pause("ALL", 500*time.Millisecond)},
	} {
		for _, shards := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { bhClusterDonorWave(t, shards, tc, false) })
		}
	}
}

// TestBHClusterHomeStall is TestBHClusterDonorStall with the other side
// of the move stalled (decisions §54): a master holding some of the
// buyers' home shards and not the donor's. Its buyers' steals from the
// donor answer, their deposits do not: the units are in transit to the
// stopped master, then in late reservations there its aborts give back
// once it wakes, and the donor runs dry meanwhile, so every flag is set
// and, before §54, every buyer heard SOLD_OUT from memory while those
// units came back on sale after the stall with nobody left asking. Since
// §54 the instance holding their settles answers STORE_UNAVAILABLE; since
// §58 the other does too, from the transit marks the first writes on every
// shard tag of the SKU (the fleet gap §54 left: it answered SOLD_OUT from
// its flags during the stall and for the few ms after it that its memory
// lags Redis). So, as in TestBHClusterDonorStall, no unit may be left on
// sale after the wave, and no buyer may be told SOLD_OUT after the stall
// beside a late reservation of theirs.
func TestBHClusterHomeStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("starts a cluster per fault")
	}
	for _, tc := range []rv20Fault{
		{"home sigstop long at the start", 0, 0, 0, rv20Stop(1300 * time.Millisecond)},
		{"home sigstop short after 1 steal", 0, 1, 0, rv20Stop(300 * time.Millisecond)},
		{"home pause all at the start", 0, 0, 0, rv20Pause("ALL", 1000*time.Millisecond)},
	} {
		for _, shards := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { bhClusterDonorWave(t, shards, tc, true) })
		}
	}
}

// bhClusterDonorWave runs the wave with the donor's master stalled, or
// (stallHome) the master of a home shard that does not hold the donor.
func bhClusterDonorWave(t *testing.T, shards int, tc rv20Fault, stallHome bool) {
	const stock, limit, users = 50, 1, 400
	const act = "bhc"
	cl := redistest.StartCluster(t, 3)
	do := bhKeyedDo(cl)
	shop := rv20StartShop(t, 100*time.Millisecond)
	o := Options{Redis: cl.Addrs(), Cluster: true, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 2 * time.Second,
		Activities:      []Activity{{ID: act, Stock: stock, PerUserLimit: limit, Shards: shards, Pending: 10 * time.Second}}}
	pa := StartProxy(t, o.Config(t))
	pb := StartProxy(t, o.Config(t))
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)
	bhOneShard(t, do, pa, act, []string{SKU}, stock, shards)
	k := pa.Store.SKUKeys(act, SKU, shards)
	donor, err := cl.MasterFor(k.Shards[0].Stock)
	if err != nil {
		t.Fatalf("donor's master: %v", err)
	}
	var onDonor []int
	for s, sk := range k.Shards {
		if m, err := cl.MasterFor(sk.Stock); err == nil && m == donor {
			onDonor = append(onDonor, s)
		}
	}
	t.Logf("donor master %s holds shards %v", donor.Addr, onDonor)
	stalled := donor
	if stallHome {
		for _, sk := range k.Shards {
			if m, err := cl.MasterFor(sk.Stock); err == nil && m != donor {
				stalled = m
				break
			}
		}
		if stalled == donor {
			t.Fatal("every shard on the donor's master")
		}
		t.Logf("stalled: home master %s", stalled.Addr)
	}
	var retries rv20Retries
	retries.watch(pa, pb)
	var moveMu sync.Mutex
	var moveAt []time.Time // when a move job (a late steal's settle) finished
	for _, p := range []*Proxy{pa, pb} {
		p.Store.Retrier().Observe(func(kind, outcome string) {
			retries.mu.Lock()
			retries.n[kind+"/"+outcome]++
			retries.mu.Unlock()
			if kind == "move" && outcome == store.RetryOK {
				moveMu.Lock()
				moveAt = append(moveAt, time.Now())
				moveMu.Unlock()
			}
		})
	}

	var names []string
	for i := 0; len(names) < users; i++ {
		if u := fmt.Sprintf("c%d", i); store.HomeShard(u, shards) != 0 {
			names = append(names, u)
		}
	}
	finals, finalAt, stalledAt, told, codes, odd := stallWave(t, stalled, pa, pb, act, names, tc.ready(shop, pa, pb, act), tc.fault)
	waitSettled(t, 10*time.Second, pa, pb)
	replied := pa.Counter(pa.Metrics.StockMoves, act) + pb.Counter(pb.Metrics.StockMoves, act)
	ran, tomb := donorMoves(t, do, k.Shards[0].Moves)
	t.Logf("answers: %v; steals ran %d (replied %v), tombstones %d; retrier jobs: %s", codes, ran, replied, tomb, &retries)
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	bhCheckTold(t, bhAudit(t, do, pa, act, []string{SKU}, shards, stock, limit), told)
	orders := shop.orderMap()
	soldOutDuring := 0
	for i, r := range finals {
		if r.Code == "WIN" || ra12Replay(r) {
			if _, ok := orders[r.Token()]; !ok {
				t.Errorf("%s told WIN with token %s: no order at the shop", names[i], r.Token())
			}
		}
		if r.Code == "SOLD_OUT" && !finalAt[i].Before(stalledAt[0]) && !finalAt[i].After(stalledAt[1]) {
			soldOutDuring++
		}
	}
	for tok, n := range shop.sends() {
		if n > 1 {
			t.Errorf("token %s sent to the shop %d times", tok, n)
		}
	}
	var soAfter []time.Duration
	for i, r := range finals {
		if r.Code == "SOLD_OUT" && finalAt[i].After(stalledAt[1]) {
			soAfter = append(soAfter, finalAt[i].Sub(stalledAt[1]))
		}
	}
	sort.Slice(soAfter, func(i, j int) bool { return soAfter[i] < soAfter[j] })
	moveMu.Lock()
	if len(moveAt) > 0 && len(soAfter) > 0 {
		t.Logf("after the stall: %d move settles, first %v last %v; %d final SOLD_OUTs, first %v median %v last %v",
			len(moveAt), moveAt[0].Sub(stalledAt[1]), moveAt[len(moveAt)-1].Sub(stalledAt[1]), len(soAfter), soAfter[0], soAfter[len(soAfter)/2], soAfter[len(soAfter)-1])
	}
	moveMu.Unlock()
	// A home master's stall: the instance that answered may hold none of
	// the settles, and its memory lags Redis for a few ms after the master
	// wakes; a SOLD_OUT just after the stall, beside a late reservation
	// whose abort another instance sends a moment later, was §54's fleet
	// gap (soak run, 2026-12-07: 6 buyers told so 1 ms before the abort was
	// sent), logged and not failed until §58's marks closed it.
	rv20SoldOutBesidePhantoms(t, t.Errorf, bhKeyed(do), pa, act, shards, names, finals, finalAt, stalledAt)
	buy := func(p *Proxy, user, rid string) Resp { return ra12Buy(p.Addr, act, user, rid, 5*time.Second) }
	if left := pa.SKUStatus(t, act).Remaining; left > 0 {
		bhLateReservations(t, do, k, names, finals, finalAt, stalledAt)
	}
	leftAfterWave := bhSweep(t, do, pa, act, []string{SKU}, shards, buy)
	if leftAfterWave > 0 {
		// Every buyer's last answer was a win or SOLD_OUT (the others
		// asked again until the wave's end): these units were on sale
		// beside SOLD_OUTs, during the stall (units in transit, §49, §51:
		// answered STORE_UNAVAILABLE since §54 by an instance holding
		// their settles, since §58 by every instance, from its marks) or
		// after it. Should this fail with buyers told SOLD_OUT during or
		// just after the stall, look first at the marks (store
		// fleetmark.go): written only once a call timed out, so not in
		// the stall's first redis.timeout; lapsed fleetMarkTTL after the
		// last renewal.
		t.Errorf("%d units left on sale after every buyer was told SOLD_OUT (%d of them during the stall, %d after it)", leftAfterWave, soldOutDuring, len(soAfter))
	}
	if left := bhAfterRepair(t, do, pa, act, []string{SKU}, shards, stock, limit, orders, shop); left != 0 {
		t.Errorf("%d units still on sale after the sweep", left)
	}
	t.Logf("units left on sale after the wave %d (swept); buyers told SOLD_OUT during the stall %d", leftAfterWave, soldOutDuring)
}

func bhMs(ms string) string {
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n).Format("05.000")
}

// bhLateReservations logs every late reservation (released store_timeout)
// with its buyer's final answer: its release stamp is when the abort was
// sent, which on a stalled node is before it ran.
func bhLateReservations(t *testing.T, do func(args ...string) (string, error), k *store.SKUKeys, names []string, finals []Resp, finalAt []time.Time, stalled [2]time.Time) {
	t.Helper()
	idx := map[string]int{}
	for i, n := range names {
		idx[n] = i
	}
	for s, sk := range k.Shards {
		raw, _ := do("HGETALL", sk.Res)
		f := rtLines(raw)
		for j := 1; j < len(f); j += 2 {
			parts := strings.Split(f[j], "|")
			if len(parts) < 7 || parts[0] != "x" || parts[2] == "0" || parts[5] != "store_timeout" {
				continue
			}
			i, ok := idx[parts[1]]
			if !ok {
				continue
			}
			t.Logf("late reservation %s of %s (shard %d, rid %v): released %s; final %s %s at %s; stall %s-%s",
				f[j-1], parts[1], s, i%2 == 0, bhMs(parts[6]), finals[i].Code, finals[i].Str("code"), finalAt[i].Format("05.000"), stalled[0].Format("05.000"), stalled[1].Format("05.000"))
		}
	}
}
