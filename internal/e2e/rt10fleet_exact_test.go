package e2e_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt10fleetExact: demand far above stock over three instances, qty 1,
// limit 1 across three SKUs, each buyer sending several spellings of their
// id at once and then trying the other SKUs: every unit is sold, each to a
// different buyer, exactly as many winners as units (at the shop and in
// Redis), and every answer carries its SPEC status.
func rt10fleetExact(t *testing.T, cluster bool) {
	const act, users, stock = "rt10x", 240, 25
	skus := []string{"a", "b", "c"}
	env := rt10fleetStart(t, cluster, 3, func(o *e2e.Options) {
		o.User = "{ header: X-User-Id, case_fold: true }"
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(stock, skus...), Shards: 4}}
	})
	var tally rt10fleetTally
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for u := 0; u < users; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(uint64(u), 7))
			variants := rt10fleetVariants(u)
			order := rng.Perm(len(skus))
			// Three spellings at once on the first SKU, then the others.
			var inner sync.WaitGroup
			won := false
			var mu sync.Mutex
			for i := 0; i < 3; i++ {
				inner.Add(1)
				go func() {
					defer inner.Done()
					r := rt10fleetBuy(env.proxies[(u+i)%3].Addr, act, skus[order[0]], variants[(u+i)%len(variants)])
					tally.add(r.Code)
					rt10fleetCheckCode(t, "first", r)
					if r.Code == "WIN" {
						mu.Lock()
						won = true
						mu.Unlock()
					}
				}()
			}
			inner.Wait()
			if won {
				return
			}
			for _, k := range order[1:] {
				r := rt10fleetBuy(env.proxies[rng.IntN(3)].Addr, act, skus[k], variants[rng.IntN(len(variants))])
				tally.add(r.Code)
				rt10fleetCheckCode(t, "next", r)
				if r.Code == "WIN" || r.Code == "ALREADY_PURCHASED" || r.Code == "PENDING" {
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("answers: %s", tally.String())
	env.waitConfirms(t)
	shopUser, shopSKU := rt10fleetShopUnits(t, env.shop, act)
	usersHash, records := env.held(t, act)
	total := int64(stock * len(skus))
	if int64(len(shopUser)) != total || int64(len(records)) != total || int64(len(usersHash)) != total {
		t.Errorf("winners: %d at the shop, %d with reservations, %d in users hashes; want %d each (stock)",
			len(shopUser), len(records), len(usersHash), total)
	}
	for user, n := range shopUser {
		if n != 1 || records[user] != 1 || usersHash[user] != 1 {
			t.Errorf("%q: shop %d, records %d, users hash %d, want 1 each", user, n, records[user], usersHash[user])
		}
	}
	for id, k := range env.checkStock(t, act, shopSKU, false) {
		if k.Remaining != 0 || k.Confirmed != stock {
			t.Errorf("sku %s: %+v, want sold out exactly", id, k)
		}
	}
}

func TestRT10FleetExactWinnersSingleNode(t *testing.T) { rt10fleetExact(t, false) }

func TestRT10FleetExactWinnersCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-master cluster: the plain pass of make test runs it")
	}
	rt10fleetExact(t, true)
}
