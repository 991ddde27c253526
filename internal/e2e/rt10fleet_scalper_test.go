package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt10fleetVariants are spellings of one canonical user (case_fold: true):
// case, ASCII and Unicode white space, decomposed accents. Canonical form:
// "josé<n>".
func rt10fleetVariants(n int) []string {
	s := strconv.Itoa(n)
	return []string{
		"josé" + s,              // canonical (NFC é)
		"JOSÉ" + s,              // upper case
		"jose\u0301" + s,        // decomposed é
		" Jose\u0301" + s + " ", // spaces around, mixed case, decomposed
		"\u3000JOSÉ" + s,        // ideographic space
		"José" + s + "\u00a0",   // no-break space after
	}
}

func rt10fleetCanon(n int) string { return "josé" + strconv.Itoa(n) }

// rt10fleetScalp runs the scalper crowd against env: users users, each
// sending per requests spread over every instance, with canonical-id
// variants, fresh and repeated request ids, many devices and IPs, qty 1..3
// on single routes and bundles of several SKUs.
func rt10fleetScalp(t *testing.T, env *rt10fleetEnv, act string, skus []string, users, per int, tally *rt10fleetTally) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 96)
	for u := 0; u < users; u++ {
		variants := rt10fleetVariants(u)
		var ridMu sync.Mutex
		var rids []string
		for i := 0; i < per; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				rng := rand.New(rand.NewPCG(uint64(u), uint64(i)))
				p := env.proxies[rng.IntN(len(env.proxies))]
				h := [][2]string{
					{"X-User-Id", variants[rng.IntN(len(variants))]},
					{"X-Device-Id", fmt.Sprintf("dev-%d-%d", u, i)},
					{"X-Forwarded-For", fmt.Sprintf("198.18.%d.%d", rng.IntN(250), rng.IntN(250)+1)},
				}
				var r e2e.Resp
				what := ""
				if rng.IntN(3) == 0 {
					// A bundle of 2 or 3 SKUs, total <= 3.
					items := map[string]int{}
					perm := rng.Perm(len(skus))
					k := 2 + rng.IntN(2)
					for j := 0; j < k && j < len(perm); j++ {
						items[skus[perm[j]]] = 1
					}
					body := rt10fleetItems(items)
					h = append(h, [2]string{"Content-Type", "application/json"})
					what = fmt.Sprintf("user %d bundle %s", u, body)
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/bundle", Header: h, Body: []byte(body)})
				} else {
					sku := skus[rng.IntN(len(skus))]
					qty := 1 + rng.IntN(3)
					switch rng.IntN(3) {
					case 0: // fresh request id
						rid := fmt.Sprintf("rid-%d-%d", u, i)
						ridMu.Lock()
						rids = append(rids, rid)
						ridMu.Unlock()
						h = append(h, [2]string{"X-Request-Id", rid})
					case 1: // a request id the user sent before, if any
						ridMu.Lock()
						if len(rids) > 0 {
							h = append(h, [2]string{"X-Request-Id", rids[rng.IntN(len(rids))]})
						}
						ridMu.Unlock()
					}
					what = fmt.Sprintf("user %d %s qty %d", u, sku, qty)
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy?qty=" + strconv.Itoa(qty), Header: h})
				}
				if r.Code == "" && r.Header["X-Seckill-Replayed"] == "true" && r.Status == 200 && r.Header["X-Seckill-Token"] != "" {
					r.Code = "WIN" // an exact replay of a winner's answer
					tally.add("REPLAY")
				} else {
					tally.add(r.Code)
				}
				rt10fleetCheckCode(t, what, r)
				switch r.Code {
				case "WIN", "ALREADY_PURCHASED", "SOLD_OUT", "PENDING":
				case "STORE_UNAVAILABLE": // a loaded 2-core box: allowed, it must hold nothing (checked after)
				case "UPSTREAM_FAILED":
					// The shop never refuses here. With calls aborted after
					// a Redis timeout, a repeated request id whose record
					// names another request's aborted reservation reads
					// UPSTREAM_FAILED: the bug TestRT10FleetRefusedRequestIDAfterRefund
					// and TestRT10FleetRetryIDAfterReconcilerRelease show
					// deterministically. Tolerated (and logged) here so this
					// test keeps checking the invariants.
					hasRID := false
					for _, x := range h {
						hasRID = hasRID || x[0] == "X-Request-Id"
					}
					if !hasRID {
						t.Errorf("%s: UPSTREAM_FAILED without a request id: %d %s", what, r.Status, r.Body)
					} else {
						t.Logf("%s: UPSTREAM_FAILED for a repeated request id (known bug, see rt10fleet_ridref_test.go)", what)
					}
				default:
					rid := ""
					for _, x := range h {
						if x[0] == "X-Request-Id" {
							rid = x[1]
						}
					}
					t.Errorf("%s (request id %q, instance %s): unexpected %d %s", what, rid, p.Addr, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
}

// rt10fleetScalperInvariants: after the crowd, nobody above the limit at
// the shop or in Redis, Redis and the shop agree per user and per SKU, the
// stock adds up, and the shop only ever saw canonical user ids.
func rt10fleetScalperInvariants(t *testing.T, env *rt10fleetEnv, act string, limit int64, users int) {
	t.Helper()
	env.waitConfirms(t)
	shopUser, shopSKU := rt10fleetShopUnits(t, env.shop, act)
	usersHash, records := env.held(t, act)
	canon := map[string]bool{}
	for u := 0; u < users; u++ {
		canon[rt10fleetCanon(u)] = true
	}
	for user, n := range shopUser {
		if !canon[user] {
			t.Errorf("the shop got a non-canonical X-Seckill-User %q (%d units)", user, n)
		}
		if n > limit {
			t.Errorf("user %q holds %d units at the shop, limit %d", user, n, limit)
		}
	}
	for user, n := range usersHash {
		if n > limit {
			t.Errorf("user %q: users hash counts %d units, limit %d", user, n, limit)
		}
		if !canon[user] && n > 0 {
			t.Errorf("Redis holds units for a non-canonical user %q: %d", user, n)
		}
	}
	for user, n := range records {
		if n > limit {
			t.Errorf("user %q: reservations hold %d units, limit %d", user, n, limit)
		}
		if usersHash[user] != n {
			t.Errorf("user %q: users hash %d units, reservation records %d", user, usersHash[user], n)
		}
		if shopUser[user] != n {
			t.Errorf("user %q: Redis holds %d units, the shop %d", user, n, shopUser[user])
		}
	}
	for user, n := range shopUser {
		if records[user] != n {
			t.Errorf("user %q: the shop holds %d units, Redis %d", user, n, records[user])
		}
	}
	env.checkStock(t, act, shopSKU, false)
}

// TestRT10FleetScalperThreeInstances: a scalper crowd over three proxy
// instances on one Redis: every spelling of a user is one buyer, qty > 1
// and bundles count toward one activity-wide limit, request ids do not
// multiply units, and Redis, the shop and the stock agree afterwards.
func TestRT10FleetScalperThreeInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	const act, limit, users = "rt10a", 3, 60
	skus := []string{"a", "b", "c"}
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.User = "{ header: X-User-Id, case_fold: true }"
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(40, skus...), Shards: 4, PerUserLimit: limit,
			QtyFrom: "query:qty", BundleRoute: rt10fleetBundleRoute}}
	})
	var tally rt10fleetTally
	rt10fleetScalp(t, env, act, skus, users, 14, &tally)
	t.Logf("answers: %s", tally.String())
	rt10fleetScalperInvariants(t, env, act, limit, users)
}

