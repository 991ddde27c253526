package lua_test

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

const kHolders = "t:{a:s:0}:holders:s"

// holderBit is user's bit in a holders bitset of bits bits, as
// store.holderHash and reserve.lua's markHolder compute it.
func holderBit(user string, bits int64) int64 {
	sum := sha1.Sum([]byte(user))
	return int64(binary.BigEndian.Uint32(sum[:4])) % bits
}

// TestReserveMarksHolders: reserve.lua sets the bit of every buyer it
// reserves for in the holders bitset, its last key when KEYS has 7, 9 or
// 11 keys (short call, long call, with a request id), created at 64 bits a
// unit of the shard (a power of two, at least 4 Kib) and expiring with the activity;
// nothing for a buyer it refuses, and nothing with the 6, 8 or 10 keys of
// calls without it (the request id still read at KEYS[9] with 11).
func TestReserveMarksHolders(t *testing.T) {
	f := newFx(t)
	short := append(append([]string{}, reserveKeys[:6]...), kHolders)
	long := append(append([]string{}, reserveKeys...), kHolders)
	const kRid = "t:{a:s:0}:rid:u4|r1"
	const kRidBits = "t:{a:s:0}:ridbits:s"
	withRid := append(append([]string{}, reserveKeys...), kRid, kRidBits, kHolders)

	f.reset([][]string{stock(3, 200, 0, 0, 0)})
	wantReply(t, f.run(lua.Reserve, short, f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7]), []string{"1", "2"})
	if n := f.int("STRLEN", kHolders); n != 16384/8 {
		t.Errorf("holders bitset of %d bytes, want %d (64 bits a unit of 200, a power of two)", n, 16384/8)
	}
	f.wantTTL(kHolders)
	bits := 8 * f.int("STRLEN", kHolders)
	wantReply(t, f.run(lua.Reserve, long, f.reserveArgs("u2", 1, 1, "T2", true, 0, "")), []string{"1", "1"})
	wantReply(t, f.run(lua.Reserve, withRid, append(f.reserveArgs("u4", 1, 1, "T4", false, 0, ""), "300000", "0", "4242", "8192")), []string{"1", "0"})
	if !f.exists(kRid) || f.int("GETBIT", kRidBits, "4242") != 1 {
		t.Error("with 11 keys the request id's record or bit was not written")
	}
	// Refused (sold out, at the limit): no bit.
	wantReply(t, f.run(lua.Reserve, short, f.reserveArgs("u3", 1, 1, "T3", false, 0, "")[:7]), []string{"2", "0"})
	wantReply(t, f.run(lua.Reserve, short, f.reserveArgs("u1", 1, 1, "T5", false, 0, "")[:7]), []string{"3", "T1"})
	for _, u := range []string{"u1", "u2", "u4"} {
		if f.int("GETBIT", kHolders, strconv.FormatInt(holderBit(u, bits), 10)) != 1 {
			t.Errorf("%s's bit not set", u)
		}
	}
	if n := f.int("BITCOUNT", kHolders); n != 3 {
		t.Errorf("%d bits set, want 3", n)
	}
	// The calls of old: no holders key among KEYS, none written.
	f.reset([][]string{stock(3, 3, 0, 0, 0)})
	wantReply(t, f.run(lua.Reserve, reserveKeys[:6], f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7]), []string{"1", "2"})
	wantReply(t, f.run(lua.Reserve, reserveKeys, f.reserveArgs("u2", 1, 1, "T2", true, 0, "")), []string{"1", "1"})
	if f.exists(kHolders) {
		t.Error("a call without the holders key wrote it")
	}
}

