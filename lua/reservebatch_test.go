package lua_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// batchBuyer is one buyer of a reservebatch.lua call.
type batchBuyer struct {
	user       string
	qty, limit int
	tok        string
}

// runBatch runs reservebatch.lua and returns each buyer's reply as text.
func (f *fx) runBatch(mode string, buyers []batchBuyer) [][]string {
	f.t.Helper()
	args := []string{"1000", strconv.FormatInt(f.exp, 10), mode}
	for _, b := range buyers {
		args = append(args, b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok)
	}
	out := f.batchReplies(f.text(f.script(lua.ReserveBatch, reserveKeys[:6], args)))
	if len(out) != len(buyers) {
		f.t.Fatalf("reservebatch: %d replies for %d buyers", len(out), len(buyers))
	}
	return out
}

// batchReplies cuts reservebatch.lua's flat reply into the buyers'
// replies: each follows its length.
func (f *fx) batchReplies(flat []string) [][]string {
	f.t.Helper()
	var out [][]string
	for at := 0; at < len(flat); {
		k, err := strconv.Atoi(flat[at])
		if err != nil || k < 1 || at+1+k > len(flat) {
			f.t.Fatalf("reservebatch: reply %q: no reply of length %q at %d", flat, flat[at], at)
		}
		out = append(out, flat[at+1:at+1+k])
		at += 1 + k
	}
	return out
}

// dump is every key of the shard as text, with whether it expires, so two
// runs that should leave the same state can be compared.
func (f *fx) dump() string {
	f.t.Helper()
	var b strings.Builder
	for _, k := range reserveKeys {
		typ, _ := f.do("TYPE", k).ToString()
		var v any
		switch typ {
		case "hash":
			v = f.hash(k)
		case "zset":
			v, _ = f.do("ZRANGE", k, "0", "-1", "WITHSCORES").AsStrSlice()
		case "string":
			v, _ = f.do("GET", k).ToString()
		case "none":
			continue
		default:
			v = typ
		}
		fmt.Fprintf(&b, "%s %v expires=%v\n", k, v, f.int("PTTL", k) > 0)
	}
	return b.String()
}

// matchesReserve runs buyers on setup both ways — reservebatch.lua once,
// and reserve.lua's short call once per buyer in order — and reports every
// reply and the keys afterwards that differ; false when any did.
func (f *fx) matchesReserve(trial int, setup [][]string, mode string, buyers []batchBuyer) bool {
	f.t.Helper()
	f.reset(setup)
	var want [][]string
	for _, b := range buyers {
		want = append(want, f.run(lua.Reserve, reserveKeys[:6],
			[]string{b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok, "1000", strconv.FormatInt(f.exp, 10), mode}))
	}
	wantState := f.dump()

	f.reset(setup)
	got := f.runBatch(mode, buyers)
	gotState := f.dump()
	ok := true
	for i := range buyers {
		if !slices.Equal(got[i], want[i]) {
			f.t.Errorf("trial %d, buyer %d %+v: batch replied %q, one call each %q\nsetup %q\nbuyers %+v", trial, i, buyers[i], got[i], want[i], setup, buyers)
			ok = false
		}
	}
	if gotState != wantState {
		f.t.Errorf("trial %d: after the batch\n%s\nafter one call each\n%s\nsetup %q\nbuyers %+v", trial, gotState, wantState, setup, buyers)
		ok = false
	}
	return ok
}