// TestRT10FleetScalperCluster: the same crowd on a 3-master cluster with
// 6 shards placed over the masters.
func TestRT10FleetScalperCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	const act, limit, users = "rt10c", 3, 60
	skus := []string{"a", "b", "c"}
	env := rt10fleetStart(t, true, 3, func(o *e2e.Options) {
		o.User = "{ header: X-User-Id, case_fold: true }"
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(40, skus...), Shards: 6, PerUserLimit: limit,
			QtyFrom: "query:qty", BundleRoute: rt10fleetBundleRoute}}
	})
	var tally rt10fleetTally
	rt10fleetScalp(t, env, act, skus, users, 14, &tally)
	t.Logf("answers: %s", tally.String())
	rt10fleetScalperInvariants(t, env, act, limit, users)
}

// TestRT10FleetScalperTightRedisTimeout: the same crowd with a Redis
// timeout so short (30 ms on a loaded 2-core box) that many reserve,
// steal and bundle calls time out: buyers told STORE_UNAVAILABLE hold
// nothing once the proxies settled their calls (README "STORE_UNAVAILABLE
// means nothing is held, also when Redis answered late"), and the limit,
// Redis and the shop still agree.
func TestRT10FleetScalperTightRedisTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	const act, limit, users = "rt10s", 3, 60
	skus := []string{"a", "b", "c"}
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.User = "{ header: X-User-Id, case_fold: true }"
		o.RedisTimeout = 30 * time.Millisecond
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(40, skus...), Shards: 4, PerUserLimit: limit,
			QtyFrom: "query:qty", BundleRoute: rt10fleetBundleRoute}}
	})
	var tally rt10fleetTally
	rt10fleetScalp(t, env, act, skus, users, 14, &tally)
	t.Logf("answers: %s", tally.String())
	if t.Failed() && testing.Verbose() {
		for u := 0; u < users; u++ {
			t.Logf("user %s:", rt10fleetCanon(u))
			env.dumpUser(t, act, rt10fleetCanon(u))
		}
	}
	// Aborts of calls that timed out run in the background.
	e2e.Eventually(t, 15*time.Second, "nothing pending", func() bool {
		s, err := env.st.Status(context.Background(), env.proxies[0].Activity(t, act))
		if err != nil {
			return false
		}
		for _, k := range s.SKUs {
			if k.Pending != 0 {
				return false
			}
		}
		return true
	})
	rt10fleetScalperInvariants(t, env, act, limit, users)
}
