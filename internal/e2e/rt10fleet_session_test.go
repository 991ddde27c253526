package e2e_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRT10FleetSessionScalper: session identity (case_fold) over three
// instances; each buyer has several sessions whose whoami names spellings
// of one id, and sends single buys (qty 1..2) and bundles with forged
// X-User-Id values of other buyers: the limit holds per whoami user on
// both routes, the shop only sees canonical whoami users.
func TestRT10FleetSessionScalper(t *testing.T) {
	w := startWhoamiShop(t, nil)
	const act, limit, users = "rt10z", 2, 20
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.User = fmt.Sprintf(`{ session: { cookie: sid, url: %q, timeout: 2s, max_in_flight: 1000 }, case_fold: true }`, w.srv.URL+"/internal/whoami")
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(30, "a", "b"), Shards: 4, PerUserLimit: limit,
			QtyFrom: "query:qty", BundleRoute: rt10fleetBundleRoute}}
	})
	spell := []string{"Sam%d", "SAM%d", "sam%d", "sAm%d"}
	var wg sync.WaitGroup
	var tally rt10fleetTally
	for u := 0; u < users; u++ {
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := env.proxies[(u+i)%3]
				h := [][2]string{{"Cookie", "sid=u:" + fmt.Sprintf(spell[i%len(spell)], u)}, {"X-User-Id", fmt.Sprintf("sam%d", (u+1)%users)}}
				var r e2e.Resp
				if i%3 == 0 {
					h = append(h, [2]string{"Content-Type", "application/json"})
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/bundle", Header: h, Body: []byte(rt10fleetItems(map[string]int{"a": 1, "b": 1}))})
				} else {
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: fmt.Sprintf("/api/seckill/%s/%s/buy?qty=%d", act, []string{"a", "b"}[i%2], 1+i%2), Header: h})
				}
				tally.add(r.Code)
				rt10fleetCheckCode(t, "session buyer", r)
				switch r.Code {
				case "WIN", "PENDING", "ALREADY_PURCHASED", "SOLD_OUT":
				default:
					t.Errorf("buyer %d: %d %s", u, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("answers: %s", tally.String())
	env.waitConfirms(t)
	shopUser, shopSKU := rt10fleetShopUnits(t, env.shop, act)
	usersHash, records := env.held(t, act)
	for user, n := range shopUser {
		if n > limit || user != strings.ToLower(user) {
			t.Errorf("shop: %q holds %d", user, n)
		}
		if records[user] != n || usersHash[user] != n {
			t.Errorf("%q: shop %d, records %d, users hash %d", user, n, records[user], usersHash[user])
		}
	}
	if len(records) != len(shopUser) {
		t.Errorf("%d users with reservations, %d at the shop", len(records), len(shopUser))
	}
	env.checkStock(t, act, shopSKU, false)
}
