package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// bundleActivity is an activity of several SKUs, open now.
func bundleActivity(id string, shards int, limit int64, skus ...config.SKU) *config.Activity {
	a := newActivity(id, 0, shards, limit)
	a.SKUs = skus
	return a
}

func bundleReq(a *config.Activity, user string, items ...store.BundleItem) store.BundleRequest {
	return store.BundleRequest{Activity: a.ID, User: user, Items: items, Limit: a.PerUserLimit, Shards: a.Shards,
		NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a)}
}

func item(sku string, qty int64) store.BundleItem { return store.BundleItem{SKU: sku, Qty: qty} }

// skuStatus is the status of every SKU of a by id, each checked to keep
// the invariant (remaining + pending + confirmed + in transit == initial).
func skuStatus(t testing.TB, s *store.Store, a *config.Activity) map[string]store.SKUStatus {
	t.Helper()
	st, err := s.Status(ctx(t), a)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	out := map[string]store.SKUStatus{}
	for _, k := range st.SKUs {
		if !k.OK {
			t.Fatalf("sku %s: invariant broken: %+v", k.ID, k)
		}
		if k.Remaining+k.Pending+k.Confirmed != k.Initial {
			t.Fatalf("sku %s: remaining %d + pending %d + confirmed %d != stock %d", k.ID, k.Remaining, k.Pending, k.Confirmed, k.Initial)
		}
		out[k.ID] = k
	}
	return out
}

type bundleJob struct {
	user   string
	items  []store.BundleItem // nil: a single buy of single
	single store.BundleItem
	bres   store.BundleResult
	sres   store.ReserveResult
	err    error
}

func (j *bundleJob) ok() bool {
	if j.items != nil {
		return j.bres.Code == lua.OK
	}
	return j.sres.Code == lua.OK
}

func (j *bundleJob) token() store.Token {
	if j.items != nil {
		return j.bres.Token
	}
	return j.sres.Token
}

// units is what the job holds of each SKU when it won.
func (j *bundleJob) units() map[string]int64 {
	m := map[string]int64{}
	if j.items == nil {
		m[j.single.SKU] += j.single.Qty
	}
	for _, it := range j.items {
		m[it.SKU] += it.Qty
	}
	return m
}

// Thousands of bundles and single buys of the same SKUs at once: no SKU is
// oversold, every SKU's counters add up to exactly what the winners were
// told (a partial bundle would show as units pending that no answer
// accounts for), nobody holds more than the per-user limit across
// bundles and single buys, and releasing a bundle gives back every item.
func TestBundleConcurrentWithSingleBuys(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	runBundleSpike(t, s, "act_b1")
}

