package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// The end game of competing bundles (docs/decisions.md §51 "Left", §61):
// with no fault at all, bundles a:1,b:1 whose units sit on one shard, and
// hundreds of buyers homed on the others asking at once through two
// stores, every buyer must have an answer and, once all of them heard
// SOLD_OUT, no whole bundle may be left on sale (a of one shard and b of
// another, halves moved by bundles that gave up). Rounds from
// BUNDLE_ENDGAME_ROUNDS (default 6), each on a fresh activity.
func TestBundleEndGame(t *testing.T) {
	srv := redistest.Start(t)
	runBundleEndGame(t, []string{srv.Addr}, false, srv.Do)
}

// TestBundleEndGameCluster is TestBundleEndGame on a 3-master cluster
// (each shard's keys on the master of its tag's slot).
func TestBundleEndGameCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	runBundleEndGame(t, cl.Addrs(), true, func(args ...string) (string, error) {
		m, err := cl.MasterFor(args[1])
		if err != nil {
			return "", err
		}
		return m.Do(args...)
	})
}

func runBundleEndGame(t *testing.T, addrs []string, cluster bool, do func(args ...string) (string, error)) {
	rounds := 6
	if v, err := strconv.Atoi(os.Getenv("BUNDLE_ENDGAME_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var again, gone atomic.Int64 // end-game looks (bundleLooksAgain): went round again, said SOLD_OUT
	defer store.SetBundleEndSeen(func(a bool) {
		if a {
			again.Add(1)
		} else {
			gone.Add(1)
		}
	})()
	sa := openStore(t, redisConfig(addrs, cluster))
	sb := openStore(t, redisConfig(addrs, cluster))
	bad := 0
	for r := 0; r < rounds; r++ {
		shards := 4 + 4*(r%2)
		if left := bundleEndGameRound(t, do, sa, sb, fmt.Sprintf("eg%d", r), shards); left > 0 {
			bad++
		}
	}
	t.Logf("rounds with a whole bundle left on sale after every buyer heard SOLD_OUT: %d of %d; end-game looks: %d went round again, %d found an item gone everywhere",
		bad, rounds, again.Load(), gone.Load())
	if bad > 0 {
		t.Errorf("%d of %d rounds left a whole bundle on sale after every buyer heard SOLD_OUT", bad, rounds)
	}
}

// bundleEndGameRound runs one wave and returns the bundles left on sale
// (the fewer of a's and b's units remaining).
func bundleEndGameRound(t *testing.T, do func(args ...string) (string, error), sa, sb *store.Store, id string, shards int) int64 {
	t.Helper()
	const stock, users = 25, 300
	a := bundleActivity(id, shards, 2, config.SKU{ID: "a", Stock: stock}, config.SKU{ID: "b", Stock: stock})
	mustPreheat(t, sa, a)
	// Every unit on shard 0, the other shards out (as red team bh's wave).
	for _, sku := range []string{"a", "b"} {
		for s, sk := range sa.SKUKeys(id, sku, shards).Shards {
			n := "0"
			if s == 0 {
				n = strconv.Itoa(stock)
			}
			if _, err := do("HSET", sk.Stock, "i", n, "r", n); err != nil {
				t.Fatalf("HSET: %v", err)
			}
			if s > 0 {
				if _, err := do("SET", sk.Out, "1", "PX", "3600000"); err != nil {
					t.Fatalf("SET: %v", err)
				}
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // cached flags invalidated
	var names []string
	for i := 0; len(names) < users; i++ {
		if u := id + "-u" + strconv.Itoa(i); store.HomeShard(u, shards) != 0 {
			names = append(names, u)
		}
	}
	codes := make([]lua.Code, len(names))
	var wg sync.WaitGroup
	start := make(chan struct{})
	sem := make(chan struct{}, 64)
	for i, u := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			sem <- struct{}{}
			defer func() { <-sem }()
			s := sa
			for try := 0; try < 50; try++ {
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := s.ReserveBundle(c, bundleReq(a, u, item("a", 1), item("b", 1)))
				cancel()
				if err == nil {
					codes[i] = res.Code
					return
				}
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("%s: %v", u, err)
					return
				}
				// Come back (transit, §54), on the other store.
				if s == sa {
					s = sb
				} else {
					s = sa
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("%s: no answer in 50 tries", u)
		}()
	}
	close(start)
	wg.Wait()
	won, empty := 0, 0
	for _, c := range codes {
		switch c {
		case lua.OK:
			won++
		case lua.Empty:
			empty++
		}
	}
	st := skuStatus(t, sa, a)
	left := min(st["a"].Remaining, st["b"].Remaining)
	if left > 0 {
		var where []string
		for _, sku := range []string{"a", "b"} {
			var rs []string
			for _, sk := range sa.SKUKeys(id, sku, shards).Shards {
				r, _ := do("HGET", sk.Stock, "r")
				rs = append(rs, r)
			}
			where = append(where, fmt.Sprintf("%s %v", sku, rs))
		}
		t.Logf("%s (%d shards): %d won, %d SOLD_OUT; %d whole bundles left on sale, per shard %v", id, shards, won, empty, left, where)
	}
	if won+int(left) != stock && st["a"].Remaining == st["b"].Remaining && won+int(st["a"].Remaining) != stock {
		t.Errorf("%s: %d won, %d left of %d", id, won, left, stock)
	}
	return left
}

// README (Bundles, Failure behaviour and limits): before SOLD_OUT while
// every item looks on sale somewhere, a bundle waits 2–6, then 2–10, then
// 2–18 ms and goes round again, at most three times. Here b's flags say a
// donor has units it does not have (r 0, no out flag): the worst case,
// every look goes round again. The call ends SOLD_OUT after exactly three
// looks and at least 6 ms of waits (at most 34), takes nothing, and
// leaves every unit where it was.
func TestBundleEndGameWaitIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	const shards = 2
	a := bundleActivity("egw", shards, 2, config.SKU{ID: "a", Stock: 2}, config.SKU{ID: "b", Stock: 2})
	mustPreheat(t, s, a)
	user := userOn(1, shards, 0)
	// a: both units on shard 0 (shard 1 out); b: none anywhere, shard 0's
	// flag not set.
	for _, sku := range []string{"a", "b"} {
		for i, sk := range s.SKUKeys(a.ID, sku, shards).Shards {
			n := "0"
			if sku == "a" && i == 0 {
				n = "2"
			}
			if _, err := srv.Do("HSET", sk.Stock, "i", n, "r", n); err != nil {
				t.Fatalf("HSET: %v", err)
			}
			if i == 1 {
				if _, err := srv.Do("SET", sk.Out, "1", "PX", "3600000"); err != nil {
					t.Fatalf("SET: %v", err)
				}
			} else if _, err := srv.Do("DEL", sk.Out); err != nil {
				t.Fatalf("DEL: %v", err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // cached flags invalidated
	var looks []bool
	var mu sync.Mutex
	defer store.SetBundleEndSeen(func(again bool) {
		mu.Lock()
		looks = append(looks, again)
		mu.Unlock()
	})()
	t0 := time.Now()
	res, err := s.ReserveBundle(ctx(t), bundleReq(a, user, item("a", 1), item("b", 1)))
	took := time.Since(t0)
	if err != nil || res.Code != lua.Empty || res.Short != "b" {
		t.Fatalf("ReserveBundle = %+v, %v; want EMPTY short b", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(looks) != 3 || !looks[0] || !looks[1] || !looks[2] {
		t.Fatalf("end-game looks %v; want three that went round again", looks)
	}
	if took < 6*time.Millisecond || took > 2*time.Second {
		t.Fatalf("the call took %v; want the three waits (6–34 ms) and the calls around them", took)
	}
	// Read raw: b's counters were zeroed by hand, so Status counts its
	// stock in transit.
	for _, sku := range []string{"a", "b"} {
		var r, p int
		for _, sk := range s.SKUKeys(a.ID, sku, shards).Shards {
			for f, n := range map[string]*int{"r": &r, "p": &p} {
				v, err := srv.Do("HGET", sk.Stock, f)
				if err != nil {
					t.Fatalf("HGET: %v", err)
				}
				k, _ := strconv.Atoi(v)
				*n += k
			}
		}
		if want := map[string]int{"a": 2, "b": 0}[sku]; r != want || p != 0 {
			t.Fatalf("after the call, %s: %d on sale, %d pending; want %d, 0", sku, r, p, want)
		}
	}
	t.Logf("SOLD_OUT after three looks in %v", took)
}
