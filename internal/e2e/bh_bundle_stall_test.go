package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team bh: the two places decisions §49 left open. Bundles
// (lua/bundle.lua set no holders bit, so a bundle buyer's late bundle could
// sit beside a SOLD_OUT answered from memory), and a real cluster with only
// the node of the donor shard stalled while steals run.

const bhBundleRoute = `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`

// bhBundleBuy asks p for one unit of every SKU of skus as one bundle.
// Bundles take no request id (README: ignored on a bundle route): rid is
// sent all the same, so the wave is stallWave's.
func bhBundleBuy(act string, skus []string) func(p *Proxy, user, rid string) Resp {
	var parts []string
	for _, s := range skus {
		parts = append(parts, fmt.Sprintf(`{"sku":%q,"qty":1}`, s))
	}
	body := []byte(`{"items":[` + strings.Join(parts, ",") + `]}`)
	return func(p *Proxy, user, rid string) Resp {
		h := [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}}
		if rid != "" {
			h = append(h, [2]string{"X-Request-Id", rid})
		}
		return Do(nil, p.Addr, Req{URI: "/api/seckill/" + act + "/bundle", Body: body, Header: h, Timeout: 5 * time.Second})
	}
}

// bhOneShard is rv20OneShard for every SKU of skus: each SKU's units all
// on shard 0, the other shards marked out.
func bhOneShard(t *testing.T, do func(args ...string) (string, error), p *Proxy, act string, skus []string, stock int64, shards int) {
	t.Helper()
	for _, sku := range skus {
		k := p.Store.SKUKeys(act, sku, shards)
		for s, sk := range k.Shards {
			n := int64(0)
			if s == 0 {
				n = stock
			}
			if _, err := do("HSET", sk.Stock, "i", strconv.FormatInt(n, 10), "r", strconv.FormatInt(n, 10)); err != nil {
				t.Fatalf("HSET %s: %v", sk.Stock, err)
			}
			if s > 0 {
				pt, err := do("PTTL", sk.Stock)
				if err != nil {
					t.Fatalf("PTTL: %v", err)
				}
				if _, err := do("SET", sk.Out, "1", "PX", pt); err != nil {
					t.Fatalf("SET %s: %v", sk.Out, err)
				}
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // the instances' cached flags invalidated
}

// bhAudit reads every shard of act (bundles and single buys) straight
// from Redis through do (a command to the node of its key) and checks:
// per SKU shard i = r + p + c, none negative; each SKU shard's p and c
// equal the units its records hold (a bundle's record counts under each
// of its items, read from "<field>:i"); Σi per SKU never above stock;
// per user, units held == the users hash, never above limit. It returns
// every record's state by field.
func bhAudit(t *testing.T, do func(args ...string) (string, error), p *Proxy, act string, skus []string, shards int, stock, limit int64) map[string]string {
	t.Helper()
	states := map[string]string{}
	heldBy, usersUnits := map[string]int64{}, map[string]int64{}
	for s := 0; s < shards; s++ {
		sk0 := p.Store.SKUKeys(act, skus[0], shards).Shards[s]
		raw, err := do("HGETALL", sk0.Res)
		if err != nil {
			t.Fatalf("HGETALL %s: %v", sk0.Res, err)
		}
		f := rtLines(raw)
		recs := map[string]string{}
		for j := 0; j+1 < len(f); j += 2 {
			recs[f[j]] = f[j+1]
		}
		recP, recC := map[string]int64{}, map[string]int64{}
		for field, rec := range recs {
			if strings.HasSuffix(field, ":i") {
				continue
			}
			parts := strings.Split(rec, "|")
			if len(parts) < 3 {
				t.Errorf("%s: record %s %q", sk0.Res, field, rec)
				continue
			}
			states[field] = parts[0]
			if parts[0] != "p" && parts[0] != "q" && parts[0] != "c" {
				continue
			}
			q, _ := strconv.ParseInt(parts[2], 10, 64)
			heldBy[parts[1]] += q
			items := []store.BundleItem{{SKU: strings.SplitN(field, ":", 2)[0], Qty: q}}
			if strings.HasPrefix(field, store.BundleSKU+":") {
				if items, err = store.ParseItems(recs[field+":i"]); err != nil {
					t.Errorf("%s: bundle %s items %q", sk0.Res, field, recs[field+":i"])
					continue
				}
			}
			for _, it := range items {
				if parts[0] == "c" {
					recC[it.SKU] += it.Qty
				} else {
					recP[it.SKU] += it.Qty
				}
			}
		}
		for _, sku := range skus {
			key := p.Store.SKUKeys(act, sku, shards).Shards[s].Stock
			h := map[string]int64{}
			raw, err := do("HGETALL", key)
			if err != nil {
				t.Fatalf("HGETALL %s: %v", key, err)
			}
			f := rtLines(raw)
			for j := 0; j+1 < len(f); j += 2 {
				h[f[j]], _ = strconv.ParseInt(f[j+1], 10, 64)
			}
			if h["i"] != h["r"]+h["p"]+h["c"] || h["r"] < 0 || h["p"] < 0 || h["c"] < 0 {
				t.Errorf("%s: i %d != r %d + p %d + c %d", key, h["i"], h["r"], h["p"], h["c"])
			}
			if h["p"] != recP[sku] || h["c"] != recC[sku] {
				t.Errorf("%s: counters p %d c %d, records p %d c %d", key, h["p"], h["c"], recP[sku], recC[sku])
			}
		}
		raw, err = do("HGETALL", sk0.Users)
		if err != nil {
			t.Fatalf("HGETALL %s: %v", sk0.Users, err)
		}
		f = rtLines(raw)
		for j := 0; j+1 < len(f); j += 2 {
			u, _ := strconv.ParseInt(strings.SplitN(f[j+1], "|", 2)[0], 10, 64)
			usersUnits[f[j]] += u
		}
	}
	for u, n := range heldBy {
		if n > limit {
			t.Errorf("user %s holds %d units, limit %d", u, n, limit)
		}
	}
	for u := range usersUnits {
		heldBy[u] += 0
	}
	for u, n := range heldBy {
		if usersUnits[u] != n {
			t.Errorf("user %s: users hash says %d units, records %d", u, usersUnits[u], n)
		}
	}
	for _, k := range p.Status(t, act).SKUs {
		if !k.OK || k.Remaining+k.Pending+k.Confirmed != stock {
			t.Errorf("sku %s does not add up: %+v", k.ID, k)
		}
	}
	return states
}

// bhAfterRepair is afterRepair for an activity of several SKUs sold as
// bundles of one unit each: one reconcile --repair as if past
// pending_timeout, then nothing pending or in transit, every SKU's
// remaining + confirmed == stock and confirmed == the shop's orders (one
// unit of each SKU per bundle), every order a confirmed reservation. It
// returns the units left on sale (of the first SKU).
func bhAfterRepair(t *testing.T, do func(args ...string) (string, error), pa *Proxy, act string, skus []string, shards int, stock, limit int64, orders map[string]string, shop interface{ counts() (int, int) }) int64 {
	t.Helper()
	a := pa.Activity(t, act)
	ra12Reconcile(t, pa, act, time.Now().Add(a.PendingTimeout+time.Minute))
	states := bhAudit(t, do, pa, act, skus, shards, stock, limit)
	confirmed := settledStates(t, states, orders)
	n, perUser := shop.counts()
	var left int64
	for i, k := range pa.Status(t, act).SKUs {
		t.Logf("after reconcile %+v", k)
		if !k.OK || k.Pending != 0 || k.InTransit != 0 || k.Remaining+k.Confirmed != stock || k.Confirmed != int64(n) {
			t.Errorf("after reconcile: %+v, shop orders %d", k, n)
		}
		if i == 0 {
			left = k.Remaining
		}
	}
	if confirmed != n || int64(perUser)*int64(len(skus)) > limit || int64(n) > stock {
		t.Errorf("shop: %d orders (%d of one user, limit %d units), confirmed records %d", n, perUser, limit, confirmed)
	}
	return left
}

// bhCheckTold fails for a held reservation (bundle or not) whose token no
// client was told.
func bhCheckTold(t *testing.T, states map[string]string, told map[string]map[string]bool) {
	t.Helper()
	toldField := map[string]bool{}
	for tok := range told {
		if tk, err := store.ParseToken(tok); err == nil {
			toldField[tk.Field()] = true
		}
	}
	for field, st := range states {
		if st != "x" && !toldField[field] {
			t.Errorf("reservation %s is %s but no client was told its token (a STORE_UNAVAILABLE that holds)", field, st)
		}
	}
}

// TestBHBundleStall is TestRV20StealStall for bundles: SKUs a and b of 25
// units each, all on shard 0 of 4 or 8 shards, per_user_limit 2, two
// instances (redis.timeout 100 ms), 300 buyers homed on the other shards
// each asking for the bundle a:1,b:1 at once, retried on the other
// instance when answered STORE_UNAVAILABLE / PENDING / BUSY (bundles take
// no request id). Every win is two steals from shard 0 and three runs of
// bundle.lua on the buyer's home shard, and Redis stalls while they run
// (SIGSTOP, CLIENT PAUSE WRITE / ALL, DEBUG SLEEP). Afterwards: no buyer
// told SOLD_OUT after the stall while a late bundle of theirs (run after
// they were told STORE_UNAVAILABLE) still held its units; every WIN an
// order, no token sent twice, no held bundle a client was not told of;
// after one reconcile --repair nothing pending or in transit, every SKU
// adds up, orders == confirmed; and every unit sold unless a buyer was
// told SOLD_OUT during the stall (units in transit, decisions §49).
func TestBHBundleStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("several seconds per fault")
	}
	for _, tc := range []rv20Fault{
		{"no stall", 0, 0, 0, func(*testing.T, *redistest.Server) {}},
		{"sigstop short after 6 steals", 0, 6, 0, rv20Stop(150 * time.Millisecond)},
		{"sigstop long after 20 steals", 0, 20, 0, rv20Stop(1300 * time.Millisecond)},
		{"pause write after 10 steals", 0, 10, 0, rv20Pause("WRITE", 500*time.Millisecond)},
		{"pause all after 30 steals", 0, 30, 0, rv20Pause("ALL", 500*time.Millisecond)},
		{"debug sleep after 40 steals", 0, 40, 0, rv20Sleep(400 * time.Millisecond)},
	} {
		for _, shards := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { bhBundleWave(t, shards, tc) })
		}
	}
}