// TestReserveBatchMatchesReserve: reservebatch.lua decides a batch exactly
// as reserve.lua's short call decides the same buyers one after another —
// every reply and every key afterwards — over random shards (not preheated,
// empty, a few units), buyers at their limit with pending, confirmed,
// released or lost last reservations, a user several times in one batch,
// quantities above one, and tombstoned token ids.
func TestReserveBatchMatchesReserve(t *testing.T) {
	f := newFx(t)
	rng := rand.New(rand.NewPCG(10, 27))
	for trial := range 800 {
		var setup [][]string
		if rng.IntN(12) > 0 {
			r := rng.IntN(7)
			setup = append(setup, stock(r, r+5, 3, 2, 0))
		}
		if rng.IntN(2) == 0 {
			setup = append(setup, []string{"SET", kEpoch, strconv.Itoa(rng.IntN(100))})
		}
		for u := range 5 {
			if rng.IntN(2) == 0 {
				continue
			}
			user := "u" + strconv.Itoa(u)
			units := rng.IntN(3)
			// One held id, or (per_user_limit >= 2) a list of up to three,
			// the most recent first, each with its own record or none.
			held := []string{"L" + strconv.Itoa(u)}
			for k := rng.IntN(3); k > 0; k-- {
				held = append(held, "M"+strconv.Itoa(u)+"-"+strconv.Itoa(k))
			}
			setup = append(setup, []string{"HSET", kUsers, user, strconv.Itoa(units) + "|" + strings.Join(held, "|")})
			for _, last := range held {
				switch rng.IntN(4) {
				case 0:
					setup = append(setup, []string{"HSET", kRes, last, "p|" + user + "|1|900||"})
				case 1:
					setup = append(setup, []string{"HSET", kRes, last, "c|" + user + "|1|900|O-" + last + "|"})
				case 2:
					setup = append(setup, []string{"HSET", kRes, last, "x|" + user + "|1|900||timeout|950"})
				}
			}
		}
		if rng.IntN(3) == 0 {
			setup = append(setup, []string{"ZADD", kPending, "900", "Z"})
		}
		buyers := make([]batchBuyer, 1+rng.IntN(12))
		for i := range buyers {
			limit := 1 + rng.IntN(3)
			buyers[i] = batchBuyer{user: "u" + strconv.Itoa(rng.IntN(6)), qty: 1 + rng.IntN(limit), limit: limit, tok: fmt.Sprintf("T%d", i)}
			if rng.IntN(10) == 0 { // abort.lua's tombstone
				setup = append(setup, []string{"HSET", kRes, buyers[i].tok, "x|" + buyers[i].user + "|0|900||store_timeout|950"})
			}
		}
		mode := []string{"0", "2"}[rng.IntN(2)]

		if !f.matchesReserve(trial, setup, mode, buyers) {
			return
		}
	}
}

// TestReserveBatchMatchesReserveLongLists: the same comparison for buyers
// who hold many reservations (per_user_limit in the tens): a users list at
// its 32 names, wins in one batch that push the oldest names out, and
// at-limit answers read over long lists.
func TestReserveBatchMatchesReserveLongLists(t *testing.T) {
	f := newFx(t)
	rng := rand.New(rand.NewPCG(12, 29))
	for trial := range 150 {
		setup := [][]string{stock(20, 100, 3, 2, 0), {"SET", kEpoch, "7"}}
		for u := range 3 {
			user := "u" + strconv.Itoa(u)
			units := 20 + rng.IntN(20)
			var held []string
			for k := range min(units, 32) {
				tok := fmt.Sprintf("H%d-%d", u, k)
				held = append(held, tok)
				switch rng.IntN(5) {
				case 0:
					setup = append(setup, []string{"HSET", kRes, tok, "p|" + user + "|1|900||"})
				case 1, 2:
					setup = append(setup, []string{"HSET", kRes, tok, "c|" + user + "|1|900|O-" + tok + "|"})
				case 3:
					setup = append(setup, []string{"HSET", kRes, tok, "x|" + user + "|1|900||timeout|950"})
				}
			}
			setup = append(setup, []string{"HSET", kUsers, user, strconv.Itoa(units) + "|" + strings.Join(held, "|")})
		}
		buyers := make([]batchBuyer, 1+rng.IntN(16))
		for i := range buyers {
			limit := 20 + rng.IntN(25)
			buyers[i] = batchBuyer{user: "u" + strconv.Itoa(rng.IntN(4)), qty: 1 + rng.IntN(3), limit: limit, tok: fmt.Sprintf("T%d", i)}
		}
		mode := []string{"0", "2"}[rng.IntN(2)]

		if !f.matchesReserve(trial, setup, mode, buyers) {
			return
		}
	}
}
