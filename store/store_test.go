package store_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const goodID = "AAAAAAAAAAAAAAAAAAAAAA" // 22 base64url characters

func TestTokenRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give store.Token
	}{
		{name: "plain", give: store.Token{Activity: "act_1001", SKU: "30021", Shard: 3, ID: goodID}},
		{name: "shard zero", give: store.Token{Activity: "a", SKU: "b", Shard: 0, ID: "abc-DEF_123456789012345"[:22]}},
		{name: "large shard", give: store.Token{Activity: "a-b", SKU: "c_d", Shard: 65536, ID: goodID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := store.ParseToken(tt.give.String())
			if err != nil || got != tt.give {
				t.Fatalf("ParseToken(%q) = %+v, %v; want %+v", tt.give.String(), got, err, tt.give)
			}
		})
	}
}

func TestParseTokenRejects(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "empty", give: ""},
		{name: "three parts", give: "a.b." + goodID},
		{name: "five parts", give: "a.b.0.x." + goodID},
		{name: "no activity", give: ".b.0." + goodID},
		{name: "no sku", give: "a..0." + goodID},
		{name: "shard not a number", give: "a.b.x." + goodID},
		{name: "negative shard", give: "a.b.-1." + goodID},
		{name: "shard too large", give: "a.b.65537." + goodID},
		{name: "id too short", give: "a.b.0." + goodID[1:]},
		{name: "id too long", give: "a.b.0." + goodID + "A"},
		{name: "id with bad character", give: "a.b.0." + goodID[1:] + "!"},
		{name: "id with separator", give: "a.b.0." + goodID[1:] + "|"},
		{name: "too long", give: strings.Repeat("a", 240) + ".b.0." + goodID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := store.ParseToken(tt.give); !errors.Is(err, store.ErrBadToken) {
				t.Fatalf("ParseToken(%q) = %+v, %v; want ErrBadToken", tt.give, got, err)
			}
		})
	}
}

func TestHomeShardSpreadsUsers(t *testing.T) {
	for _, shards := range []int{1, 4, 8, 16} {
		const users = 16000
		counts := make([]int, shards)
		for i := 0; i < users; i++ {
			u := "user-" + strconv.Itoa(i)
			h := store.HomeShard(u, shards)
			if h < 0 || h >= shards {
				t.Fatalf("HomeShard(%q, %d) = %d", u, shards, h)
			}
			if h != store.HomeShard(u, shards) {
				t.Fatalf("HomeShard(%q) not stable", u)
			}
			counts[h]++
		}
		want := users / shards
		for s, n := range counts {
			if n < want*85/100 || n > want*115/100 {
				t.Errorf("shards %d: shard %d got %d users, want about %d (all: %v)", shards, s, n, want, counts)
			}
		}
	}
}