// TestBHBundleClusterDonorStall is TestBHBundleStall on a real 3-master
// cluster with only the master of the donor shard (shard 0: both SKUs'
// units, one hash tag) stopped or paused: bundle.lua's holders keys are
// the home shard's, one slot, and the same invariants hold.
func TestBHBundleClusterDonorStall(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("starts a cluster per fault")
	}
	for _, tc := range []rv20Fault{
		{"donor sigstop short after 6 steals", 0, 6, 0, rv20Stop(150 * time.Millisecond)},
		{"donor sigstop long after 20 steals", 0, 20, 0, rv20Stop(1300 * time.Millisecond)},
		{"donor pause write after 10 steals", 0, 10, 0, rv20Pause("WRITE", 500*time.Millisecond)},
	} {
		for _, shards := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { bhBundleWaveOn(t, shards, tc, true) })
		}
	}
}

func bhBundleWave(t *testing.T, shards int, tc rv20Fault) { bhBundleWaveOn(t, shards, tc, false) }

// bhBundleWaveOn runs the bundle wave on a single node (stalled whole) or,
// with cluster, on a 3-master cluster whose donor's master is stalled.
func bhBundleWaveOn(t *testing.T, shards int, tc rv20Fault, cluster bool) {
	const stock, limit, users = 25, 2, 300
	const act = "bhb"
	skus := []string{"a", "b"}
	var node *redistest.Server
	var cl *redistest.Cluster
	var addrs []string
	do := func(args ...string) (string, error) { return node.Do(args...) }
	if cluster {
		cl = redistest.StartCluster(t, 3)
		addrs, do = cl.Addrs(), bhKeyedDo(cl)
	} else {
		node = redistest.Start(t, "--enable-debug-command", "yes")
		addrs = []string{node.Addr}
	}
	shop := rv20StartShop(t, 100*time.Millisecond)
	o := Options{Redis: addrs, Cluster: cluster, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 2 * time.Second,
		Activities: []Activity{{ID: act, SKUs: []config.SKU{{ID: "a", Stock: stock}, {ID: "b", Stock: stock}},
			PerUserLimit: limit, Shards: shards, Pending: 10 * time.Second, BundleRoute: bhBundleRoute}}}
	pa := StartProxy(t, o.Config(t))
	pb := StartProxy(t, o.Config(t))
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)
	bhOneShard(t, do, pa, act, skus, stock, shards)
	if cluster {
		var err error
		if node, err = cl.MasterFor(pa.Store.SKUKeys(act, skus[0], shards).Shards[0].Stock); err != nil {
			t.Fatalf("donor's master: %v", err)
		}
	}
	var retries rv20Retries
	retries.watch(pa, pb)

	var names []string
	for i := 0; len(names) < users; i++ {
		if u := fmt.Sprintf("b%d", i); store.HomeShard(u, shards) != 0 {
			names = append(names, u)
		}
	}
	finals, finalAt, stalled, told, codes, odd := stallWaveBy(t, node, pa, pb, names, bhBundleBuy(act, skus), tc.ready(shop, pa, pb, act), tc.fault)
	waitSettled(t, 10*time.Second, pa, pb)
	t.Logf("answers: %v; steals replied %v; retrier jobs: %s", codes,
		pa.Counter(pa.Metrics.StockMoves, act)+pb.Counter(pb.Metrics.StockMoves, act), &retries)
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	bhCheckTold(t, bhAudit(t, do, pa, act, skus, shards, stock, limit), told)
	orders := shop.orderMap()
	soldOutDuring := 0
	for i, r := range finals {
		if r.Code == "WIN" {
			if _, ok := orders[r.Token()]; !ok {
				t.Errorf("%s told WIN with token %s: no order at the shop", names[i], r.Token())
			}
		}
		if r.Code == "SOLD_OUT" && !finalAt[i].Before(stalled[0]) && !finalAt[i].After(stalled[1]) {
			soldOutDuring++
		}
	}
	for tok, n := range shop.sends() {
		if n > 1 {
			t.Errorf("token %s sent to the shop %d times", tok, n)
		}
	}
	rv20SoldOutBesidePhantoms(t, t.Errorf, bhKeyed(do), pa, act, shards, names, finals, finalAt, stalled)
	leftAfterWave := bhSweep(t, do, pa, act, skus, shards, bhBundleBuy(act, skus))
	if left := bhAfterRepair(t, do, pa, act, skus, shards, stock, limit, orders, shop); left != 0 {
		t.Errorf("%d bundles still on sale after the sweep", left)
	}
	t.Logf("bundles left on sale after the wave %d (swept); buyers told SOLD_OUT during the stall %d", leftAfterWave, soldOutDuring)
}

