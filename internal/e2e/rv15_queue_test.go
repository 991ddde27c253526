package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Queue mode, verify.url answering 200 to everything (a catch-all route, a
// login page). Instance A's worker is at the shop with k's buy when A is
// killed: the shop never finishes it, no order. Instance B takes the entry
// over (XAUTOCLAIM); before sending again it asks verify whether the shop
// already has the order, reads the catch-all's 200 as "yes" and confirms:
// Redis 1 confirmed, the shop 0 orders, the buyer's poll says confirmed,
// and the unit is never sold. The takeover now believes a 200 only if
// verify answers 404 for a token never issued; otherwise it sends again
// (the shop dedups by X-Seckill-Token).
func TestRV15QueueTakeoverTrustsACatchAllVerify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"verify right", false}, {"verify 200 for everything", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := e2e.StartRedis(t)
			shop := e2e.StartShop(t)
			opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
				Activities: []e2e.Activity{{ID: "rv15q", Stock: 1, Shards: 1, Mode: "queue"}}}
			edit := func(c *config.Config) {
				c.Activities[0].Queue.Workers = 1
				c.Activities[0].Queue.Rate = 100
				if tc.broken {
					catchAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
						_, _ = w.Write([]byte("<html>sign in</html>"))
					}))
					t.Cleanup(catchAll.Close)
					c.Activities[0].Verify.URL = catchAll.URL + "/orders?token={token}"
				}
			}
			pa := rqProxy(t, opts, edit)
			cfgB := opts.Config(t)
			edit(cfgB)
			pb := e2e.StartProxy(t, cfgB)
			pb.WaitPreheated(t, "rv15q")
			a := pa.Activity(t, "rv15q")

			release := shop.Hang("k")
			got := e2e.Buy(pa.Addr, "rv15q", "k")
			if got.Code != "QUEUED" {
				t.Fatalf("buy: %d %s", got.Status, got.Body)
			}
			tok := got.Token()
			qa := rqQueue(t, pa, "A", 1500*time.Millisecond)
			e2e.Eventually(t, 3*time.Second, "A's worker at the shop", func() bool { return shop.SeenBuy("k") })
			qa.Kill()
			// The shop sees the cut connection and drops the buy (no order)
			// before it is let go.
			e2e.Eventually(t, 3*time.Second, "the shop drops A's buy", func() bool {
				for _, b := range shop.Buys() {
					if b.User == "k" && b.Status == 0 {
						return true
					}
				}
				return false
			})
			release()
			rqQueue(t, pb, "B", 1500*time.Millisecond)
			last := rqAwaitSettled(pb.Addr, []string{tok}, 7*time.Second)
			orders := shop.Orders()
			k := rqWantStock(t, opsStore(t, pa.Cfg), a)
			t.Logf("poll %s; shop orders %d; Redis %+v", last[0], len(orders), k)
			if k.Confirmed > int64(len(orders)) {
				t.Errorf("Redis confirmed %d, the shop holds %d orders: the buyer told confirmed has no order, the unit is never sold", k.Confirmed, len(orders))
			}
			if !tc.broken && (last[0].State != store.StateConfirmed || len(orders) != 1) {
				t.Errorf("verify right: the takeover sends again and the shop's order confirms it: %s, %d orders", last[0], len(orders))
			}
		})
	}
}
