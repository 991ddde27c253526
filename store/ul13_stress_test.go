package store_test

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

type ul13Ledger struct {
	mu         sync.Mutex
	releasedAt map[store.Token]time.Time
	errs       []string
}

func (l *ul13Ledger) fail(f string, a ...any) {
	l.mu.Lock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(f, a...))
	}
	l.mu.Unlock()
}

func (l *ul13Ledger) released(t store.Token) {
	l.mu.Lock()
	if _, ok := l.releasedAt[t]; !ok {
		l.releasedAt[t] = time.Now()
	}
	l.mu.Unlock()
}

// checkNamed: an at-limit answer given to a call started at start must not
// name a reservation whose release had returned before start (grace for
// memo answers: client-side caching invalidation).
func (l *ul13Ledger) checkNamed(start time.Time, r store.ReserveResult, what string) {
	if r.Token == (store.Token{}) {
		return
	}
	l.mu.Lock()
	at, ok := l.releasedAt[r.Token]
	l.mu.Unlock()
	grace := time.Duration(0)
	if r.FromMemo {
		grace = 200 * time.Millisecond
	}
	if ok && at.Add(grace).Before(start) {
		l.fail("%s: at-limit answer %v names %v released %v before the call (memo %v)", what, r.Code, r.Token, start.Sub(at), r.FromMemo)
	}
}

// ul13Scan reads every shard's res and users hashes and checks: per user,
// units held (p, q, c records) <= limit; the users hash's units equal them
// (final only); every listed reservation is held (final only).
func ul13Scan(t *testing.T, s *store.Store, act string, shards int, limit int64, final bool) []string {
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for sh := 0; sh < shards; sh++ {
		base := "seckill:{" + act + ":" + strconv.Itoa(sh) + "}:"
		cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := c.Do(cx, c.B().Hgetall().Key(base+"res").Build()).AsStrMap()
		if err != nil {
			cancel()
			t.Fatalf("HGETALL res: %v", err)
		}
		users, err := c.Do(cx, c.B().Hgetall().Key(base+"users").Build()).AsStrMap()
		cancel()
		if err != nil {
			t.Fatalf("HGETALL users: %v", err)
		}
		held := map[string]int64{}
		for f, rec := range res {
			if strings.HasSuffix(f, ":i") {
				continue // bundle items
			}
			p := strings.Split(rec, "|")
			if len(p) < 3 {
				continue
			}
			if p[0] == "p" || p[0] == "q" || p[0] == "c" {
				n, _ := strconv.ParseInt(p[2], 10, 64)
				held[p[1]] += n
			}
		}
		for u, n := range held {
			if n > limit {
				bad = append(bad, fmt.Sprintf("shard %d: user %s holds %d units > limit %d", sh, u, n, limit))
			}
		}
		if !final {
			continue
		}
		for u, v := range users {
			un, rest, _ := strings.Cut(v, "|")
			n, _ := strconv.ParseInt(un, 10, 64)
			if n != held[u] {
				bad = append(bad, fmt.Sprintf("shard %d: users[%s] = %q, records hold %d", sh, u, v, held[u]))
			}
			for _, f := range strings.Split(rest, "|") {
				rec, ok := res[f]
				if !ok || rec[0] == 'x' {
					bad = append(bad, fmt.Sprintf("shard %d: users[%s] = %q lists %s (%q)", sh, u, v, f, rec))
				}
			}
		}
		for u, n := range held {
			if _, ok := users[u]; !ok && n > 0 {
				bad = append(bad, fmt.Sprintf("shard %d: user %s holds %d units, absent from users", sh, u, n))
			}
		}
	}
	return bad
}

func TestUL13StressLimit(t *testing.T) {
	for _, limit := range []int64{2, 5} {
		t.Run("limit"+strconv.FormatInt(limit, 10), func(t *testing.T) { ul13Stress(t, limit, false) })
		t.Run("burst"+strconv.FormatInt(limit, 10), func(t *testing.T) { ul13Stress(t, limit, true) })
	}
}