// bhSweep logs how many bundles are left on sale after a wave (every buyer
// answered) and where, then buys them with fresh buyers one after another
// through p until one is told SOLD_OUT: no unit may be stuck where no
// buyer can get it. Units left after every buyer heard SOLD_OUT are the
// end game of competing bundles (decisions §51): each bundle took one
// SKU's unit onto its home shard, found the other SKU's units taken or in
// transit and gave up, and the halves were left on different shards.
func bhSweep(t *testing.T, do func(args ...string) (string, error), p *Proxy, act string, skus []string, shards int, buy func(p *Proxy, user, rid string) Resp) int64 {
	t.Helper()
	left := p.Status(t, act).SKUs[0].Remaining
	if left > 0 {
		for _, sku := range skus {
			var rs []string
			for _, sk := range p.Store.SKUKeys(act, sku, shards).Shards {
				r, _ := do("HGET", sk.Stock, "r")
				rs = append(rs, r)
			}
			t.Logf("after the wave, %s left per shard: %v", sku, rs)
		}
	}
	for j, tries := 0, 0; j < 100; j++ {
		r := buy(p, fmt.Sprintf("sweep%d", j), "")
		if r.Code == "STORE_UNAVAILABLE" && tries < 40 {
			// Settles of the wave just answered: the instance says
			// come back for transitGrace after them (decisions §54).
			tries++
			j--
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if r.Code == "SOLD_OUT" {
			break
		}
		if r.Code != "WIN" {
			t.Errorf("sweep buyer %d: %d %s", j, r.Status, r.Body)
			break
		}
	}
	return left
}