func runBundleSpike(t *testing.T, s *store.Store, id string) {
	a := bundleActivity(id, 4, 3,
		config.SKU{ID: "a", Stock: 70}, config.SKU{ID: "b", Stock: 120}, config.SKU{ID: "c", Stock: 45})
	mustPreheat(t, s, a)
	stock := map[string]int64{"a": 70, "b": 120, "c": 45}
	shapes := [][]store.BundleItem{
		{item("a", 1), item("b", 2)},
		{item("b", 1), item("c", 1)},
		{item("c", 1), item("a", 1), item("b", 1)},
		{item("c", 2)},
	}
	rng := rand.New(rand.NewPCG(7, 13))
	var jobs []*bundleJob
	const users, tries = 1200, 2
	for try := 0; try < tries; try++ {
		for u := 0; u < users; u++ {
			j := &bundleJob{user: "user-" + strconv.Itoa(u)}
			switch k := rng.IntN(len(shapes) + 3); {
			case k < len(shapes):
				j.items = shapes[k]
			default:
				j.single = item([]string{"a", "b", "c"}[k-len(shapes)], 1)
			}
			jobs = append(jobs, j)
		}
	}
	rng.Shuffle(len(jobs), func(i, k int) { jobs[i], jobs[k] = jobs[k], jobs[i] })
	next := make(chan *bundleJob)
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if j.items != nil {
					j.bres, j.err = s.ReserveBundle(c, bundleReq(a, j.user, j.items...))
				} else {
					q := reserveReq(a, j.user, j.single.Qty)
					q.SKU = j.single.SKU
					j.sres, j.err = s.Reserve(c, q)
				}
				cancel()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()

	sold := map[string]int64{}
	perUser := map[string]int64{}
	seen := map[store.Token]bool{}
	var bundles []*bundleJob
	for _, j := range jobs {
		if j.err != nil {
			t.Fatalf("%s: %v", j.user, j.err)
		}
		if !j.ok() {
			if j.items != nil && j.bres.Code == lua.Empty && j.bres.Short == "" {
				t.Fatalf("%s: SOLD_OUT names no SKU", j.user)
			}
			continue
		}
		if seen[j.token()] {
			t.Fatalf("token %v issued twice", j.token())
		}
		seen[j.token()] = true
		for sku, n := range j.units() {
			sold[sku] += n
			perUser[j.user] += n
		}
		if j.items != nil {
			if j.bres.Token.SKU != store.BundleSKU {
				t.Fatalf("bundle token %v: SKU part is not %q", j.bres.Token, store.BundleSKU)
			}
			bundles = append(bundles, j)
		}
	}
	if len(bundles) == 0 {
		t.Fatal("no bundle won: the test proves nothing")
	}
	for u, n := range perUser {
		if n > a.PerUserLimit {
			t.Fatalf("user %s holds %d units, limit %d", u, n, a.PerUserLimit)
		}
	}
	st := skuStatus(t, s, a)
	for sku, k := range st {
		if sold[sku] > stock[sku] {
			t.Fatalf("sku %s oversold: %d of %d", sku, sold[sku], stock[sku])
		}
		if k.Pending != sold[sku] || k.Remaining != stock[sku]-sold[sku] {
			t.Fatalf("sku %s: pending %d remaining %d, but the winners were told %d units (partial bundle?)", sku, k.Pending, k.Remaining, sold[sku])
		}
	}
	// Release half the bundles: every item comes back.
	for i, j := range bundles {
		if i%2 == 1 {
			continue
		}
		rec, ok, err := s.Lookup(ctx(t), j.bres.Token, a.Shards)
		if err != nil || !ok || rec.State != store.StatePending || rec.Qty != sum(j.items) || rec.User != j.user {
			t.Fatalf("Lookup(%v) = %+v, %v, %v", j.bres.Token, rec, ok, err)
		}
		items, err := s.BundleItems(ctx(t), j.bres.Token, a.Shards)
		if err != nil || store.FormatItems(items) != store.FormatItems(j.items) {
			t.Fatalf("BundleItems(%v) = %v, %v; want %v", j.bres.Token, items, err, j.items)
		}
		if code, err := s.Release(ctx(t), j.bres.Token, a.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
			t.Fatalf("Release(%v) = %v, %v", j.bres.Token, code, err)
		}
		if code, err := s.Release(ctx(t), j.bres.Token, a.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.Same {
			t.Fatalf("Release again (%v) = %v, %v; want SAME", j.bres.Token, code, err)
		}
		for _, it := range j.items {
			sold[it.SKU] -= it.Qty
		}
	}
	// Confirm the others: pending moves to confirmed on every item.
	confirmed := map[string]int64{}
	for i, j := range bundles {
		if i%2 == 0 {
			continue
		}
		if code, err := s.Confirm(ctx(t), j.bres.Token, a.Shards, "O-"+strconv.Itoa(i)); err != nil || code != lua.OK {
			t.Fatalf("Confirm(%v) = %v, %v", j.bres.Token, code, err)
		}
		if code, err := s.Release(ctx(t), j.bres.Token, a.Shards, "shop_status_500", time.Now().UnixMilli(), true); err != nil || code != lua.Confirmed {
			t.Fatalf("pending-only Release of a confirmed bundle = %v, %v; want CONFIRMED", code, err)
		}
		for _, it := range j.items {
			confirmed[it.SKU] += it.Qty
		}
	}
	st = skuStatus(t, s, a)
	for sku, k := range st {
		if k.Remaining != stock[sku]-sold[sku] || k.Confirmed != confirmed[sku] || k.Pending != sold[sku]-confirmed[sku] {
			t.Fatalf("sku %s after releases: %+v; want remaining %d confirmed %d pending %d", sku, k,
				stock[sku]-sold[sku], confirmed[sku], sold[sku]-confirmed[sku])
		}
	}
	if n, err := s.SettleMoves(ctx(t), a, 0, time.Now()); err != nil || n != 0 {
		t.Fatalf("SettleMoves after the spike = %d, %v; want 0 (no move left behind)", n, err)
	}
}

func sum(items []store.BundleItem) int64 {
	var n int64
	for _, it := range items {
		n += it.Qty
	}
	return n
}

// SOLD_OUT names the SKU that was short, and the bundle takes nothing of
// the others.
func TestBundleSoldOutNamesShortSKU(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := bundleActivity("act_b2", 2, 5, config.SKU{ID: "a", Stock: 10}, config.SKU{ID: "b", Stock: 1})
	mustPreheat(t, s, a)
	r, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("a", 2), item("b", 1)))
	if err != nil || r.Code != lua.OK {
		t.Fatalf("first bundle = %+v, %v", r, err)
	}
	r, err = s.ReserveBundle(ctx(t), bundleReq(a, "u2", item("a", 2), item("b", 1)))
	if err != nil || r.Code != lua.Empty || r.Short != "b" {
		t.Fatalf("second bundle = %+v, %v; want EMPTY short b", r, err)
	}
	st := skuStatus(t, s, a)
	if st["a"].Pending != 2 || st["a"].Remaining != 8 || st["b"].Pending != 1 || st["b"].Remaining != 0 {
		t.Fatalf("status = %+v; the refused bundle took units", st)
	}
	// More than a SKU has in all: short on it, whichever shard.
	r, err = s.ReserveBundle(ctx(t), bundleReq(a, "u3", item("b", 1), item("a", 1)))
	if err != nil || r.Code != lua.Empty || r.Short != "b" {
		t.Fatalf("third bundle = %+v, %v; want EMPTY short b", r, err)
	}
	// Releasing the first bundle gives b back: the next one gets it.
	if code, err := s.Release(ctx(t), mustBundleTok(t, s, a, "u1"), a.Shards, "test", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	// (The sold-out flag in local memory is invalidated asynchronously.)
	eventually(t, 5*time.Second, "bundle after the release", func() bool {
		r, err = s.ReserveBundle(ctx(t), bundleReq(a, "u2", item("a", 2), item("b", 1)))
		if err != nil || (r.Code != lua.OK && !(r.Code == lua.Empty && r.FromMemory)) {
			t.Fatalf("bundle after the release = %+v, %v", r, err)
		}
		return r.Code == lua.OK
	})
	skuStatus(t, s, a)
}

