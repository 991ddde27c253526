package lua_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// TestConfirmBatchMatchesConfirm: confirmbatch.lua confirms a batch
// exactly as confirm.lua confirms the same reservations one after another
// (no replay) — every code and every key afterwards; an id the batch
// names again is SAME — over pending,
// queued, confirmed, released and unknown reservations, quantities above
// one, an id named twice in one batch and order ids with and without one.
func TestConfirmBatchMatchesConfirm(t *testing.T) {
	f := newFx(t)
	rng := rand.New(rand.NewPCG(11, 37))
	for trial := range 400 {
		setup := [][]string{stock(rng.IntN(5), 10, 6, 2, 1)}
		var ids []string
		for k := range 6 {
			id := "T" + strconv.Itoa(k)
			ids = append(ids, id)
			user, qty := "u"+strconv.Itoa(k), strconv.Itoa(1+rng.IntN(3))
			switch rng.IntN(5) {
			case 0:
				setup = append(setup, []string{"HSET", kRes, id, "p|" + user + "|" + qty + "|900||"},
					[]string{"ZADD", kPending, "900", id})
			case 1:
				setup = append(setup, []string{"HSET", kRes, id, "q|" + user + "|" + qty + "|900||0-7"})
			case 2:
				setup = append(setup, []string{"HSET", kRes, id, "c|" + user + "|" + qty + "|900|O-" + id + "|"})
			case 3:
				setup = append(setup, []string{"HSET", kRes, id, "x|" + user + "|" + qty + "|900||timeout|950"})
			}
		}
		if rng.IntN(3) == 0 {
			setup = append(setup, []string{"ZADD", kPending, "800", "Z"})
		}
		var args []string
		for range 1 + rng.IntN(8) {
			oid := ""
			if rng.IntN(3) > 0 {
				oid = fmt.Sprintf("ord-%d", rng.IntN(100))
			}
			args = append(args, ids[rng.IntN(len(ids))], oid)
		}

		f.reset(setup)
		var want []string
		named := map[string]bool{}
		for i := 0; i < len(args); i += 2 {
			if named[args[i]] {
				want = append(want, "6") // SAME: named twice (the header's promise)
				continue
			}
			named[args[i]] = true
			want = append(want, f.run(lua.Confirm, confirmKeys, []string{args[i], args[i+1], ""})...)
		}
		wantState := f.dump()

		f.reset(setup)
		got := f.run(lua.ConfirmBatch, confirmKeys, args)
		gotState := f.dump()
		if !slices.Equal(got, want) {
			t.Errorf("trial %d: batch %q, one call each %q\nsetup %q\nargs %q", trial, got, want, setup, args)
		}
		if gotState != wantState {
			t.Errorf("trial %d: after the batch\n%s\nafter one call each\n%s\nsetup %q\nargs %q", trial, gotState, wantState, setup, args)
		}
		if t.Failed() {
			return
		}
	}
}
