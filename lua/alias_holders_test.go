package lua_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// alias is a holder alias as store.HolderAlias makes one: 24 hex digits.
func alias(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:12])
}

// aliasBits are a holder alias's three bits in a holders bitset of bits
// bits, as store.aliasHashes and the scripts compute them: its three
// 32-bit words.
func aliasBits(alias string, bits int64) [3]int64 {
	b, err := hex.DecodeString(alias)
	if err != nil || len(b) != 12 {
		panic("not an alias: " + alias)
	}
	var out [3]int64
	for w := range out {
		out[w] = int64(binary.BigEndian.Uint32(b[4*w:4*w+4])) % bits
	}
	return out
}

// hasAlias reports whether every bit of alias is set in the holders bitset.
func (f *fx) hasAlias(key, alias string) bool {
	f.t.Helper()
	bits := 8 * f.int("STRLEN", key)
	if bits == 0 {
		return false
	}
	for _, b := range aliasBits(alias, bits) {
		if f.int("GETBIT", key, strconv.FormatInt(b, 10)) != 1 {
			return false
		}
	}
	return true
}

// TestReserveMarksHolderAlias (decisions §62): with an even count of ARGV
// (8 in the short call, 14 without and 16 with a request id in the long
// one) reserve.lua takes the last as the buyer's holder alias and sets its
// three bits in the holders bitset beside the user's, for a buyer it
// reserves for only; an odd count (every call of before) sets the user's
// bit alone, and an empty alias none.
func TestReserveMarksHolderAlias(t *testing.T) {
	f := newFx(t)
	short := append(append([]string{}, reserveKeys[:6]...), kHolders)
	long := append(append([]string{}, reserveKeys...), kHolders)
	const kRid = "t:{a:s:0}:rid:u4|r1"
	const kRidBits = "t:{a:s:0}:ridbits:s"
	withRid := append(append([]string{}, reserveKeys...), kRid, kRidBits, kHolders)
	long13 := func(user, tok string) []string {
		return append(f.reserveArgs(user, 1, 1, tok, false, 0, ""), "300000", "0")
	}

	f.reset([][]string{stock(4, 200, 0, 0, 0)})
	wantReply(t, f.run(lua.Reserve, short, append(f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7], alias("one"))), []string{"1", "3"})
	wantReply(t, f.run(lua.Reserve, long, append(long13("u2", "T2"), alias("two"))), []string{"1", "2"})
	wantReply(t, f.run(lua.Reserve, withRid, append(long13("u4", "T4"), "4242", "8192", alias("four"))), []string{"1", "1"})
	if !f.exists(kRid) || f.int("GETBIT", kRidBits, "4242") != 1 {
		t.Error("with a request id and an alias, the request id's record or bit was not written")
	}
	// An empty alias: the user's bit only.
	wantReply(t, f.run(lua.Reserve, short, append(f.reserveArgs("u5", 1, 1, "T5", false, 0, "")[:7], "")), []string{"1", "0"})
	// Refused (sold out, at the limit): no bit of their aliases.
	wantReply(t, f.run(lua.Reserve, short, append(f.reserveArgs("u3", 1, 1, "T3", false, 0, "")[:7], alias("three"))), []string{"2", "0"})
	wantReply(t, f.run(lua.Reserve, short, append(f.reserveArgs("u1", 1, 1, "T6", false, 0, "")[:7], alias("one-again"))), []string{"3", "T1"})
	// At the limit with a request id (the record written anyway): the
	// session's alias too, so its repeat is let on to the record.
	const kRid2 = "t:{a:s:0}:rid:u1|r9"
	withRid2 := append(append([]string{}, reserveKeys...), kRid2, kRidBits, kHolders)
	wantReply(t, f.run(lua.Reserve, withRid2, append(long13("u1", "T7"), "4243", "8192", alias("one-rid"))), []string{"3", "T1"})
	if !f.hasAlias(kHolders, alias("one-rid")) {
		t.Error("a session answered at its limit with a request id: alias not set")
	}
	for _, a := range []string{alias("one"), alias("two"), alias("four")} {
		if !f.hasAlias(kHolders, a) {
			t.Errorf("alias %s of a winner not set", a)
		}
	}
	for _, a := range []string{alias("three"), alias("one-again"), alias("never")} {
		if f.hasAlias(kHolders, a) {
			t.Errorf("alias %s set, of a buyer refused or never seen", a)
		}
	}
	if n := f.int("BITCOUNT", kHolders); n > 4+3*4 || n < 4+3 {
		t.Errorf("%d bits set, want 4 users' and 4 aliases' (16, fewer only if two collide)", n)
	}
	// Odd counts, as before: the user's bit alone.
	f.reset([][]string{stock(3, 200, 0, 0, 0)})
	wantReply(t, f.run(lua.Reserve, short, f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7]), []string{"1", "2"})
	wantReply(t, f.run(lua.Reserve, long, long13("u2", "T2")), []string{"1", "1"})
	if n := f.int("BITCOUNT", kHolders); n != 2 {
		t.Errorf("%d bits set by two calls without an alias, want 2", n)
	}
}

