package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func rt10fleetBuy(addr, act, sku, user string, extra ...[2]string) e2e.Resp {
	h := append([][2]string{{"X-User-Id", user}}, extra...)
	return e2e.Do(nil, addr, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy", Header: h})
}

// TestRT10FleetRetryAfterDefiniteFailure: the shop refuses a buyer's first
// order (500, no verify.url: a definite no, 502 UPSTREAM_FAILED, the unit
// released); the buyer then retries in a burst over three instances with
// case variants of the id: exactly one retry wins, the buyer holds one unit
// in Redis and one order at the shop, and the stock adds up.
func TestRT10FleetRetryAfterDefiniteFailure(t *testing.T) {
	const act, users = "rt10r", 30
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.User = "{ header: X-User-Id, case_fold: true }"
		o.Activities = []e2e.Activity{{ID: act, Stock: 100, Shards: 4, NoVerify: true}}
	})
	var wg sync.WaitGroup
	var tally rt10fleetTally
	for u := 0; u < users; u++ {
		user := "retry" + strconv.Itoa(u)
		env.shop.Answer(user, http.StatusInternalServerError)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rt10fleetBuy(env.proxies[u%3].Addr, act, e2e.SKU, "RETRY"+strconv.Itoa(u))
			rt10fleetCheckCode(t, user+" first", r)
			if r.Code != "UPSTREAM_FAILED" {
				t.Errorf("%s first buy: %d %s, want 502 UPSTREAM_FAILED", user, r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	for u := 0; u < users; u++ {
		env.shop.Answer("retry"+strconv.Itoa(u), 0)
	}
	env.waitConfirms(t)
	for u := 0; u < users; u++ {
		wins := make(chan string, 9)
		for i := 0; i < 9; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := rt10fleetVariants(u)[i%6]
				r := rt10fleetBuy(env.proxies[i%3].Addr, act, e2e.SKU, v)
				tally.add(r.Code)
				rt10fleetCheckCode(t, "retry", r)
				switch r.Code {
				case "WIN":
					wins <- r.Token()
				case "PENDING", "ALREADY_PURCHASED":
				default:
					t.Errorf("user %d retry: %d %s", u, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("retries: %s", tally.String())
	env.waitConfirms(t)
	_, shopSKU := rt10fleetShopUnits(t, env.shop, act)
	usersHash, records := env.held(t, act)
	if len(usersHash) != users || len(records) != users {
		t.Errorf("%d buyers in the users hashes, %d with reservations, want %d each", len(usersHash), len(records), users)
	}
	for u := 0; u < users; u++ {
		c := rt10fleetCanon(u)
		if usersHash[c] != 1 || records[c] != 1 {
			t.Errorf("%s: users hash %d, records %d, want 1", c, usersHash[c], records[c])
		}
	}
	k := env.checkStock(t, act, shopSKU, false)[e2e.SKU]
	if k.Confirmed != users || k.Released != users {
		t.Errorf("status %+v, want %d confirmed and %d released", k, users, users)
	}
}

// TestRT10FleetReconcileRacesRetry: buys answered 503 by the shop (with
// verify.url: outcome unknown, 504 UPSTREAM_TIMEOUT, pending). Then, at
// once: the reconciler settles them (half the shop never took: released;
// half the shop did take: confirmed), an operator releases some tokens by
// hand (admin release, as the CLI does), and the buyers retry over three
// instances. Afterwards nobody holds more than the limit, in Redis or at
// the shop, and everything adds up.
func TestRT10FleetReconcileRacesRetry(t *testing.T) {
	const act, users = "rt10q", 24
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.UpstreamTimeout = time.Second
		o.Activities = []e2e.Activity{{ID: act, Stock: 200, Shards: 4, Pending: 4 * time.Second}}
	})
	tokens := make([]string, users)
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		user := "rec" + strconv.Itoa(u)
		if u%2 == 0 {
			env.shop.Answer(user, http.StatusServiceUnavailable) // never took the order
		} else {
			env.shop.AnswerAfterOrder(user, http.StatusServiceUnavailable) // took it, then 503
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rt10fleetBuy(env.proxies[u%3].Addr, act, e2e.SKU, user)
			rt10fleetCheckCode(t, user, r)
			if r.Code != "UPSTREAM_TIMEOUT" || r.Token() == "" {
				t.Errorf("%s first buy: %d %s, want 504 UPSTREAM_TIMEOUT with a token", user, r.Status, r.Body)
			}
			tokens[u] = r.Token()
		}()
	}
	wg.Wait()
	for u := 0; u < users; u++ {
		env.shop.Answer("rec"+strconv.Itoa(u), 0)
	}
	env.waitConfirms(t)

	rec := reservation.NewReconciler(env.st, metrics.New(), zap.NewNop())
	a := env.proxies[0].Activity(t, act)
	// The pass judges the first buys' reservations past pending_timeout, and
	// none made after this moment: a retry's new reservation is fresh, as in
	// production, where the cutoff (now - pending_timeout) is always before
	// the pass. Aged by an hour, the pass verified a retry's winner while its
	// order was on its way to the shop, found it absent and released it (CI
	// once: the shop 3 orders above Redis's confirmed units).
	judgedAt := time.Now().Add(a.PendingTimeout)
	time.Sleep(5 * time.Millisecond) // the retries' reservations come after the cutoff's millisecond
	var tally rt10fleetTally
	start := make(chan struct{})
	reconciled := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(reconciled)
		<-start
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := rec.Run(ctx, []*config.Activity{a}, true, judgedAt); err != nil {
			t.Errorf("reconcile: %v", err)
		}
	}()
	for u := 0; u < users; u++ {
		user := "rec" + strconv.Itoa(u)
		if u%3 == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tok, err := store.ParseToken(tokens[u])
				if err != nil {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				code, err := env.st.Release(ctx, tok, a.Shards, "cancel", time.Now().UnixMilli(), false)
				if err != nil || (code != lua.OK && code != lua.Same) {
					t.Errorf("release %s: %v %v", tokens[u], code, err)
				}
			}()
		}
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				last := false
				for n := 0; ; n++ {
					select {
					case <-reconciled:
						last = true
					default:
					}
					time.Sleep(time.Duration(i+1) * time.Millisecond)
					r := rt10fleetBuy(env.proxies[(i+n)%3].Addr, act, e2e.SKU, user)
					tally.add(r.Code)
					rt10fleetCheckCode(t, user+" retry", r)
					switch r.Code {
					case "WIN", "PENDING", "ALREADY_PURCHASED":
					default:
						t.Errorf("%s retry: %d %s", user, r.Status, r.Body)
					}
					if last {
						return
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	t.Logf("retries: %s", tally.String())
	env.waitConfirms(t)

	shopUser, shopSKU := rt10fleetShopUnits(t, env.shop, act)
	usersHash, records := env.held(t, act)
	for u := 0; u < users; u++ {
		user := "rec" + strconv.Itoa(u)
		if usersHash[user] > 1 || records[user] > 1 {
			t.Errorf("%s above the limit in Redis: users hash %d, records %d", user, usersHash[user], records[user])
		}
		if usersHash[user] != records[user] {
			t.Errorf("%s: users hash %d, records %d", user, usersHash[user], records[user])
		}
		// An operator's release of a confirmed order is a refund: the
		// shop keeps its (cancelled) row. Otherwise one order at most.
		if u%3 != 0 && shopUser[user] > 1 {
			t.Errorf("%s holds %d orders at the shop", user, shopUser[user])
		}
	}
	// The shop's orders of buyers whose token an operator released may
	// outnumber confirmed units by exactly those refunds.
	refunded := int64(0)
	for u := 0; u < users; u += 3 {
		if u%2 == 1 {
			refunded++
		}
	}
	k := env.checkStock(t, act, nil, false)[e2e.SKU]
	if shopSKU[e2e.SKU] < k.Confirmed || shopSKU[e2e.SKU] > k.Confirmed+refunded {
		t.Errorf("shop holds %d units, Redis confirmed %d (refunded by hand at most %d)", shopSKU[e2e.SKU], k.Confirmed, refunded)
	}
}
