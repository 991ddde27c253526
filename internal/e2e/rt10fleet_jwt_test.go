package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRT10FleetJWTScalperTokensAreTheirOwn: verified (JWT) buyers whose
// claims come in several spellings, over three instances, with qty 1..2,
// bundles, request ids and forged X-User-Id: nobody above the limit, and
// every token a verified buyer is handed (winner, PENDING,
// ALREADY_PURCHASED) names a live reservation of that very buyer, never
// another's.
func TestRT10FleetJWTScalperTokensAreTheirOwn(t *testing.T) {
	const act, limit, users = "rt10j", 2, 30
	skus := []string{"a", "b"}
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	env := rt10fleetStart(t, false, 3, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q }, case_fold: true }", srv.URL, jwtIss, jwtAud)
		o.Activities = []e2e.Activity{{ID: act, SKUs: rt10fleetSKUs(25, skus...), Shards: 4, PerUserLimit: limit,
			QtyFrom: "query:qty", BundleRoute: rt10fleetBundleRoute}}
	})
	// Tokens for every spelling of every user, signed once.
	toks := make([][]string, users)
	for u := 0; u < users; u++ {
		for _, v := range rt10fleetVariants(u) {
			toks[u] = append(toks[u], k.Sign(t, "RS256", jwtClaims(v)))
		}
	}
	type handed struct {
		user, code, token string
	}
	var mu sync.Mutex
	var got []handed
	var tally rt10fleetTally
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for u := 0; u < users; u++ {
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				rng := rand.New(rand.NewPCG(uint64(u), uint64(i)+100))
				p := env.proxies[rng.IntN(3)]
				h := [][2]string{bearerOf(toks[u][rng.IntN(len(toks[u]))]), {"X-User-Id", "josé" + strconv.Itoa((u+1)%users)}}
				var r e2e.Resp
				if rng.IntN(3) == 0 {
					h = append(h, [2]string{"Content-Type", "application/json"})
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/bundle", Header: h,
						Body: []byte(rt10fleetItems(map[string]int{"a": 1, "b": 1}))})
				} else {
					if rng.IntN(2) == 0 {
						h = append(h, [2]string{"X-Request-Id", fmt.Sprintf("r%d-%d", u, rng.IntN(3))})
					}
					r = e2e.Do(nil, p.Addr, e2e.Req{URI: fmt.Sprintf("/api/seckill/%s/%s/buy?qty=%d", act, skus[rng.IntN(2)], 1+rng.IntN(2)), Header: h})
				}
				if r.Code == "" && r.Header["X-Seckill-Replayed"] == "true" && r.Status == 200 {
					r.Code = "WIN"
				}
				tally.add(r.Code)
				rt10fleetCheckCode(t, "jwt buyer", r)
				switch r.Code {
				case "WIN", "PENDING", "ALREADY_PURCHASED":
					if r.Token() == "" {
						t.Errorf("verified buyer %d: %s without a token: %s", u, r.Code, r.Body)
					}
					mu.Lock()
					got = append(got, handed{rt10fleetCanon(u), r.Code, r.Token()})
					mu.Unlock()
				case "SOLD_OUT":
				default:
					t.Errorf("buyer %d: %d %s", u, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("answers: %s", tally.String())
	env.waitConfirms(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range got {
		tok, err := store.ParseToken(h.token)
		if err != nil {
			t.Errorf("%s got %s with token %q: %v", h.user, h.code, h.token, err)
			continue
		}
		res, ok, err := env.st.Lookup(ctx, tok, 4)
		if err != nil || !ok {
			t.Errorf("%s got %s with token %s: no reservation (%v)", h.user, h.code, h.token, err)
			continue
		}
		if res.User != h.user {
			t.Errorf("%s got %s with token %s of user %q", h.user, h.code, h.token, res.User)
		}
		if res.State == store.StateReleased {
			t.Errorf("%s got %s with token %s, which is released", h.user, h.code, h.token)
		}
	}
	rt10fleetScalperInvariants(t, env, act, limit, users)
}