// TestReserveBatchMarksAliasesAsReserve: reservebatch.lua with mode "0a" /
// "2a" (the aliases after the buyers) leaves the same holders bitset and
// keys, with the same replies, as reserve.lua's 8-ARGV short call one
// buyer after another (random stock, users repeated, some aliases empty,
// limits above one).
func TestReserveBatchMarksAliasesAsReserve(t *testing.T) {
	f := newFx(t)
	short := append(append([]string{}, reserveKeys[:6]...), kHolders)
	rng := rand.New(rand.NewPCG(62, 62))
	for trial := range 200 {
		r := rng.IntN(8)
		setup := [][]string{stock(r, r+rng.IntN(400), 0, 0, 0)}
		buyers := make([]batchBuyer, 1+rng.IntN(10))
		aliases := make([]string, len(buyers))
		for i := range buyers {
			limit := 1 + rng.IntN(2)
			buyers[i] = batchBuyer{user: "u" + strconv.Itoa(rng.IntN(8)), qty: 1 + rng.IntN(limit), limit: limit, tok: fmt.Sprintf("T%d", i)}
			if rng.IntN(4) > 0 {
				aliases[i] = alias(strconv.Itoa(rng.IntN(12)))
			}
		}
		mode := []string{"0", "2"}[rng.IntN(2)]
		f.reset(setup)
		var want [][]string
		for i, b := range buyers {
			want = append(want, f.run(lua.Reserve, short,
				[]string{b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok, "1000", strconv.FormatInt(f.exp, 10), mode, aliases[i]}))
		}
		wantBits, _ := f.do("GET", kHolders).ToString()
		wantState := f.dump()

		f.reset(setup)
		args := []string{"1000", strconv.FormatInt(f.exp, 10), mode + "a"}
		for _, b := range buyers {
			args = append(args, b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok)
		}
		args = append(args, aliases...)
		got := f.batchReplies(f.text(f.script(lua.ReserveBatch, short, args)))
		gotBits, _ := f.do("GET", kHolders).ToString()
		for i := range buyers {
			if i >= len(got) || !slices.Equal(got[i], want[i]) {
				t.Fatalf("trial %d, buyer %d: batch %q, one call each %q (buyers %+v, aliases %q)", trial, i, got, want, buyers, aliases)
			}
		}
		if gotBits != wantBits || f.dump() != wantState {
			t.Fatalf("trial %d: holders or keys differ after the batch (buyers %+v, aliases %q)", trial, buyers, aliases)
		}
	}
}

// TestBundleMarksHolderAlias: bundle.lua with ARGV[8+4n] sets the alias's
// bits in every item's holders bitset, for a bundle it reserves only.
func TestBundleMarksHolderAlias(t *testing.T) {
	f := newFx(t)
	exp := strconv.FormatInt(f.exp, 10)
	const kHoldersB = "t:{a:s:0}:holders:b"
	f.reset([][]string{
		{"HSET", kStock, "r", "2", "i", "2", "p", "0", "c", "0", "x", "0"},
		{"HSET", kStockB, "r", "1", "i", "300", "p", "0", "c", "0", "x", "0"},
	})
	keys := []string{kUsers, kRes, kPending, kMovesIn, kStock, kOut, kStockB, kOutB, kHolders, kHoldersB}
	args := func(user, field, alias string) []string {
		return []string{user, "2", field, "1000", exp, "a:1,b:1", "2", "1", "0", "", "0", "1", "0", "", "0", alias}
	}
	wantReply(t, f.run(lua.Bundle, keys, args("u1", "*:x1", alias("one"))), []string{"1"})
	wantReply(t, f.run(lua.Bundle, keys, args("u2", "*:x2", alias("two"))), []string{"2", "2", "0"})
	for _, k := range []string{kHolders, kHoldersB} {
		if !f.hasAlias(k, alias("one")) {
			t.Errorf("%s: the winner's alias not set", k)
		}
		if f.hasAlias(k, alias("two")) {
			t.Errorf("%s: a refused bundle's alias set", k)
		}
		if n := f.int("BITCOUNT", k); n < 2 || n > 4 {
			t.Errorf("%s: %d bits set, want the user's and the alias's 3 (fewer only if two collide)", k, n)
		}
	}
}
