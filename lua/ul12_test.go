package lua_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// The users hash names every reservation a buyer holds, most recent
// first ("<units>|<last>|<older>|..."), so a buyer at their limit whose
// last reservation was given back (per_user_limit >= 2) is answered by
// one they still hold: PENDING while one is pending or queued, else
// ALREADY_PURCHASED with a confirmed one's token and order id; never a
// released one, never none while one is held.

// ul12Reserve is reserve.lua's short call (sync mode, mode "0": with the
// buyer memo).
func (f *fx) ul12Reserve(user string, qty, limit int, tok string) []string {
	f.t.Helper()
	return f.run(lua.Reserve, reserveKeys[:6], []string{user, strconv.Itoa(qty), strconv.Itoa(limit), tok, "1000", strconv.FormatInt(f.exp, 10), "0"})
}

func (f *fx) ul12Users(user string) string {
	f.t.Helper()
	v, err := f.do("HGET", kUsers, user).ToString()
	if err != nil {
		return ""
	}
	return v
}

func (f *fx) ul12WantUsers(user, want string) {
	f.t.Helper()
	if got := f.ul12Users(user); got != want {
		f.t.Errorf("users[%s] = %q, want %q", user, got, want)
	}
}

var ul12AbortKeys = []string{kStock, kUsers, kRes, kPending, kOut, kMovesIn, kEpoch}

func (f *fx) ul12Abort(tok, user string) []string {
	f.t.Helper()
	return f.run(lua.Abort, ul12AbortKeys, []string{tok, user, "store_timeout", "2000", "0", "", "0", strconv.FormatInt(f.exp, 10), "0"})
}

// TestUL12LastReleasedOtherPending: limit 2, two pending reservations;
// the shop refuses the second (pending-only release). The buyer asking
// for 2 more is PENDING with the first (SPEC §4: their reservation is
// still in flight), not ALREADY_PURCHASED without a token.
func TestUL12LastReleasedOtherPending(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(10, 10, 0, 0, 0), {"SET", kEpoch, "7"}})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T1"), []string{"1", "9"})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T2"), []string{"1", "8"})
	f.ul12WantUsers("u1", "2|T2|T1")
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T3"), []string{"3", "T2"})
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "shop 409", "2000", "1"}), []string{"1", "9"})
	f.ul12WantUsers("u1", "1|T1")
	wantReply(t, f.ul12Reserve("u1", 2, 2, "T4"), []string{"3", "T1"})
	// Confirmed since: ALREADY_PURCHASED with it, and the memo's units and epoch.
	wantReply(t, f.run(lua.Confirm, confirmKeys, []string{"T1", "O-1"}), []string{"1"})
	wantReply(t, f.ul12Reserve("u1", 2, 2, "T5"), []string{"4", "T1", "O-1", "", "1", "8"})
	// Within the limit again: a new last, the held one kept behind it.
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T6"), []string{"1", "8"})
	f.ul12WantUsers("u1", "2|T6|T1")
	// A pending one comes before a confirmed one, whichever is older.
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T7"), []string{"3", "T6"})
}

// TestUL12OlderReleasedKeepsLast: releasing a reservation that is not the
// last removes it from the list and keeps the last named.
func TestUL12OlderReleasedKeepsLast(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(10, 10, 0, 0, 0)})
	for _, tok := range []string{"T1", "T2", "T3"} {
		wantReply(t, f.ul12Reserve("u1", 1, 3, tok)[:1], []string{"1"})
	}
	f.ul12WantUsers("u1", "3|T3|T2|T1")
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "refund", "2000", "0"}), []string{"1", "8"})
	f.ul12WantUsers("u1", "2|T3|T1")
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T3", "refund", "2000", "0"}), []string{"1", "9"})
	f.ul12WantUsers("u1", "1|T1")
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T1", "refund", "2000", "0"}), []string{"1", "10"})
	f.ul12WantUsers("u1", "")
}

// TestUL12AbortNamesTheNextHeld: abort.lua's release of a late last
// reservation names the one still held.
func TestUL12AbortNamesTheNextHeld(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(10, 10, 0, 0, 0)})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T1"), []string{"1", "9"})
	wantReply(t, f.run(lua.Confirm, confirmKeys, []string{"T1", "O-1"}), []string{"1"})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T2"), []string{"1", "8"})
	wantReply(t, f.ul12Abort("T2", "u1"), []string{"1"})
	f.ul12WantUsers("u1", "1|T1")
	wantReply(t, f.ul12Reserve("u1", 2, 2, "T3"), []string{"4", "T1", "O-1", "", "1", ""})
}

// TestUL12QueuedHeld: queue mode, the first reservation queued (not sent
// yet), the last one released by the operator: PENDING with the queued one.
func TestUL12QueuedHeld(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(10, 10, 0, 0, 0)})
	q := func(tok string, qty int) []string {
		return f.run(lua.Reserve, reserveKeys, f.reserveArgs("u1", qty, 2, tok, true, 0, ""))
	}
	wantReply(t, q("T1", 1), []string{"1", "9"})
	wantReply(t, q("T2", 1), []string{"1", "8"})
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "cancelled", "2000", "0"}), []string{"1", "9"})
	wantReply(t, q("T3", 2), []string{"3", "T1"})
}

