package e2e_test

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// evalsha counts EVALSHA calls per master of the cluster.
func evalsha(rd *e2e.Redis) map[string]int64 {
	out := map[string]int64{}
	for _, n := range rd.Nodes.Nodes {
		out[n.Addr] = redistest.ParseStat(n.Info("commandstats", "cmdstat_evalsha"), "calls")
	}
	return out
}

func wantScriptsEverywhere(t *testing.T, before, after map[string]int64) {
	t.Helper()
	for addr, n := range after {
		if n <= before[addr] {
			t.Errorf("master %s ran no script during the spike (evalsha calls %d -> %d)", addr, before[addr], n)
		}
	}
}

func wantEven(t *testing.T, p *e2e.Proxy, act string, want []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	per, even, err := p.Store.PlacementCheck(ctx, act)
	var got []int
	for _, v := range per {
		got = append(got, v)
	}
	sort.Ints(got)
	if err != nil || !even || !reflect.DeepEqual(got, want) {
		t.Fatalf("placement of %s: %v (%v), even %v, %v; want %v", act, per, got, even, err, want)
	}
}

// TestSpikeClusterPlaced (issue 11 §3): on 3 masters, 6 shards sit 2/2/2
// and a spike through two instances runs scripts on every master, with
// exact winners. Then a reshard piles shards up, a forced preheat re-places
// them while both instances run, and the second instance, which never
// preheated, follows the new placement and sells the new stock exactly.
func TestSpikeClusterPlaced(t *testing.T) {
	rd := e2e.StartCluster(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: rd.Addrs, Cluster: true, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "place", Stock: 60, Shards: 6}}}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, "place")
	p2.WaitPreheated(t, "place")
	wantEven(t, p1, "place", []int{2, 2, 2})

	before := evalsha(rd)
	res := e2e.Spike{Addrs: []string{p1.Addr, p2.Addr}, Activity: "place", Users: 800, Tries: 2, Conc: 100}.Fire(t)
	t.Logf("outcomes: %v, at most %d in flight", res.ByCode, res.MaxInFlight)
	wantScriptsEverywhere(t, before, evalsha(rd))
	res.Check(t, shop, p1, "place", 60)
	p2.WantStock(t, "place", 0, 0, 60)

	// A reshard: shard 0's slot moves to another master.
	k0 := p1.Store.SKUKeys("place", e2e.SKU, 6).Shards[0].Stock
	from, err := rd.Nodes.MasterFor(k0)
	if err != nil {
		t.Fatal(err)
	}
	to := rd.Nodes.Nodes[0]
	if to == from {
		to = rd.Nodes.Nodes[1]
	}
	slot, _ := rd.Nodes.Slot(k0)
	if err := rd.Nodes.MoveSlot(slot, to); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, even, err := p2.Store.PlacementCheck(ctx, "place"); err != nil || even {
		t.Fatalf("after the reshard: even %v, %v; want uneven", even, err)
	}
	old := p2.Store.SKUKeys("place", e2e.SKU, 6)
	if _, err := p1.Store.Preheat(ctx, p1.Activity(t, "place"), true, time.Now()); err != nil {
		t.Fatalf("preheat --force: %v", err)
	}
	wantEven(t, p2, "place", []int{2, 2, 2})
	want := p1.Store.SKUKeys("place", e2e.SKU, 6)
	if reflect.DeepEqual(old.Shards, want.Shards) {
		t.Fatal("the forced preheat after the reshard kept every shard's tag")
	}
	e2e.Eventually(t, 5*time.Second, "the second instance uses the new placement", func() bool {
		return reflect.DeepEqual(p2.Store.SKUKeys("place", e2e.SKU, 6).Shards, want.Shards)
	})

	before = evalsha(rd)
	res = e2e.Spike{Addrs: []string{p2.Addr, p1.Addr}, Activity: "place", Users: 800, Tries: 2, Conc: 100, UserPrefix: "v"}.Fire(t)
	t.Logf("after re-placement: %v", res.ByCode)
	wantScriptsEverywhere(t, before, evalsha(rd))
	if len(res.Odd) > 0 || res.ByCode["WIN"] != 60 || len(res.Wins) != 60 {
		t.Fatalf("second spike: %v, odd %v; want 60 winners", res.ByCode, res.Odd)
	}
	p1.WantStock(t, "place", 0, 0, 60)
	p2.WantStock(t, "place", 0, 0, 60)
	if n := len(shop.Orders()); n != 120 {
		t.Fatalf("shop has %d orders, want 120 (60 per preheat)", n)
	}
}