// mustBundleTok is user's last reservation, asked by a bundle over the limit.
func mustBundleTok(t *testing.T, s *store.Store, a *config.Activity, user string) store.Token {
	t.Helper()
	r, err := s.ReserveBundle(ctx(t), bundleReq(a, user, item("a", a.PerUserLimit)))
	if err != nil || r.Code != lua.Pending {
		t.Fatalf("bundle over the limit = %+v, %v; want PENDING", r, err)
	}
	return r.Token
}

// The per-user limit counts every unit of a bundle, and single buys and
// bundles share it.
func TestBundlePerUserLimitCountsEveryUnit(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := bundleActivity("act_b3", 2, 3, config.SKU{ID: "a", Stock: 10}, config.SKU{ID: "b", Stock: 10})
	mustPreheat(t, s, a)
	if _, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("a", 2), item("b", 2))); err == nil {
		t.Fatal("a bundle of 4 units under limit 3 was accepted")
	}
	if _, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("a", 1), item("a", 1))); err == nil {
		t.Fatal("a bundle naming a SKU twice was accepted")
	}
	b, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("a", 1), item("b", 2)))
	if err != nil || b.Code != lua.OK {
		t.Fatalf("bundle = %+v, %v", b, err)
	}
	q := reserveReq(a, "u1", 1)
	q.SKU = "a"
	if r, err := s.Reserve(ctx(t), q); err != nil || r.Code != lua.Pending || r.Token != b.Token {
		t.Fatalf("single buy at the limit = %+v, %v; want PENDING naming the bundle %v", r, err, b.Token)
	}
	if r, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("b", 1))); err != nil || r.Code != lua.Pending || r.Token != b.Token {
		t.Fatalf("bundle at the limit = %+v, %v; want PENDING", r, err)
	}
	if code, err := s.Confirm(ctx(t), b.Token, a.Shards, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	if r, err := s.ReserveBundle(ctx(t), bundleReq(a, "u1", item("b", 1))); err != nil || r.Code != lua.Purchased || r.OrderID != "O-1" {
		t.Fatalf("bundle after the confirm = %+v, %v; want PURCHASED O-1", r, err)
	}
	// An operator's release (refund) gives every unit back, and the limit.
	if code, err := s.Release(ctx(t), b.Token, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	st := skuStatus(t, s, a)
	if st["a"].Remaining != 10 || st["b"].Remaining != 10 {
		t.Fatalf("status after the release = %+v", st)
	}
	q.Qty = 3
	mustOK := func(r store.ReserveResult, err error) {
		t.Helper()
		if err != nil || r.Code != lua.OK {
			t.Fatalf("single buy of 3 after the release = %+v, %v", r, err)
		}
	}
	mustOK(s.Reserve(ctx(t), q))
}

// The same spike on a real 3-master cluster (placed shard tags): a bundle
// whose keys spanned two slots would fail here (a single node lets EVAL
// do it), as would a confirm or release of one.
func TestBundleCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3)
	s := openStore(t, redisConfig(cl.Addrs(), true))
	runBundleSpike(t, s, "act_bcl")
}