// TestUL12RequestID: a buyer at their limit with a request id is answered
// by a held reservation and the request id's record names it, so a repeat
// answers the same.
func TestUL12RequestID(t *testing.T) {
	f := newFx(t)
	const kRid = "t:{a:s:0}:rid:u1|r9"
	const kRidBits = "t:{a:s:0}:ridbits:s"
	ridKeys := append(append([]string{}, reserveKeys...), kRid, kRidBits)
	withRid := func(tok string) []string {
		return f.run(lua.Reserve, ridKeys, append(f.reserveArgs("u1", 2, 2, tok, false, 0, ""), "300000", "0", "4242", "8192"))
	}
	f.reset([][]string{stock(10, 10, 0, 0, 0)})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T1"), []string{"1", "9"})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T2"), []string{"1", "8"})
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "shop 409", "2000", "1"}), []string{"1", "9"})
	wantReply(t, withRid("R1"), []string{"3", "T1"})
	if got, _ := f.do("GET", kRid).ToString(); got != "3|T1" {
		t.Errorf("rid record = %q, want 3|T1", got)
	}
	wantReply(t, withRid("R2"), []string{"3", "T1"})
	wantReply(t, f.run(lua.Confirm, confirmKeys, []string{"T1", "O-1"}), []string{"1"})
	wantReply(t, withRid("R3"), []string{"4", "T1", "O-1"})
	// The record named a reservation given back since: decided afresh.
	f.reset([][]string{stock(10, 10, 0, 0, 0), {"SET", kRid, "3|T2", "PX", "300000"}})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T1"), []string{"1", "9"})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T2"), []string{"1", "8"})
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "shop 409", "2000", "1"}), []string{"1", "9"})
	wantReply(t, withRid("R4"), []string{"3", "T1"})
	if got, _ := f.do("GET", kRid).ToString(); got != "3|T1" {
		t.Errorf("rid record after the repeat = %q, want 3|T1", got)
	}
}

// TestUL12OldFormat: a value an older build wrote ("<units>|<last>", no
// list) still parses; a release of its only named reservation keeps it
// named (released: never answered with), the units go down.
func TestUL12OldFormat(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(8, 10, 2, 0, 0), {"HSET", kUsers, "u1", "2|T2"},
		{"HSET", kRes, "T1", "p|u1|1|900||"}, {"HSET", kRes, "T2", "p|u1|1|950||"},
		{"ZADD", kPending, "900", "T1", "950", "T2"}})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T3"), []string{"3", "T2"})
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "shop 409", "2000", "1"}), []string{"1", "9"})
	f.ul12WantUsers("u1", "1|T2")
	// Which one is held is not known: none is named, never the released one.
	wantReply(t, f.ul12Reserve("u1", 2, 2, "T4"), []string{"4", "", ""})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T5"), []string{"1", "8"})
	f.ul12WantUsers("u1", "2|T5|T2")
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T6"), []string{"3", "T5"})
	// The old build's giveBack kept a released token in a list: skipped.
	f.reset([][]string{stock(8, 10, 1, 1, 0), {"HSET", kUsers, "u1", "2|T3|T2|T1"},
		{"HSET", kRes, "T1", "c|u1|1|900|O-1|"}, {"HSET", kRes, "T2", "p|u1|1|950||"},
		{"HSET", kRes, "T3", "x|u1|1|960||shop 409|970"}})
	wantReply(t, f.ul12Reserve("u1", 1, 2, "T4"), []string{"3", "T2"})
}

// TestUL12Bundle: bundle.lua adds its token to the list, answers a buyer
// at their limit by a held reservation, and bundlerelease.lua removes it.
func TestUL12Bundle(t *testing.T) {
	f := newFx(t)
	exp := strconv.FormatInt(f.exp, 10)
	keys := []string{kUsers, kRes, kPending, kMovesIn, kStock, kOut, kStockB, kOutB}
	args := func(field string) []string {
		return []string{"u1", "3", field, "1000", exp, "a:1,b:1", "2", "1", "0", "", "0", "1", "0", "", "0"}
	}
	relKeys := []string{kUsers, kRes, kPending, kEpoch, kStock, kOut, kStockB, kOutB}
	f.reset([][]string{stock(10, 10, 0, 0, 0), {"HSET", kStockB, "r", "10", "i", "10", "p", "0", "c", "0", "x", "0"}})
	wantReply(t, f.ul12Reserve("u1", 1, 3, "T1"), []string{"1", "9"})
	wantReply(t, f.run(lua.Bundle, keys, args("*:x1")), []string{"1"})
	f.ul12WantUsers("u1", "3|*:x1|T1")
	wantReply(t, f.run(lua.Bundle, keys, args("*:x2")), []string{"3", "*:x1"})
	wantReply(t, f.run(lua.BundleRelease, relKeys, []string{"*:x1", "shop 409", "2000", "1", "a:1,b:1", "0", "", "0"}), []string{"1"})
	f.ul12WantUsers("u1", "1|T1")
	wantReply(t, f.run(lua.Confirm, confirmKeys, []string{"T1", "O-1"}), []string{"1"})
	wantReply(t, f.ul12Reserve("u1", 3, 3, "T2"), []string{"4", "T1", "O-1", "", "1", ""})
	// A bundle of 2 more than the limit allows: the confirmed one, never a released one.
	big := []string{"u1", "3", "*:x3", "1000", exp, "a:2,b:1", "2", "2", "0", "", "0", "1", "0", "", "0"}
	wantReply(t, f.run(lua.Bundle, keys, big), []string{"4", "T1", "O-1"})
}

