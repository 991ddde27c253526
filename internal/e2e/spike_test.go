package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestSpike: 2,000 buyers × 3 tries at 200 connections for 100 units on 4
// shards turn into exactly 100 orders from 100 buyers.
func TestSpike(t *testing.T) {
	rd := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: rd.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "spike", Stock: 100, Shards: 4}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "spike")

	res := e2e.Spike{Addrs: []string{p.Addr}, Activity: "spike", Users: 2000, Tries: 3, Conc: 200}.Fire(t)
	t.Logf("outcomes: %v, at most %d in flight", res.ByCode, res.MaxInFlight)
	res.Check(t, shop, p, "spike", 100)
}

// TestSpikeTwoInstances: the same spike alternating over two proxy
// instances that share one Redis.
func TestSpikeTwoInstances(t *testing.T) {
	rd := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: rd.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "spike", Stock: 100, Shards: 4}}}
	p1 := e2e.StartProxy(t, opts.Config(t))
	p2 := e2e.StartProxy(t, opts.Config(t))
	p1.Preheat(t, "spike")
	p2.WaitPreheated(t, "spike")

	res := e2e.Spike{Addrs: []string{p1.Addr, p2.Addr}, Activity: "spike", Users: 2000, Tries: 3, Conc: 200}.Fire(t)
	t.Logf("outcomes: %v, at most %d in flight", res.ByCode, res.MaxInFlight)
	res.Check(t, shop, p1, "spike", 100)
	p2.WantStock(t, "spike", 0, 0, 100)
}

// TestSpikeCluster: a smaller spike against a 3-master Redis Cluster, 8
// shards spread over its slots.
func TestSpikeCluster(t *testing.T) {
	rd := e2e.StartCluster(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: rd.Addrs, Cluster: true, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "spike", Stock: 50, Shards: 8}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "spike")

	res := e2e.Spike{Addrs: []string{p.Addr}, Activity: "spike", Users: 1000, Tries: 2, Conc: 200}.Fire(t)
	t.Logf("outcomes: %v, at most %d in flight", res.ByCode, res.MaxInFlight)
	res.Check(t, shop, p, "spike", 50)
}