func TestPreheat(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_p", 10, 4, 1)

	got, err := s.Preheat(ctx(t), a, false, time.Now())
	if err != nil || got != store.PreheatCreated {
		t.Fatalf("first Preheat = %v, %v; want created", got, err)
	}
	// 10 over 4 shards: the remainder goes to the first shards.
	for i, sk := range s.SKUKeys(a.ID, testSKU, 4).Shards {
		want := []string{"3", "3", "2", "2"}[i]
		for _, f := range []string{"r", "i"} {
			if v, err := srv.Do("HGET", sk.Stock, f); err != nil || v != want {
				t.Errorf("shard %d %s = %q, %v; want %s", i, f, v, err, want)
			}
		}
		if ttl, _ := srv.Do("PTTL", sk.Stock); ttl == "-1" || ttl == "-2" {
			t.Errorf("shard %d stock has no expiry (PTTL %s)", i, ttl)
		}
	}
	wantStatus(t, s, a, 10, 0, 0)

	if got, err := s.Preheat(ctx(t), a, false, time.Now()); err != nil || got != store.PreheatUnchanged {
		t.Fatalf("second Preheat = %v, %v; want unchanged", got, err)
	}

	// Changed before the start, nothing sold: overwritten.
	b := *a
	b.SKUs = []config.SKU{{ID: testSKU, Stock: 12}}
	if got, err := s.Preheat(ctx(t), &b, false, a.Start.Add(-time.Minute)); err != nil || got != store.PreheatOverwritten {
		t.Fatalf("changed Preheat before start = %v, %v; want overwritten", got, err)
	}
	wantStatus(t, s, &b, 12, 0, 0)

	// Changed inside the window: refused.
	c := b
	c.SKUs = []config.SKU{{ID: testSKU, Stock: 16}}
	if got, err := s.Preheat(ctx(t), &c, false, time.Now()); !errors.Is(err, store.ErrRunning) {
		t.Fatalf("changed Preheat inside the window = %v, %v; want ErrRunning", got, err)
	}
	wantStatus(t, s, &b, 12, 0, 0)

	// After the window with sales: refused too.
	res := mustReserve(t, s, &b, "u1", 1, lua.OK)
	if got, err := s.Preheat(ctx(t), &c, false, b.End.Add(time.Minute)); !errors.Is(err, store.ErrRunning) {
		t.Fatalf("changed Preheat after sales = %v, %v; want ErrRunning", got, err)
	}

	// Forced: overwritten, reservations gone.
	if got, err := s.Preheat(ctx(t), &c, true, time.Now()); err != nil || got != store.PreheatOverwritten {
		t.Fatalf("forced Preheat = %v, %v; want overwritten", got, err)
	}
	if _, ok, err := s.Lookup(ctx(t), res.Token, c.Shards); err != nil || ok {
		t.Fatalf("reservation survived a forced preheat: ok=%v err=%v", ok, err)
	}
	wantStatus(t, s, &c, 16, 0, 0)

	// Forced with the stock unchanged: still a fresh start, not "unchanged".
	res = mustReserve(t, s, &c, "u2", 1, lua.OK)
	if got, err := s.Preheat(ctx(t), &c, true, time.Now()); err != nil || got != store.PreheatOverwritten {
		t.Fatalf("forced Preheat with the same stock = %v, %v; want overwritten", got, err)
	}
	if _, ok, err := s.Lookup(ctx(t), res.Token, c.Shards); err != nil || ok {
		t.Fatalf("reservation survived a forced preheat with the same stock: ok=%v err=%v", ok, err)
	}
	wantStatus(t, s, &c, 16, 0, 0)
	mustReserve(t, s, &c, "u1", 1, lua.OK)
}

func TestPreheatMarksEmptyShardsOut(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_o", 2, 4, 1)
	mustPreheat(t, s, a)
	for i, sk := range s.SKUKeys(a.ID, testSKU, 4).Shards {
		v, _ := srv.Do("EXISTS", sk.Out)
		if want := map[bool]string{true: "1", false: "0"}[i >= 2]; v != want {
			t.Errorf("shard %d out flag EXISTS = %s, want %s", i, v, want)
		}
	}
	wantStatus(t, s, a, 2, 0, 0)
}