// TestUL12Batch: reservebatch.lua keeps the same list as reserve.lua: a
// buyer winning twice in one batch, then at the limit after the last's
// release.
func TestUL12Batch(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(10, 10, 0, 0, 0)})
	got := f.runBatch("0", []batchBuyer{{"u1", 1, 2, "T1"}, {"u2", 1, 2, "S1"}, {"u1", 1, 2, "T2"}, {"u1", 1, 2, "T3"}})
	if !slices.Equal(got[3], []string{"3", "T2"}) {
		t.Fatalf("third buy in the batch = %q, want PENDING T2", got[3])
	}
	f.ul12WantUsers("u1", "2|T2|T1")
	wantReply(t, f.run(lua.Release, releaseKeys, []string{"T2", "shop 409", "2000", "1"}), []string{"1", "8"})
	got = f.runBatch("0", []batchBuyer{{"u1", 2, 2, "T4"}, {"u1", 1, 2, "T5"}, {"u1", 1, 2, "T6"}})
	want := [][]string{{"3", "T1"}, {"1", "7"}, {"3", "T5"}}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("buyer %d = %q, want %q", i, got[i], want[i])
		}
	}
	f.ul12WantUsers("u1", "2|T5|T1")
}

// TestUL12BatchMatchesReserveWithLists: TestReserveBatchMatchesReserve
// with buyers holding several reservations, some released (values an
// older build's giveBack left), some in the old one-token form.
func TestUL12BatchMatchesReserveWithLists(t *testing.T) {
	f := newFx(t)
	rng := rand.New(rand.NewPCG(12, 12))
	states := []string{"p", "q", "c", "x", ""}
	for trial := range 300 {
		setup := [][]string{stock(rng.IntN(6), 20, 6, 6, 0)}
		if rng.IntN(2) == 0 {
			setup = append(setup, []string{"SET", kEpoch, strconv.Itoa(rng.IntN(100))})
		}
		for u := range 4 {
			if rng.IntN(3) == 0 {
				continue
			}
			user := "u" + strconv.Itoa(u)
			n := 1 + rng.IntN(3)
			val := strconv.Itoa(n)
			for j := range n {
				tok := fmt.Sprintf("L%d.%d", u, j)
				val += "|" + tok
				switch st := states[rng.IntN(len(states))]; st {
				case "":
				case "c":
					setup = append(setup, []string{"HSET", kRes, tok, "c|" + user + "|1|900|O-" + tok + "|"})
				case "x":
					setup = append(setup, []string{"HSET", kRes, tok, "x|" + user + "|1|900||timeout|950"})
				default:
					setup = append(setup, []string{"HSET", kRes, tok, st + "|" + user + "|1|900||"})
				}
			}
			setup = append(setup, []string{"HSET", kUsers, user, val})
		}
		buyers := make([]batchBuyer, 1+rng.IntN(10))
		for i := range buyers {
			limit := 1 + rng.IntN(4)
			buyers[i] = batchBuyer{user: "u" + strconv.Itoa(rng.IntN(5)), qty: 1 + rng.IntN(limit), limit: limit, tok: fmt.Sprintf("T%d", i)}
		}
		mode := []string{"0", "2"}[rng.IntN(2)]
		if !f.matchesReserve(trial, setup, mode, buyers) {
			return
		}
	}
}

// TestUL12ListBounded: a buyer of many single units (a high limit) has
// at most 32 of them named, the most recent; the units count them all.
func TestUL12ListBounded(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(50, 50, 0, 0, 0)})
	for i := range 40 {
		wantReply(t, f.ul12Reserve("u1", 1, 50, "T"+strconv.Itoa(i))[:1], []string{"1"})
	}
	want := "40"
	for i := 39; i >= 8; i-- {
		want += "|T" + strconv.Itoa(i)
	}
	f.ul12WantUsers("u1", want)
	wantReply(t, f.ul12Reserve("u1", 11, 50, "X"), []string{"3", "T39"})
}