// TestReserveBatchMarksHoldersAsReserve: reservebatch.lua with its KEYS[7]
// leaves the same holders bitset as reserve.lua's short call with it, one
// buyer after another, beside the same replies (random stock, users
// repeated, quantities and limits above one).
func TestReserveBatchMarksHoldersAsReserve(t *testing.T) {
	f := newFx(t)
	short := append(append([]string{}, reserveKeys[:6]...), kHolders)
	rng := rand.New(rand.NewPCG(20, 20))
	for trial := range 200 {
		r := rng.IntN(8)
		setup := [][]string{stock(r, r+rng.IntN(400), 0, 0, 0)}
		if rng.IntN(3) == 0 {
			setup = append(setup, []string{"SETBIT", kHolders, "8191", "0"}, []string{"SETBIT", kHolders, "17", "1"})
		}
		buyers := make([]batchBuyer, 1+rng.IntN(10))
		for i := range buyers {
			limit := 1 + rng.IntN(2)
			buyers[i] = batchBuyer{user: "u" + strconv.Itoa(rng.IntN(8)), qty: 1 + rng.IntN(limit), limit: limit, tok: fmt.Sprintf("T%d", i)}
		}
		f.reset(setup)
		var want [][]string
		for _, b := range buyers {
			want = append(want, f.run(lua.Reserve, short,
				[]string{b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok, "1000", strconv.FormatInt(f.exp, 10), "2"}))
		}
		wantBits, _ := f.do("GET", kHolders).ToString()
		wantState := f.dump()

		f.reset(setup)
		args := []string{"1000", strconv.FormatInt(f.exp, 10), "2"}
		for _, b := range buyers {
			args = append(args, b.user, strconv.Itoa(b.qty), strconv.Itoa(b.limit), b.tok)
		}
		got := f.batchReplies(f.text(f.script(lua.ReserveBatch, short, args)))
		gotBits, _ := f.do("GET", kHolders).ToString()
		for i := range buyers {
			if i >= len(got) || !slices.Equal(got[i], want[i]) {
				t.Fatalf("trial %d, buyer %d: batch %q, one call each %q (buyers %+v)", trial, i, got, want, buyers)
			}
		}
		if gotBits != wantBits || f.dump() != wantState {
			t.Fatalf("trial %d: holders or keys differ after the batch (buyers %+v)", trial, buyers)
		}
		if f.exists(kHolders) && f.int("PTTL", kHolders) <= 0 && len(setup) == 1 {
			t.Fatalf("trial %d: holders bitset created without an expiry", trial)
		}
	}
}

// TestBundleMarksHolders (red team bh): bundle.lua with 4+3n keys sets the
// buyer's bit in every item's holders bitset (its last n keys), sized as
// reserve.lua sizes them (64 bits a unit of the item's shard, at least 4
// Kib), expiring with the activity, before the sold-out flag; nothing for
// a buyer it refuses (short, at the limit), and nothing with the 4+2n keys
// of old. A buyer who holds a bundle is then answered PENDING by the
// script, which is where the store sends a buyer whose bit is set.
func TestBundleMarksHolders(t *testing.T) {
	f := newFx(t)
	exp := strconv.FormatInt(f.exp, 10)
	const kHoldersB = "t:{a:s:0}:holders:b"
	seed := [][]string{
		{"HSET", kStock, "r", "2", "i", "2", "p", "0", "c", "0", "x", "0"},
		{"HSET", kStockB, "r", "1", "i", "300", "p", "0", "c", "0", "x", "0"},
	}
	old := []string{kUsers, kRes, kPending, kMovesIn, kStock, kOut, kStockB, kOutB}
	keys := append(append([]string{}, old...), kHolders, kHoldersB)
	args := func(user, field string) []string {
		return []string{user, "2", field, "1000", exp, "a:1,b:1", "2", "1", "0", "", "0", "1", "0", "", "0"}
	}
	f.reset(seed)
	wantReply(t, f.run(lua.Bundle, keys, args("u1", "*:x1")), []string{"1"})
	if n := f.int("STRLEN", kHolders); n != 4096/8 {
		t.Errorf("holders of a: %d bytes, want %d (the 4 Kib floor)", n, 4096/8)
	}
	if n := f.int("STRLEN", kHoldersB); n != 32768/8 {
		t.Errorf("holders of b: %d bytes, want %d (64 bits a unit of 300, a power of two)", n, 32768/8)
	}
	f.wantTTL(kHolders)
	f.wantTTL(kHoldersB)
	for _, k := range []string{kHolders, kHoldersB} {
		bits := 8 * f.int("STRLEN", k)
		if f.int("GETBIT", k, strconv.FormatInt(holderBit("u1", bits), 10)) != 1 || f.int("BITCOUNT", k) != 1 {
			t.Errorf("%s: u1's bit not the one set", k)
		}
	}
	if !f.exists(kOutB) {
		t.Error("b's last unit taken, no sold-out flag")
	}
	// Refused: b short (u2), u1 at the limit (PENDING names the bundle).
	wantReply(t, f.run(lua.Bundle, keys, args("u2", "*:x2")), []string{"2", "2", "0"})
	wantReply(t, f.run(lua.Bundle, keys, args("u1", "*:x3")), []string{"3", "*:x1"})
	if f.int("BITCOUNT", kHolders) != 1 || f.int("BITCOUNT", kHoldersB) != 1 {
		t.Error("a refused bundle set a bit")
	}
	// The keys of old: nothing written.
	f.reset(seed)
	wantReply(t, f.run(lua.Bundle, old, args("u1", "*:x1")), []string{"1"})
	if f.exists(kHolders) || f.exists(kHoldersB) {
		t.Error("a call without the holders keys wrote them")
	}
}