// A bundle call that times out during a stall (DEBUG SLEEP, CLIENT PAUSE
// WRITE) leaves nothing held: the abort releases a bundle whose script ran
// late, or its tombstone stops one that had not run; each buyer told
// "unavailable" then wins the bundle again, once.
func TestBundleStallLeavesNothingHeld(t *testing.T) {
	for _, tt := range stalls {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := stallStore(t)
			a := bundleActivity("act_bstall", 2, 2, config.SKU{ID: "a", Stock: 40}, config.SKU{ID: "b", Stock: 40})
			mustPreheat(t, s, a)
			// Every script in Redis before the stall (see warm), and the
			// sold-out flags in local memory.
			w, err := s.ReserveBundle(ctx(t), bundleReq(a, "warm", item("a", 1), item("b", 1)))
			if err != nil || w.Code != lua.OK {
				t.Fatalf("warm-up bundle = %+v, %v", w, err)
			}
			if c, err := s.Release(ctx(t), w.Token, a.Shards, "warm-up", time.Now().UnixMilli(), true); err != nil || c != lua.OK {
				t.Fatalf("Release(warm-up) = %v, %v", c, err)
			}
			var failed []string
			won := 0
			for round := 0; round < 2; round++ {
				wait := tt.start(t, srv)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := 0; i < 10; i++ {
					user := fmt.Sprintf("r%d-u%d", round, i)
					wg.Add(1)
					go func() {
						defer wg.Done()
						r, err := s.ReserveBundle(ctx(t), bundleReq(a, user, item("a", 1), item("b", 1)))
						mu.Lock()
						defer mu.Unlock()
						switch {
						case errors.Is(err, store.ErrUnavailable):
							failed = append(failed, user)
						case err != nil:
							t.Errorf("ReserveBundle(%s): %v", user, err)
						case r.Code == lua.OK:
							won++
						default:
							t.Errorf("ReserveBundle(%s) = %+v", user, r)
						}
					}()
				}
				wg.Wait()
				wait()
			}
			if len(failed) == 0 {
				t.Fatal("no bundle was in flight during a stall")
			}
			eventually(t, 3*time.Second, "only the winners' units pending after the stalls", func() bool {
				st, err := s.Status(ctx(t), a)
				if err != nil {
					return false
				}
				for _, k := range st.SKUs {
					if !k.OK || k.Pending != int64(won) {
						return false
					}
				}
				return true
			})
			for _, u := range failed {
				r, err := s.ReserveBundle(ctx(t), bundleReq(a, u, item("a", 1), item("b", 1)))
				if err != nil || r.Code != lua.OK {
					t.Fatalf("retry of %s after the stall = %+v, %v", u, r, err)
				}
				r, err = s.ReserveBundle(ctx(t), bundleReq(a, u, item("a", 1), item("b", 1)))
				if err != nil || r.Code != lua.Pending {
					t.Fatalf("second retry of %s = %+v, %v; want PENDING (limit 2)", u, r, err)
				}
			}
			st := skuStatus(t, s, a)
			n := int64(won + len(failed))
			if st["a"].Pending != n || st["b"].Pending != n {
				t.Fatalf("status %+v, want %d pending of each", st, n)
			}
		})
	}
}

