package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRV19StallMidWave: two instances on one Redis (redis.timeout 100 ms),
// stock 50, per_user_limit 1, 500 buyers at once (half with an
// X-Request-Id, repeated on the other instance when answered
// STORE_UNAVAILABLE / PENDING / BUSY), and Redis stalled in the middle of
// the wave: CLIENT PAUSE WRITE, SIGSTOP just over redis.timeout, SIGSTOP
// past the client's ConnWriteTimeout (1 s: the connection is dropped and
// re-dialled while its calls sit in Redis), DEBUG SLEEP while the winners'
// confirms run, CLIENT PAUSE ALL, and a long SIGSTOP during the confirms;
// each on 1 and 4 shards (steals in flight). Afterwards (confirms waited for, retriers drained): no unit
// held by a reservation no client was told of, every final WIN an order;
// after one reconcile --repair: nothing pending, stock adds up, shop
// orders == confirmed, nobody above the limit.
func TestRV19StallMidWave(t *testing.T) {
	Soak(t)
	if testing.Short() {
		t.Skip("several seconds per fault")
	}
	for _, tc := range []struct {
		name  string
		at    time.Duration
		fault func(t *testing.T, node *redistest.Server)
	}{
		{"pause write", 20 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			_, _ = node.Do("CLIENT", "PAUSE", "600", "WRITE")
			time.Sleep(600 * time.Millisecond)
		}},
		{"sigstop short", 20 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			node.Pause(t)
			time.Sleep(150 * time.Millisecond)
			node.Resume(t)
		}},
		{"sigstop long", 20 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			node.Pause(t)
			time.Sleep(1300 * time.Millisecond)
			node.Resume(t)
		}},
		{"sleep during confirms", 100 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			_, _ = node.Do("DEBUG", "SLEEP", "0.5")
			time.Sleep(100 * time.Millisecond)
			_, _ = node.Do("DEBUG", "SLEEP", "0.3")
		}},
		{"pause all", 20 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			_, _ = node.Do("CLIENT", "PAUSE", "800", "ALL")
			time.Sleep(800 * time.Millisecond)
		}},
		{"sigstop long during confirms", 120 * time.Millisecond, func(t *testing.T, node *redistest.Server) {
			node.Pause(t)
			time.Sleep(1200 * time.Millisecond)
			node.Resume(t)
		}},
	} {
		for _, shards := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/shards %d", tc.name, shards), func(t *testing.T) { rv19Wave(t, shards, tc.at, tc.fault) })
		}
	}
}

func rv19Wave(t *testing.T, shards int, at time.Duration, fault func(t *testing.T, node *redistest.Server)) {
	const stock, limit, users = 50, 1, 500
	const act = "rv19"
	node := redistest.Start(t, "--enable-debug-command", "yes")
	shop := ra12StartShop(t, 150*time.Millisecond)
	o := Options{Redis: []string{node.Addr}, ShopURL: shop.URL, RedisTimeout: 100 * time.Millisecond,
		UpstreamTimeout: 2 * time.Second,
		Activities:      []Activity{{ID: act, Stock: stock, PerUserLimit: limit, Shards: shards, Pending: 10 * time.Second}}}
	pa := StartProxy(t, o.Config(t))
	pb := StartProxy(t, o.Config(t))
	pa.Preheat(t, act)
	pb.WaitPreheated(t, act)

	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("w%d", i)
	}
	t0 := time.Now()
	finals, _, _, told, codes, odd := stallWave(t, node, pa, pb, act, names,
		func(int) bool { return time.Since(t0) >= at }, fault)
	waitSettled(t, 10*time.Second, pa, pb)
	t.Logf("answers: %v; confirm retries %v/%v", codes,
		pa.Counter(pa.Metrics.Settlements, "confirm", "retry"), pb.Counter(pb.Metrics.Settlements, "confirm", "retry"))
	if len(odd) > 0 {
		t.Errorf("answers outside SPEC: %v", odd)
	}
	before := pa.SKUStatus(t, act)
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
	shop.mu.Lock()
	orders := map[string]string{}
	for k, v := range shop.orders {
		orders[k] = v
	}
	shop.mu.Unlock()
	wins := 0
	for i, r := range finals {
		if r.Code == "WIN" || ra12Replay(r) {
			wins++
			if _, ok := orders[r.Token()]; !ok {
				t.Errorf("w%d told WIN with token %s: no order at the shop", i, r.Token())
			}
		}
	}
	t.Logf("final wins %d; before reconcile %+v", wins, before)
	n := afterRepair(t, node, pa, act, stock, limit, orders, shop)
	if wins != n {
		t.Logf("note: %d final wins, %d shop orders", wins, n)
	}
}