func ul13Stress(t *testing.T, limit int64, burst bool) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	now := time.Now()
	act := "act_ul13s" + strconv.FormatInt(limit, 10)
	workers, per := 12, 150
	if burst {
		act += "b"
		workers, per = 40, 45
	}
	a := &config.Activity{
		ID: act, Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		SKUs:   []config.SKU{{ID: "s1", Stock: 24}, {ID: "s2", Stock: 16}, {ID: "s3", Stock: 12}},
		Shards: 4, KeyTTLAfterEnd: time.Hour, PerUserLimit: limit, MaxQty: min(limit, 3),
	}
	mustPreheat(t, s, a)
	exp := store.ExpireAt(a)
	l := &ul13Ledger{releasedAt: map[store.Token]time.Time{}}
	users := []string{"ua", "ub", "uc", "ud", "ue", "uf"}
	var ops, oks, atLimit, empty, timeouts, moves atomic.Int64
	var replayReleased sync.Map

	stop := make(chan struct{})
	var bg sync.WaitGroup
	// reconciler: releases pending older than 150 ms.
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			cut := time.Now().Add(-20 * time.Millisecond).UnixMilli()
			for _, sku := range []string{"s1", "s2", "s3", store.BundleSKU} {
				_ = s.StalePending(context.Background(), act, sku, a.Shards, cut, 100, func(rs []store.Reservation) error {
					for _, r := range rs {
						code, err := s.ReleaseSent(context.Background(), r.Token, a.Shards, "timeout", time.Now().UnixMilli(), r.CreatedMs)
						if err == nil && code == lua.OK {
							l.released(r.Token)
						}
					}
					return nil
				})
			}
		}
	}()
	// monitor: per-user units on each shard never above the limit.
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			for _, b := range ul13Scan(t, s, act, a.Shards, limit, false) {
				l.fail("monitor: %s", b)
			}
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w) + limit*100))
			for i := 0; i < per; i++ {
				ops.Add(1)
				if !burst {
					time.Sleep(time.Duration(rng.Intn(1500)) * time.Microsecond)
				}
				user := users[rng.Intn(len(users))]
				start := time.Now()
				if rng.Intn(10) == 0 {
					// bundle of two SKUs, one unit each
					br, err := s.ReserveBundle(context.Background(), store.BundleRequest{
						Activity: act, User: user, Items: []store.BundleItem{{SKU: "s1", Qty: 1}, {SKU: "s3", Qty: 1}},
						Limit: limit, Shards: a.Shards, NowMs: time.Now().UnixMilli(), ExpireAt: exp,
					})
					if err != nil {
						continue
					}
					switch br.Code {
					case lua.OK:
						oks.Add(1)
						ul13Settle(s, a, l, rng, br.Token)
					case lua.Pending, lua.Purchased:
						atLimit.Add(1)
						l.checkNamed(start, store.ReserveResult{Code: br.Code, Token: br.Token}, "bundle")
						if br.Token == (store.Token{}) {
							l.fail("bundle at-limit answer %v to %s names none", br.Code, user)
						} else if rv, ok, err := s.Lookup(context.Background(), br.Token, a.Shards); err == nil && (!ok || rv.User != user) {
							l.fail("bundle at-limit answer to %s names %v: found %v, user %q", user, br.Token, ok, rv.User)
						}
					}
					continue
				}
				sku := a.SKUs[rng.Intn(len(a.SKUs))]
				if burst && rng.Intn(3) > 0 {
					sku = a.SKUs[0]
				}
				q := store.ReserveRequest{Activity: act, SKU: sku.ID, User: user, Qty: 1 + rng.Int63n(a.MaxQty), Limit: limit,
					Shards: a.Shards, NowMs: time.Now().UnixMilli(), ExpireAt: exp, Stock: sku.Stock}
				withRid := rng.Intn(3) == 0 && !(burst && rng.Intn(3) > 0)
				if withRid {
					q.RequestID = fmt.Sprintf("rid-%d-%d", w, i)
				}
				rctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.Intn(8) == 0 {
					// a caller that gives up: a timeout mid-call (abortLater)
					rctx, cancel = context.WithTimeout(rctx, time.Duration(50+rng.Intn(1500))*time.Microsecond)
				}
				res, err := s.Reserve(rctx, q)
				cancel()
				if err != nil {
					timeouts.Add(1)
					continue
				}
				if res.Moves > 0 {
					moves.Add(1)
				}
				switch res.Code {
				case lua.OK:
					oks.Add(1)
					if withRid {
						ul13Replay(s, l, q, res.Token, &replayReleased)
					}
					kind := ul13Settle(s, a, l, rng, res.Token)
					if withRid && kind != "" {
						ul13Replay(s, l, q, res.Token, &replayReleased)
					}
				case lua.Pending, lua.Purchased:
					atLimit.Add(1)
					l.checkNamed(start, res, "reserve")
					if res.Token != (store.Token{}) {
						rv, ok, err := s.Lookup(context.Background(), res.Token, a.Shards)
						if err == nil && (!ok || rv.User != user) {
							l.fail("at-limit answer to %s names %v: found %v, user %q", user, res.Token, ok, rv.User)
						}
					} else if !withRid {
						l.fail("at-limit answer %v to %s names none", res.Code, user)
					}
					if res.Token != (store.Token{}) && rng.Intn(3) == 0 {
						code, err := s.Release(context.Background(), res.Token, a.Shards, "refund", time.Now().UnixMilli(), res.Code == lua.Pending)
						if err == nil && code == lua.OK {
							l.released(res.Token)
						}
					}
				case lua.Empty:
					empty.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // aborts of timed-out calls, last reconciler passes
	close(stop)
	bg.Wait()
	bc, bb := s.ReserveBatchStats()
	t.Logf("batches %d buyers %d", bc, bb)
	t.Logf("limit %d: ops %d ok %d at-limit %d empty %d timeouts %d moves %d", limit, ops.Load(), oks.Load(), atLimit.Load(), empty.Load(), timeouts.Load(), moves.Load())
	replayReleased.Range(func(k, _ any) bool {
		if _, ok := l.releasedAt[k.(store.Token)]; !ok {
			l.fail("a replay answered RELEASED for %v, never released", k)
		}
		return true
	})
	for _, e := range l.errs {
		t.Error(e)
	}
	for _, b := range ul13Scan(t, s, act, a.Shards, limit, true) {
		t.Error("final: " + b)
	}
	st, err := s.Status(ctx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.SKUs {
		if !k.OK || k.Initial != k.Remaining+k.Pending+k.Confirmed {
			t.Errorf("status %+v", k)
		}
	}
}

// ul13Settle confirms, releases (shop 4xx), refunds after confirm, or
// leaves pending (the reconciler's); returns "confirmed", "released" or "".
func ul13Settle(s *store.Store, a *config.Activity, l *ul13Ledger, rng *rand.Rand, tok store.Token) string {
	c := context.Background()
	switch n := rng.Intn(10); {
	case n < 4:
		code, err := s.Confirm(c, tok, a.Shards, "O-"+tok.ID)
		if err == nil && code == lua.OK {
			if rng.Intn(2) == 0 {
				code, err := s.Release(c, tok, a.Shards, "refund", time.Now().UnixMilli(), false)
				if err == nil && code == lua.OK {
					l.released(tok)
					return "released"
				}
			}
			return "confirmed"
		}
	case n < 7:
		code, err := s.Release(c, tok, a.Shards, "shop 409", time.Now().UnixMilli(), true)
		if err == nil && code == lua.OK {
			l.released(tok)
			return "released"
		}
	}
	return ""
}

// ul13Replay repeats q (same request id): the answer must name tok, by its
// state: PENDING (not released before), PURCHASED (confirmed) or RELEASED.
func ul13Replay(s *store.Store, l *ul13Ledger, q store.ReserveRequest, tok store.Token, rel *sync.Map) {
	start := time.Now()
	q.NowMs = start.UnixMilli()
	rp, err := s.Reserve(context.Background(), q)
	if err != nil {
		return
	}
	if rp.Token != tok {
		l.fail("replay of %s (first OK %v): %v %v", q.RequestID, tok, rp.Code, rp.Token)
		return
	}
	switch rp.Code {
	case lua.Pending, lua.Purchased:
		l.checkNamed(start, rp, "replay")
	case lua.Released:
		rel.Store(tok, true)
	default:
		l.fail("replay of %s (first OK %v): %v", q.RequestID, tok, rp.Code)
	}
}