// A changed config that drops a SKU which has sales must not silently wipe
// that SKU's reservations.
func TestPreheatRefusesToDropSKUWithSales(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_d", 5, 2, 1)
	mustPreheat(t, s, a)
	res := mustReserve(t, s, a, "u1", 1, lua.OK)
	if code, err := s.Confirm(ctx(t), res.Token, a.Shards, "O-1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	b := *a
	b.SKUs = []config.SKU{{ID: "other", Stock: 5}}
	if got, err := s.Preheat(ctx(t), &b, false, a.End.Add(time.Minute)); !errors.Is(err, store.ErrRunning) {
		t.Fatalf("Preheat dropping a sold SKU = %v, %v; want ErrRunning", got, err)
	}
	if r, ok, err := s.Lookup(ctx(t), res.Token, a.Shards); err != nil || !ok || r.State != store.StateConfirmed {
		t.Fatalf("confirmed reservation lost: %+v ok=%v err=%v", r, ok, err)
	}
}

func TestStatusBeforePreheat(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_n", 5, 2, 1)
	st := status(t, s, a)
	if st.Preheated || !st.OK || st.Initial != 0 {
		t.Fatalf("status before preheat = %+v", st)
	}
	mustReserve(t, s, a, "u1", 1, lua.NotReady)
}

func TestReserveConfirmReleaseLookup(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_f", 10, 2, 1)
	mustPreheat(t, s, a)

	r1 := mustReserve(t, s, a, "u1", 1, lua.OK)
	tok := r1.Token
	if tok.Activity != a.ID || tok.SKU != testSKU || tok.Shard != store.HomeShard("u1", 2) || r1.Moves != 0 {
		t.Fatalf("token = %+v, moves %d", tok, r1.Moves)
	}
	if back, err := store.ParseToken(tok.String()); err != nil || back != tok {
		t.Fatalf("issued token does not parse: %v", err)
	}
	rec, ok, err := s.Lookup(ctx(t), tok, a.Shards)
	if err != nil || !ok || rec.State != store.StatePending || rec.User != "u1" || rec.Qty != 1 || rec.CreatedMs == 0 || rec.Token != tok {
		t.Fatalf("Lookup pending = %+v, %v, %v", rec, ok, err)
	}
	wantStatus(t, s, a, 9, 1, 0)

	if r := mustReserve(t, s, a, "u1", 1, lua.Pending); r.Token != tok {
		t.Fatalf("Pending token = %v, want %v", r.Token, tok)
	}

	if code, err := s.Confirm(ctx(t), tok, a.Shards, "O|1"); err != nil || code != lua.OK {
		t.Fatalf("Confirm = %v, %v", code, err)
	}
	if code, err := s.Confirm(ctx(t), tok, a.Shards, "O-2"); err != nil || code != lua.Same {
		t.Fatalf("second Confirm = %v, %v; want SAME", code, err)
	}
	rec, _, _ = s.Lookup(ctx(t), tok, a.Shards)
	if rec.State != store.StateConfirmed || rec.OrderID != "O/1" {
		t.Fatalf("Lookup confirmed = %+v (order id must be sanitized, first confirm wins)", rec)
	}
	if r := mustReserve(t, s, a, "u1", 1, lua.Purchased); r.Token != tok || r.OrderID != "O/1" {
		t.Fatalf("Purchased = %+v", r)
	}
	wantStatus(t, s, a, 9, 0, 1)

	if code, err := s.Release(ctx(t), tok, a.Shards, "shop 500", time.Now().UnixMilli(), true); err != nil || code != lua.Confirmed {
		t.Fatalf("pending-only Release of confirmed = %v, %v; want CONFIRMED", code, err)
	}
	if code, err := s.Release(ctx(t), tok, a.Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	rec, _, _ = s.Lookup(ctx(t), tok, a.Shards)
	if rec.State != store.StateReleased || rec.Reason != "refund" || rec.OrderID != "O/1" {
		t.Fatalf("Lookup released = %+v", rec)
	}
	if code, err := s.Confirm(ctx(t), tok, a.Shards, "O-3"); err != nil || code != lua.Released {
		t.Fatalf("Confirm after release = %v, %v; want RELEASED", code, err)
	}
	st := wantStatus(t, s, a, 10, 0, 0)
	if st.Released != 1 {
		t.Fatalf("released = %d, want 1", st.Released)
	}

	// A released user may buy again.
	if r := mustReserve(t, s, a, "u1", 1, lua.OK); r.Token == tok {
		t.Fatal("new reservation reused the old token")
	}

	// Unknown tokens.
	unknown := store.Token{Activity: a.ID, SKU: testSKU, Shard: 0, ID: goodID}
	outside := store.Token{Activity: a.ID, SKU: testSKU, Shard: 7, ID: goodID}
	for _, u := range []store.Token{unknown, outside} {
		if _, ok, err := s.Lookup(ctx(t), u, a.Shards); err != nil || ok {
			t.Errorf("Lookup(%v) = %v, %v", u, ok, err)
		}
		if code, err := s.Confirm(ctx(t), u, a.Shards, ""); err != nil || code != lua.Unknown {
			t.Errorf("Confirm(%v) = %v, %v", u, code, err)
		}
		if code, err := s.Release(ctx(t), u, a.Shards, "", 0, false); err != nil || code != lua.Unknown {
			t.Errorf("Release(%v) = %v, %v", u, code, err)
		}
	}
}

func TestReleaseIdempotentAndNeverAboveInitial(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_r", 3, 1, 1)
	mustPreheat(t, s, a)
	now := time.Now().UnixMilli()

	p := mustReserve(t, s, a, "u1", 1, lua.OK).Token
	c := mustReserve(t, s, a, "u2", 1, lua.OK).Token
	if code, _ := s.Confirm(ctx(t), c, a.Shards, "O-2"); code != lua.OK {
		t.Fatalf("Confirm = %v", code)
	}
	tests := []struct {
		name string
		tok  store.Token
		only bool
		want lua.Code
	}{
		{name: "pending", tok: p, only: true, want: lua.OK},
		{name: "pending again", tok: p, only: true, want: lua.Same},
		{name: "pending again, any state", tok: p, want: lua.Same},
		{name: "confirmed, pending only", tok: c, only: true, want: lua.Confirmed},
		{name: "confirmed", tok: c, want: lua.OK},
		{name: "confirmed again", tok: c, want: lua.Same},
		{name: "unknown", tok: store.Token{Activity: a.ID, SKU: testSKU, ID: goodID}, want: lua.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := s.Release(ctx(t), tt.tok, a.Shards, "test", now, tt.only)
			if err != nil || code != tt.want {
				t.Fatalf("Release = %v, %v; want %v", code, err, tt.want)
			}
			if st := status(t, s, a); st.Remaining > st.Initial || !st.OK {
				t.Fatalf("status = %+v: remaining above initial or invariant broken", st)
			}
		})
	}
	wantStatus(t, s, a, 3, 0, 0)
	// Both released users may buy again; the stock is exactly the initial.
	mustReserve(t, s, a, "u1", 1, lua.OK)
	mustReserve(t, s, a, "u2", 1, lua.OK)
	mustReserve(t, s, a, "u3", 1, lua.OK)
	mustReserve(t, s, a, "u4", 1, lua.Empty)
	wantStatus(t, s, a, 0, 3, 0)
}

func TestFlagsAndPauseReachOtherInstances(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig([]string{srv.Addr}, false)
	s1, s2 := openStore(t, cfg), openStore(t, cfg)
	a := newActivity("act_s", 4, 4, 1)

	// s2 caches the flags before the preheat and the pause.
	if f, err := s2.Flags(ctx(t), a.ID); err != nil || f.Ready {
		t.Fatalf("Flags before preheat = %+v, %v", f, err)
	}
	before := time.Now().UnixMilli()
	mustPreheat(t, s1, a)
	eventually(t, time.Second, "s2 sees the preheat", func() bool {
		f, err := s2.Flags(ctx(t), a.ID)
		return err == nil && f.Ready && !f.Paused && f.Shards == 4 && f.Ver >= before
	})
	if err := s1.SetPaused(ctx(t), a.ID, true); err != nil {
		t.Fatalf("SetPaused: %v", err)
	}
	eventually(t, time.Second, "s2 sees the pause", func() bool {
		f, err := s2.Flags(ctx(t), a.ID)
		return err == nil && f.Paused
	})
	if st, err := s1.Status(ctx(t), a); err != nil || !st.Paused || !st.OK() {
		t.Fatalf("Status = %+v, %v; want paused, OK", st, err)
	}
	// A preheat keeps the switch as it was.
	if _, err := s1.Preheat(ctx(t), a, true, time.Now()); err != nil {
		t.Fatalf("Preheat: %v", err)
	}
	if f, _ := s1.Flags(ctx(t), a.ID); !f.Paused {
		t.Fatal("preheat reset the kill switch")
	}
	if err := s1.SetPaused(ctx(t), a.ID, false); err != nil {
		t.Fatalf("SetPaused: %v", err)
	}
	eventually(t, time.Second, "s2 sees the resume", func() bool {
		f, err := s2.Flags(ctx(t), a.ID)
		return err == nil && !f.Paused && f.Ready
	})
}

func TestSoldOutFromCachedFlags(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig([]string{srv.Addr}, false)
	s1, s2 := openStore(t, cfg), openStore(t, cfg)
	a := newActivity("act_so", 2, 2, 1)
	mustPreheat(t, s1, a)
	if out, err := s2.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil || out {
		t.Fatalf("SoldOut = %v, %v; want false", out, err)
	}
	tok := mustReserve(t, s1, a, "u1", 1, lua.OK).Token
	mustReserve(t, s1, a, "u2", 1, lua.OK)
	eventually(t, time.Second, "s2 sees sold out", func() bool {
		out, err := s2.SoldOut(ctx(t), a.ID, testSKU, a.Shards)
		return err == nil && out
	})
	eventually(t, time.Second, "memory answers sold out", func() bool {
		r, err := s2.Reserve(ctx(t), reserveReq(a, "u3", 1))
		return err == nil && r.Code == lua.Empty && r.FromMemory
	})
	if code, err := s1.Release(ctx(t), tok, a.Shards, "test", 0, true); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	eventually(t, time.Second, "s2 sees stock back", func() bool {
		out, err := s2.SoldOut(ctx(t), a.ID, testSKU, a.Shards)
		return err == nil && !out
	})
	mustReserve(t, s2, a, "u3", 1, lua.OK)
}
