package e2e_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

func rt10fleetBuyQty(addr, act, sku, user string, qty int) e2e.Resp {
	return e2e.Do(nil, addr, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy?qty=" + strconv.Itoa(qty),
		Header: [][2]string{{"X-User-Id", user}}})
}

// TestRT10FleetQtyGathersFromEveryShard: one unit on each of 4 shards, a
// buyer asking for 3 gets them (README "No fragment refusals"), whichever
// instance they ask; the last unit goes to a buyer of 1, a buyer of 2 is
// SOLD_OUT; per SKU and across SKUs the limit holds.
func TestRT10FleetQtyGathersFromEveryShard(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	for _, cluster := range []bool{false, true} {
		name := "single"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			const act = "rt10f"
			env := rt10fleetStart(t, cluster, 3, func(o *e2e.Options) {
				o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(4, "a", "b"), Shards: 4, PerUserLimit: 3, QtyFrom: "query:qty"}}
			})
			for i, tc := range []struct {
				user, sku string
				qty       int
				want      string
			}{
				{"big", "a", 3, "WIN"},
				{"big", "b", 1, "ALREADY_PURCHASED"}, // 3 held, limit 3, across SKUs
				{"two", "a", 2, "SOLD_OUT"},          // one unit of a left
				{"one", "a", 1, "WIN"},
				{"one", "b", 2, "WIN"},               // one + two = 3
				{"one", "b", 1, "ALREADY_PURCHASED"}, // at 3
				{"two", "b", 2, "WIN"},               // the last two of b
				{"three", "b", 1, "SOLD_OUT"},
			} {
				addr := env.proxies[i%3].Addr
				r := rt10fleetBuyQty(addr, act, tc.sku, tc.user, tc.qty)
				if tc.want == "WIN" && r.Code == "SOLD_OUT" {
					// A unit moved to a shard an instance had seen dry
					// (a steal's deposit) is buyable there once Redis's
					// invalidation of the shard's sold-out flag reaches
					// that instance (README: sold-out from memory); CI,
					// loaded, once asked the next instance first. A
					// SOLD_OUT holds nothing: the buyer clicks again.
					t.Logf("step %d: SOLD_OUT from a snapshot not yet reopened; clicking again", i)
					e2e.Eventually(t, 5*time.Second, "the unit buyable", func() bool {
						r = rt10fleetBuyQty(addr, act, tc.sku, tc.user, tc.qty)
						return r.Code != "SOLD_OUT"
					})
				}
				if tc.want == "ALREADY_PURCHASED" && r.Code == "PENDING" {
					// The buyer's wins are confirmed after their answer
					// (SPEC §4: PENDING while a reservation is still in
					// flight); a loaded box asked before the confirm
					// landed (CI, 2026-12-07). Once it has: purchased.
					t.Logf("step %d: PENDING before the confirm landed; asking again", i)
					e2e.Eventually(t, 5*time.Second, "the confirm landed", func() bool {
						r = rt10fleetBuyQty(addr, act, tc.sku, tc.user, tc.qty)
						return r.Code != "PENDING"
					})
				}
				rt10fleetCheckCode(t, tc.user, r)
				if r.Code != tc.want {
					t.Errorf("step %d: %s buys %d of %s: %d %s, want %s", i, tc.user, tc.qty, tc.sku, r.Status, r.Body, tc.want)
				}
			}
			env.waitConfirms(t)
			shopUser, shopSKU := rt10fleetShopUnits(t, env.shop, act)
			k := env.checkStock(t, act, shopSKU, false)
			if k["a"].Remaining != 0 || k["b"].Remaining != 0 {
				t.Errorf("stock left: %+v", k)
			}
			for _, u := range []string{"big", "one"} {
				if shopUser[u] != 3 {
					t.Errorf("%s holds %d at the shop, want 3", u, shopUser[u])
				}
			}
			if shopUser["two"] != 2 {
				t.Errorf("two holds %d, want 2", shopUser["two"])
			}
		})
	}
}