// Durable winners (issue 11 §2) hold for bundles: a bundle the replica
// acknowledged is on it whole; with the replica stopped and on_timeout
// refuse, the bundle is released whole before the buyer hears.
func TestBundleDurableWinners(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	s := openStore(t, durableConfig([]string{m.Addr}, false, config.DurableRefuse))
	a := bundleActivity("act_bdw", 2, 3, config.SKU{ID: "a", Stock: 5}, config.SKU{ID: "b", Stock: 5})
	mustPreheat(t, s, a)

	q := bundleReq(a, "u1", item("a", 1), item("b", 2))
	b, err := s.ReserveBundle(ctx(t), q)
	if err != nil || b.Code != lua.OK {
		t.Fatalf("bundle = %+v, %v", b, err)
	}
	if d, err := s.MakeDurableBundle(ctx(t), q, b.Token); d != store.DurableOK || err != nil {
		t.Fatalf("MakeDurableBundle with the replica up = %v, %v", d, err)
	}
	if !replicaHas(t, r, s, a, b.Token) {
		t.Fatal("a durable bundle is not on the replica")
	}

	r.Pause(t)
	q = bundleReq(a, "u2", item("a", 1), item("b", 1))
	b, err = s.ReserveBundle(ctx(t), q)
	if err != nil || b.Code != lua.OK {
		t.Fatalf("bundle = %+v, %v", b, err)
	}
	d, err := s.MakeDurableBundle(ctx(t), q, b.Token)
	if d != store.DurableRefused || !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("MakeDurableBundle with the replica stopped = %v, %v; want refused", d, err)
	}
	res, ok, err := s.Lookup(ctx(t), b.Token, a.Shards)
	if err != nil || !ok || res.State != store.StateReleased || res.Reason != "not_durable" {
		t.Fatalf("refused bundle = %+v, %v, %v; want released, not_durable", res, ok, err)
	}
	st := skuStatus(t, s, a)
	if st["a"].Pending != 1 || st["b"].Pending != 2 {
		t.Fatalf("status %+v: the refused bundle still holds units", st)
	}
	r.Resume(t)
}

// A bundle buyer under the per-user limit whose earlier bundle is still
// pending (a late reservation, its abort still to come, or a win whose
// confirm has not landed) asks for the bundle again after the SKUs sold
// out: bundle.lua finds no unit and says EMPTY, which was SOLD_OUT beside
// the units their own bundle holds (decisions §51's "a buyer below their
// limit", left open there; §50 closed it for single buys). Now PENDING
// naming the held bundle, as a single buy under the limit hears
// (emptyOrPending); SOLD_OUT again once it is settled.
func TestBundleUnderLimitHolderIsPendingNotSoldOut(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := bundleActivity("act_bul", 1, 4, config.SKU{ID: "a", Stock: 1}, config.SKU{ID: "b", Stock: 1})
	mustPreheat(t, s, a)
	held, err := s.ReserveBundle(ctx(t), bundleReq(a, "x", item("a", 1), item("b", 1)))
	if err != nil || held.Code != lua.OK {
		t.Fatalf("the held bundle = %+v, %v", held, err)
	}
	for _, via := range []string{"from memory", "by the script"} {
		r, err := s.ReserveBundle(ctx(t), bundleReq(a, "x", item("a", 1), item("b", 1)))
		if err != nil || r.Code != lua.Pending || r.Token != held.Token {
			t.Fatalf("%s: x's bundle again, under the limit, with one pending = %+v, %v; want PENDING naming %v",
				via, r, err, held.Token)
		}
	}
	// Another buyer: sold out.
	if r, err := s.ReserveBundle(ctx(t), bundleReq(a, "y", item("a", 1), item("b", 1))); err != nil || r.Code != lua.Empty {
		t.Fatalf("y's bundle = %+v, %v; want EMPTY", r, err)
	}
	// Confirmed: no longer in flight; x under the limit hears SOLD_OUT.
	if code, err := s.Confirm(ctx(t), held.Token, a.Shards, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	if r, err := s.ReserveBundle(ctx(t), bundleReq(a, "x", item("a", 1), item("b", 1))); err != nil || r.Code != lua.Empty {
		t.Fatalf("x's bundle after the confirm = %+v, %v; want EMPTY", r, err)
	}
	skuStatus(t, s, a)
}
