package e2e_test

// Red-team round 10, memory a client can grow: Redis.

import (
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rt10memUserOn returns a user id (prefix + n) homed on shard of shards.
func rt10memUserOn(prefix string, shard, shards int) string {
	for n := 0; ; n++ {
		u := prefix + strconv.Itoa(n)
		if store.HomeShard(u, shards) == shard {
			return u
		}
	}
}

// rt10memMoves is the number of move ids recorded on the activity's shards
// (movesin: deposited here; moves: still recorded on the donor).
func rt10memMoves(t *testing.T, r *e2e.Redis, act string, shards int) (in, out int64) {
	t.Helper()
	for s := 0; s < shards; s++ {
		base := "seckill:{" + act + ":" + strconv.Itoa(s) + "}:"
		v, err := r.Node.Do("SCARD", base+"movesin")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		in += n
		v, err = r.Node.Do("HLEN", base+"moves")
		if err != nil {
			t.Fatal(err)
		}
		n, _ = strconv.ParseInt(v, 10, 64)
		out += n
	}
	return in, out
}

// TestRT10MemRepeatClicksAtLimitMoveStock: two buyers who each hold their
// one unit (per_user_limit 1), homed on the two shards of a SKU with one
// unit left, click "buy" again and again (no request id) — the most common
// request of a sale. store.Reserve steals units for a buyer whose home
// shard is dry BEFORE the reserve script has looked at the buyer's limit
// (skipReserve), so a repeat whose home shard is dry moves the last unit
// from the other shard onto its own, then is answered by its limit: the two
// buyers bounce the unit between the shards on every click. Every bounce
// leaves a move id in Redis (the home shard's movesin set, kept until the
// activity's keys expire, key_ttl_after_end after the end): Redis grows by
// one entry per repeat click, without bound, for clicks that buy nothing
// (BENCHMARKS "Redis memory per reservation": a refused buyer writes 0 B).
// And while the unit is in transit or a shard's sold-out flag is a moment
// behind, the clickers and everyone else are told 410 SOLD_OUT with a unit
// left (README, Failure behaviour: with qty 1 that cannot happen).
// With the defaults, the buyer memo answers a repeat of a CONFIRMED buyer
// from memory, so that case holds (subtest "defaults"); but a buyer whose
// reservation is still pending (their shop call in flight, or an unknown
// outcome left for the reconciler, up to pending_timeout) is never
// memoised, and bounces the unit with the defaults too; so does everyone
// with redis.buyer_memo: 0 or client_cache: false (both documented).
func TestRT10MemRepeatClicksAtLimitMoveStock(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	for _, c := range []struct {
		name, extra string
		pending     bool
	}{
		{"buyer_memo 0", "buyer_memo: 0", false},
		{"client_cache false", "client_cache: false", false},
		{"defaults", "", false},
		{"defaults, reservations pending", "", true},
	} {
		t.Run(c.name, func(t *testing.T) { rt10memPingPong(t, c.extra, c.pending) })
	}
}

func rt10memPingPong(t *testing.T, redisExtra string, pending bool) {
	const act = "pingpong"
	f := newFixture(t, func(o *e2e.Options) {
		if redisExtra != "" {
			o.RedisExtra = []string{redisExtra}
		}
		o.Activities = append(o.Activities, e2e.Activity{ID: act, Stock: 3, Shards: 2})
	})
	a := rt10memUserOn("a", 0, 2)
	b := rt10memUserOn("b", 1, 2)
	want := "ALREADY_PURCHASED"
	if pending {
		// The shop takes the buy and cuts the connection: the outcome is
		// unknown, the reservation stays pending (for the reconciler, up to
		// pending_timeout), and the buyer's repeats are 202 PENDING.
		f.shop.Cut(a)
		f.shop.Cut(b)
		wantCode(t, f.buy(act, a), "UPSTREAM_TIMEOUT", 504)
		wantCode(t, f.buy(act, b), "UPSTREAM_TIMEOUT", 504)
		want = "PENDING"
	} else {
		wantWin(t, f.buy(act, a))
		wantWin(t, f.buy(act, b))
	}
	if k := f.p.SKUStatus(t, act); k.Remaining != 1 {
		t.Fatalf("after two wins: %+v, want 1 unit left", k)
	}
	in0, out0 := rt10memMoves(t, f.redis, act, 2)
	const clicks = 1000
	codes := map[string]int{}
	for i := 0; i < clicks; i++ {
		u := a
		if i%2 == 1 {
			u = b
		}
		r := f.buy(act, u)
		codes[r.Code]++
		if r.Code != want && r.Code != "SOLD_OUT" {
			t.Fatalf("click %d of %s: %d %s, want %s", i, u, r.Status, r.Body, want)
		}
	}
	in1, out1 := rt10memMoves(t, f.redis, act, 2)
	k := f.p.SKUStatus(t, act)
	t.Logf("%d repeat clicks of two buyers at their limit: answers %v; movesin %d -> %d, moves %d -> %d; %+v", clicks, codes, in0, in1, out0, out1, k)
	if !k.OK || k.Remaining != 1 || k.Confirmed+k.Pending != 2 {
		t.Errorf("stock after the clicks: %+v, want 1 remaining, 2 held", k)
	}
	if in1-in0 > 2 {
		t.Errorf("%d repeat clicks of buyers at their limit recorded %d stock moves in Redis (movesin +%d, kept until the keys expire): "+
			"a buyer at their limit moves stock, and grows Redis, on repeat clicks", clicks, in1-in0, in1-in0)
	}
	// Others meanwhile: a fresh buyer between the two buyers' clicks must
	// get the unit left (DESIGN: no "fragment" refusals; README: with qty
	// 1 a buyer is never told SOLD_OUT while a unit is left).
	fresh := 0
	for i := 0; i < 200; i++ {
		f.buy(act, a)
		f.buy(act, b)
		r := f.buy(act, "fresh"+strconv.Itoa(i))
		if r.Code == "WIN" {
			break
		}
		if r.Code != "SOLD_OUT" {
			t.Fatalf("fresh buyer %d: %d %s", i, r.Status, r.Body)
		}
		fresh++
	}
	if fresh > 0 {
		t.Errorf("%d fresh buyers were told 410 SOLD_OUT, one after the other, while the SKU had a unit left and two buyers at their limit kept clicking", fresh)
	}
	if n := codes["SOLD_OUT"]; n > 0 {
		t.Errorf("%d of %d repeat clicks answered 410 SOLD_OUT while the SKU had a unit left (SPEC §4: %s for a buyer at the limit; SOLD_OUT only when no stock is left)", n, clicks, want)
	}
}
