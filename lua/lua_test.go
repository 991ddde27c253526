package lua_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Keys of one shard, as store/keys.go names them.
const (
	kStock   = "t:{a:s:0}:stock"
	kUsers   = "t:{a:s:0}:users"
	kRes     = "t:{a:s:0}:res"
	kPending = "t:{a:s:0}:pending"
	kLog     = "t:{a:s:0}:log"
	kOut     = "t:{a:s:0}:out"
	kMovesIn = "t:{a:s:0}:movesin"
	kMoves   = "t:{a:s:0}:moves"
	kEpoch   = "t:{a:s:0}:epoch"
)

var (
	reserveKeys = []string{kStock, kUsers, kRes, kPending, kOut, kEpoch, kLog, kMovesIn}
	stealKeys   = []string{kStock, kMoves, kOut}
	confirmKeys = []string{kStock, kRes, kPending}
	releaseKeys = []string{kStock, kUsers, kRes, kPending, kOut, kEpoch}
	depositKeys = []string{kStock, kOut, kMovesIn}
)

// fx is one private redis-server and a client to it.
type fx struct {
	t   *testing.T
	c   rueidis.Client
	exp int64 // expire-at ms handed to scripts: an hour from now
}

func newFx(t *testing.T) *fx {
	t.Helper()
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return &fx{t: t, c: c, exp: time.Now().Add(time.Hour).UnixMilli()}
}

func (f *fx) do(args ...string) rueidis.RedisResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f.c.Do(ctx, f.c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
}

func (f *fx) mustDo(args ...string) {
	f.t.Helper()
	if err := f.do(args...).Error(); err != nil {
		f.t.Fatalf("%v: %v", args, err)
	}
}

// reset empties the server and seeds it with setup commands.
func (f *fx) reset(setup [][]string) {
	f.t.Helper()
	f.mustDo("FLUSHALL")
	for _, cmd := range setup {
		f.mustDo(cmd...)
	}
}

// run executes a script (EVALSHA, EVAL on NOSCRIPT) and returns its reply
// as text, integers formatted in base 10.
func (f *fx) run(src string, keys, args []string) []string {
	f.t.Helper()
	return f.text(f.script(src, keys, args))
}

// script executes a script (EVALSHA, EVAL on NOSCRIPT).
func (f *fx) script(src string, keys, args []string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rueidis.NewLuaScript(src).Exec(ctx, f.c, keys, args)
}

// text is an array reply as text, integers formatted in base 10.
func (f *fx) text(r interface {
	ToArray() ([]rueidis.RedisMessage, error)
}) []string {
	f.t.Helper()
	arr, err := r.ToArray()
	if err != nil {
		f.t.Fatalf("script: %v", err)
	}
	out := make([]string, len(arr))
	for i, m := range arr {
		if n, err := m.ToInt64(); err == nil {
			out[i] = strconv.FormatInt(n, 10)
		} else if s, err := m.ToString(); err == nil {
			out[i] = s
		} else {
			f.t.Fatalf("reply[%d]: neither integer nor string: %v", i, m)
		}
	}
	return out
}

func (f *fx) hash(key string) map[string]string {
	f.t.Helper()
	m, err := f.do("HGETALL", key).AsStrMap()
	if err != nil {
		f.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

func (f *fx) int(args ...string) int64 {
	f.t.Helper()
	n, err := f.do(args...).AsInt64()
	if err != nil {
		f.t.Fatalf("%v: %v", args, err)
	}
	return n
}

func (f *fx) exists(key string) bool { return f.int("EXISTS", key) == 1 }

// wantTTL fails unless key exists with an expiry set.
func (f *fx) wantTTL(key string) {
	f.t.Helper()
	if ttl := f.int("PTTL", key); ttl <= 0 {
		f.t.Errorf("PTTL %s = %d, want an expiry", key, ttl)
	}
}

func (f *fx) wantHash(key string, want map[string]string) {
	f.t.Helper()
	got := f.hash(key)
	for k, v := range want {
		if got[k] != v {
			f.t.Errorf("%s[%s] = %q, want %q (all: %v)", key, k, got[k], v, got)
		}
	}
}

func wantReply(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("reply = %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("reply = %q, want %q", got, want)
		}
	}
}

func stock(r, i, p, c, x int) []string {
	return []string{"HSET", kStock, "r", strconv.Itoa(r), "i", strconv.Itoa(i), "p", strconv.Itoa(p), "c", strconv.Itoa(c), "x", strconv.Itoa(x)}
}

// reserveArgs builds reserve.lua's ARGV; now ms is always 1000.
func (f *fx) reserveArgs(user string, qty, limit int, id string, queue bool, depUnits int, moveID string) []string {
	q := "0"
	if queue {
		q = "1"
	}
	return []string{user, strconv.Itoa(qty), strconv.Itoa(limit), id, "1000", strconv.FormatInt(f.exp, 10), q,
		strconv.Itoa(depUnits), moveID, "1000", "a.s.0." + id}
}

func TestReserve(t *testing.T) {
	f := newFx(t)
	tests := []struct {
		name  string
		setup [][]string
		give  func(f *fx) []string // ARGV
		want  []string
		check func(f *fx)
	}{
		{
			name:  "ok sync",
			setup: [][]string{stock(3, 3, 0, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"1", "2"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "2", "i": "3", "p": "1", "c": "0", "x": "0"})
				f.wantHash(kUsers, map[string]string{"u1": "1|T1"})
				f.wantHash(kRes, map[string]string{"T1": "p|u1|1|1000||"})
				if score, err := f.do("ZSCORE", kPending, "T1").AsInt64(); err != nil || score != 1000 {
					f.t.Errorf("pending score = %d, %v; want 1000", score, err)
				}
				if f.exists(kOut) {
					f.t.Error("out flag set while stock remains")
				}
				if f.exists(kLog) {
					f.t.Error("sync mode wrote a stream entry")
				}
				f.wantTTL(kUsers)
				f.wantTTL(kRes)
				f.wantTTL(kPending)
			},
		},
		{
			name:  "ok last unit sets out flag",
			setup: [][]string{stock(1, 1, 0, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"1", "0"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "0", "p": "1"})
				if !f.exists(kOut) {
					f.t.Error("out flag missing at r == 0")
				}
				f.wantTTL(kOut)
			},
		},
		{
			name:  "ok queue mode writes no stream entry: enqueue.lua does",
			setup: [][]string{stock(5, 5, 0, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 2, 2, "T1", true, 0, "") },
			want:  []string{"1", "3"},
			check: func(f *fx) {
				// A reply its buyer never heard (told STORE_UNAVAILABLE)
				// must leave nothing a queue worker reads.
				if n := f.int("XLEN", kLog); n != 0 {
					f.t.Fatalf("XLEN = %d, want 0", n)
				}
				f.wantHash(kUsers, map[string]string{"u1": "2|T1"})
				// Queued, not sent: no entry yet, and the pending index
				// (the reconciler's) does not hold it.
				f.wantHash(kRes, map[string]string{"T1": "q|u1|2|1000||"})
				f.wantHash(kStock, map[string]string{"u": "1"}) // counts toward the backlog
				if f.exists(kPending) {
					f.t.Error("a queued reservation is in the pending index")
				}
				// The buyer's call, having heard the reply, writes it once.
				wantReply(f.t, f.run(lua.Enqueue, []string{kRes, kLog, kStock}, []string{"T1", "a.s.0.T1", strconv.FormatInt(f.exp, 10)}), []string{"1", "0-1"})
				wantReply(f.t, f.run(lua.Enqueue, []string{kRes, kLog, kStock}, []string{"T1", "a.s.0.T1", strconv.FormatInt(f.exp, 10)}), []string{"6", "0-1"})
				entries, err := f.do("XRANGE", kLog, "-", "+").ToArray()
				if err != nil || len(entries) != 1 {
					f.t.Fatalf("XRANGE: %d entries, %v", len(entries), err)
				}
				e, _ := entries[0].ToArray()
				fields, _ := e[1].AsStrSlice()
				if len(fields) != 2 || fields[0] != "t" || fields[1] != "a.s.0.T1" {
					f.t.Errorf("stream entry = %q, want [t a.s.0.T1]", fields)
				}
				f.wantTTL(kLog)
				f.wantHash(kRes, map[string]string{"T1": "q|u1|2|1000||0-1"})
				f.wantHash(kStock, map[string]string{"u": "0"})
				// Unknown and no-longer-queued reservations get no entry.
				wantReply(f.t, f.run(lua.Enqueue, []string{kRes, kLog, kStock}, []string{"T9", "a.s.0.T9", strconv.FormatInt(f.exp, 10)}), []string{"8", ""})
				f.do("HSET", kRes, "T2", "x|u2|1|1000||store_timeout|1001")
				wantReply(f.t, f.run(lua.Enqueue, []string{kRes, kLog, kStock}, []string{"T2", "a.s.0.T2", strconv.FormatInt(f.exp, 10)}), []string{"6", ""})
				if n := f.int("XLEN", kLog); n != 1 {
					f.t.Errorf("XLEN = %d, want 1", n)
				}
			},
		},
		{
			name: "queue mode numbers entries in order",
			setup: [][]string{stock(5, 5, 0, 0, 0), {"XADD", kLog, "0-7", "t", "a.s.0.T0"},
				{"HSET", kUsers, "u0", "1|T0"}},
			give: func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", true, 0, "") },
			want: []string{"1", "4"},
			check: func(f *fx) {
				wantReply(f.t, f.run(lua.Enqueue, []string{kRes, kLog, kStock}, []string{"T1", "a.s.0.T1", strconv.FormatInt(f.exp, 10)}), []string{"1", "0-8"})
				f.wantHash(kRes, map[string]string{"T1": "q|u1|1|1000||0-8"})
			},
		},
		{
			name: "queue backlog at its bound is busy, the stream untouched",
			setup: [][]string{stock(5, 5, 0, 0, 0), {"XADD", kLog, "0-1", "t", "a"}, {"XADD", kLog, "0-2", "t", "b"},
				{"XADD", kLog, "0-3", "t", "c"}},
			give: func(f *fx) []string {
				a := f.reserveArgs("u1", 1, 1, "T1", true, 0, "")
				a[9] = "3" // the shard's backlog bound
				return a
			},
			want: []string{"12", "3"},
			check: func(f *fx) {
				if n := f.int("XLEN", kLog); n != 3 {
					f.t.Errorf("XLEN = %d, want 3 (never trimmed)", n)
				}
				f.wantHash(kStock, map[string]string{"r": "5", "p": "0"})
				if f.exists(kUsers) || f.exists(kRes) {
					f.t.Error("BUSY wrote a reservation")
				}
			},
		},
		{
			name: "queue backlog below its bound admits, never trims",
			setup: [][]string{stock(5, 5, 0, 0, 0), {"XADD", kLog, "0-1", "t", "a"}, {"XADD", kLog, "0-2", "t", "b"},
				{"XADD", kLog, "0-3", "t", "c"}},
			give: func(f *fx) []string {
				a := f.reserveArgs("u1", 1, 1, "T1", true, 0, "")
				a[9] = "4"
				return a
			},
			want: []string{"1", "4"},
			check: func(f *fx) {
				if n := f.int("XLEN", kLog); n != 3 {
					f.t.Errorf("XLEN = %d, want 3 (untouched; the entry is enqueue.lua's)", n)
				}
			},
		},
		{
			name:  "sync mode ignores the backlog bound",
			setup: [][]string{stock(5, 5, 0, 0, 0), {"XADD", kLog, "0-1", "t", "a"}},
			give: func(f *fx) []string {
				a := f.reserveArgs("u1", 1, 1, "T1", false, 0, "")
				a[9] = "1"
				return a
			},
			want: []string{"1", "4"},
		},
		{
			name:  "pending while queued",
			setup: [][]string{stock(4, 5, 1, 0, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "q|u1|1|900||0-1"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", true, 0, "") },
			want:  []string{"3", "T0"},
		},
		{
			name:  "ok second unit within limit",
			setup: [][]string{stock(5, 6, 1, 0, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "p|u1|1|900||"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 2, "T1", false, 0, "") },
			want:  []string{"1", "4"},
			check: func(f *fx) {
				f.wantHash(kUsers, map[string]string{"u1": "2|T1|T0"}) // the held ones, most recent first
				f.wantHash(kStock, map[string]string{"r": "4", "p": "2"})
			},
		},
		{
			name:  "empty",
			setup: [][]string{stock(0, 1, 1, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"2", "0"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "0", "p": "1"})
				if f.exists(kUsers) || f.exists(kRes) || f.exists(kPending) {
					f.t.Error("EMPTY wrote a reservation")
				}
			},
		},
		{
			name:  "empty reports remaining when qty is larger",
			setup: [][]string{stock(1, 1, 0, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 2, 2, "T1", false, 0, "") },
			want:  []string{"2", "1"},
			check: func(f *fx) { f.wantHash(kStock, map[string]string{"r": "1", "p": "0"}) },
		},
		{
			name:  "pending",
			setup: [][]string{stock(4, 5, 1, 0, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "p|u1|1|900||"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"3", "T0"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "4", "p": "1"})
				f.wantHash(kUsers, map[string]string{"u1": "1|T0"})
			},
		},
		{
			name:  "purchased with order id",
			setup: [][]string{stock(4, 5, 0, 1, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "c|u1|1|900|O-9|"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"4", "T0", "O-9", "", "1", ""},
			check: func(f *fx) { f.wantHash(kStock, map[string]string{"r": "4", "c": "1"}) },
		},
		{
			// The buyer memo's reply: units and the shard's epoch.
			name:  "purchased at the limit gives units and epoch",
			setup: [][]string{stock(4, 6, 0, 2, 0), {"SET", kEpoch, "17000000"}, {"HSET", kUsers, "u1", "2|T1"}, {"HSET", kRes, "T0", "c|u1|1|900|O-8|", "T1", "c|u1|1|900|O-9|"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 2, "T2", false, 0, "") },
			want:  []string{"4", "T1", "O-9", "", "2", "17000000"},
		},
		{
			// Without the buyer memo ("2") nobody reads units and epoch:
			// PURCHASED carries neither, and the epoch is not read.
			name:  "purchased without the buyer memo leaves the epoch unread",
			setup: [][]string{stock(4, 6, 0, 2, 0), {"SET", kEpoch, "17000000"}, {"HSET", kUsers, "u1", "2|T1"}, {"HSET", kRes, "T0", "c|u1|1|900|O-8|", "T1", "c|u1|1|900|O-9|"}},
			give: func(f *fx) []string {
				a := f.reserveArgs("u1", 1, 2, "T2", false, 0, "")
				a[6] = "2"
				return a[:7]
			},
			want: []string{"4", "T1", "O-9"},
		},
		{
			name:  "purchased without order id",
			setup: [][]string{stock(4, 5, 0, 1, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "c|u1|1|900||"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"4", "T0", "", "", "1", ""},
		},
		{
			name: "not ready",
			give: func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want: []string{"5"},
			check: func(f *fx) {
				if n := f.int("DBSIZE"); n != 0 {
					f.t.Errorf("NOT_READY wrote %d keys", n)
				}
			},
		},
		{
			name:  "deposit then reserve",
			setup: [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 3, "M1") },
			want:  []string{"1", "2"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "2", "i": "4", "p": "1", "c": "1"})
				if f.exists(kOut) {
					f.t.Error("out flag kept after a deposit")
				}
				if f.int("SISMEMBER", kMovesIn, "M1") != 1 {
					f.t.Error("move id not recorded")
				}
				f.wantTTL(kMovesIn)
			},
		},
		{
			name:  "deposit already done is skipped",
			setup: [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}, {"SADD", kMovesIn, "M1"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 3, "M1") },
			want:  []string{"2", "0"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "0", "i": "1"})
				if !f.exists(kOut) {
					f.t.Error("out flag removed without a deposit")
				}
			},
		},
		{
			name:  "deposit lands even when the limit refuses",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "p|u1|1|900||"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 2, "M1") },
			want:  []string{"3", "T0"},
			check: func(f *fx) { f.wantHash(kStock, map[string]string{"r": "2", "i": "3", "p": "1"}) },
		},
		{
			name:  "aborted token id takes nothing",
			setup: [][]string{stock(3, 3, 0, 0, 0), {"HSET", kRes, "T1", "x|u1|0|900||store_timeout|900"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 2, "M1") },
			want:  []string{"14"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "3", "i": "3", "p": "0"})
				if f.exists(kUsers) || f.exists(kPending) || f.exists(kMovesIn) {
					f.t.Error("an aborted reserve wrote")
				}
			},
		},
		{
			// Issue 10: the tombstone is looked for before the first write
			// only; an answer that writes nothing is the same either way.
			name:  "aborted token id of a repeat buyer writes nothing",
			setup: [][]string{stock(3, 3, 0, 1, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "c|u1|1|900|o9|", "T1", "x|u1|0|900||store_timeout|900"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "") },
			want:  []string{"4", "T0", "o9", "", "1", ""},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "3", "p": "0", "c": "1"})
				f.wantHash(kUsers, map[string]string{"u1": "1|T0"})
				if f.exists(kPending) {
					f.t.Error("an aborted reserve wrote")
				}
			},
		},
		{
			name:  "aborted token id of a fresh buyer without a move takes nothing",
			setup: [][]string{stock(3, 3, 0, 0, 0), {"HSET", kRes, "T1", "x|u1|0|900||store_timeout|900"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7] },
			want:  []string{"14"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "3", "i": "3", "p": "0"})
				if f.exists(kUsers) || f.exists(kPending) {
					f.t.Error("an aborted reserve wrote")
				}
			},
		},
		{
			// Issue 10: a buyer at their limit is answered from two reads,
			// before the stock is read.
			name:  "repeat buyer answered before the stock is read",
			setup: [][]string{{"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "p|u1|1|900||"}},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7] },
			want:  []string{"3", "T0"},
			check: func(f *fx) {
				if f.exists(kStock) || f.exists(kPending) {
					f.t.Error("a repeat buyer's call wrote")
				}
			},
		},
		{
			// Issue 10: with no deposit, no queue and no request id the
			// proxy sends 7 ARGV.
			name:  "ok sync with the short ARGV",
			setup: [][]string{stock(3, 3, 0, 0, 0)},
			give:  func(f *fx) []string { return f.reserveArgs("u1", 1, 1, "T1", false, 0, "")[:7] },
			want:  []string{"1", "2"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "2", "p": "1"})
				f.wantHash(kRes, map[string]string{"T1": "p|u1|1|1000||"})
				f.wantTTL(kUsers)
				f.wantTTL(kRes)
				f.wantTTL(kPending)
			},
		},
		{
			name:  "deposit of the same generation lands",
			setup: [][]string{stock(0, 0, 0, 0, 0), {"HSET", kStock, "g", "7"}},
			give: func(f *fx) []string {
				return append(f.reserveArgs("u1", 1, 1, "T1", false, 2, "M1"), "300000", "7")
			},
			want:  []string{"1", "1"},
			check: func(f *fx) { f.wantHash(kStock, map[string]string{"r": "1", "i": "2", "p": "1"}) },
		},
		{
			name:  "deposit of another generation is refused",
			setup: [][]string{stock(0, 0, 0, 0, 0), {"HSET", kStock, "g", "8"}},
			give: func(f *fx) []string {
				return append(f.reserveArgs("u1", 1, 1, "T1", false, 2, "M1"), "300000", "7")
			},
			want: []string{"2", "0"},
			check: func(f *fx) {
				f.wantHash(kStock, map[string]string{"r": "0", "i": "0", "p": "0"})
				if f.exists(kMovesIn) {
					f.t.Error("a refused deposit was recorded as landed")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			wantReply(t, f.run(lua.Reserve, reserveKeys, tt.give(f)), tt.want)
			if tt.check != nil {
				tt.check(f)
			}
		})
	}
}

// TestReserveShortCall: the common call (sync mode, nothing to deposit, no
// request id) sends 6 KEYS and 7 ARGV; a winner, the sell-out and a repeat
// all run on them, and "2" (no buyer memo) leaves the epoch unread.
func TestReserveShortCall(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(2, 2, 0, 0, 0), {"SET", kEpoch, "5"}})
	short := reserveKeys[:6]
	args := func(user, id, mode string) []string {
		a := f.reserveArgs(user, 1, 1, id, false, 0, "")[:7]
		a[6] = mode
		return a
	}
	wantReply(t, f.run(lua.Reserve, short, args("u1", "T1", "2")), []string{"1", "1"})
	wantReply(t, f.run(lua.Reserve, short, args("u2", "T2", "0")), []string{"1", "0"})
	if !f.exists(kOut) {
		t.Error("the sell-out did not set the out flag")
	}
	wantReply(t, f.run(lua.Reserve, short, args("u3", "T3", "2")), []string{"2", "0"})
	f.do("HSET", kRes, "T1", "c|u1|1|900|O-1|")
	wantReply(t, f.run(lua.Reserve, short, args("u1", "T4", "2")), []string{"4", "T1", "O-1"})
	wantReply(t, f.run(lua.Reserve, short, args("u1", "T5", "0")), []string{"4", "T1", "O-1", "", "1", "5"})
	f.wantHash(kStock, map[string]string{"r": "0", "p": "2"})
	if f.exists(kLog) || f.exists(kMovesIn) {
		t.Error("a sync call without a deposit wrote log or movesin")
	}
}

func TestReserveDepositIsIdempotentByMoveID(t *testing.T) {
	f := newFx(t)
	f.reset([][]string{stock(0, 0, 0, 0, 0)})
	wantReply(t, f.run(lua.Reserve, reserveKeys, f.reserveArgs("u1", 1, 1, "T1", false, 2, "M1")), []string{"1", "1"})
	wantReply(t, f.run(lua.Reserve, reserveKeys, f.reserveArgs("u2", 1, 1, "T2", false, 2, "M1")), []string{"1", "0"})
	wantReply(t, f.run(lua.Reserve, reserveKeys, f.reserveArgs("u3", 1, 1, "T3", false, 2, "M1")), []string{"2", "0"})
	f.wantHash(kStock, map[string]string{"r": "0", "i": "2", "p": "2"})
	// deposit.lua shares the move-id set: the same move cannot land twice.
	wantReply(t, f.run(lua.Deposit, depositKeys, []string{"M1", "2", strconv.FormatInt(f.exp, 10)}), []string{"6"})
	f.wantHash(kStock, map[string]string{"r": "0", "i": "2"})
}

func TestSteal(t *testing.T) {
	f := newFx(t)
	tests := []struct {
		name      string
		setup     [][]string
		need      int
		want      []string
		wantR     string
		wantOut   bool
		wantMoved string // moves record, "" = none
	}{
		{name: "exactly what is needed, however much the donor has", setup: [][]string{stock(10, 12, 1, 1, 0)}, need: 1,
			want: []string{"1", "1", "0"}, wantR: "9", wantMoved: "3|1|1000|0"},
		{name: "more than one when needed", setup: [][]string{stock(10, 10, 0, 0, 0)}, need: 7,
			want: []string{"1", "7", "0"}, wantR: "3", wantMoved: "3|7|1000|0"},
		{name: "capped at remaining sets out", setup: [][]string{stock(3, 3, 0, 0, 0)}, need: 5,
			want: []string{"1", "3", "0"}, wantR: "0", wantOut: true, wantMoved: "3|3|1000|0"},
		{name: "last unit sets out", setup: [][]string{stock(1, 2, 0, 1, 0)}, need: 1,
			want: []string{"1", "1", "0"}, wantR: "0", wantOut: true, wantMoved: "3|1|1000|0"},
		{name: "empty", setup: [][]string{stock(0, 2, 1, 1, 0), {"SET", kOut, "1"}}, need: 1,
			want: []string{"2", "0"}, wantR: "0", wantOut: true},
		{name: "not ready", need: 1, want: []string{"5", "0"}},
		{name: "stamps the stock generation", setup: [][]string{stock(4, 4, 0, 0, 0), {"HSET", kStock, "g", "77"}}, need: 1,
			want: []string{"1", "1", "77"}, wantR: "3", wantMoved: "3|1|1000|77"},
		{name: "settled before it ran", setup: [][]string{stock(4, 4, 0, 0, 0), {"HSET", kMoves, "M1", "-1|0|900|0"}, {"PEXPIRE", kMoves, "60000"}}, need: 1,
			want: []string{"14", "0"}, wantR: "4", wantMoved: "-1|0|900|0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			before := f.hash(kStock)
			got := f.run(lua.Steal, stealKeys, []string{strconv.Itoa(tt.need), "M1", "3", "1000", strconv.FormatInt(f.exp, 10)})
			wantReply(t, got, tt.want)
			after := f.hash(kStock)
			if after["r"] != tt.wantR && tt.setup != nil {
				t.Errorf("r = %q, want %q", after["r"], tt.wantR)
			}
			if tt.setup != nil {
				// The units leave the donor's initial too, so the donor keeps i = r + p + c.
				moved, _ := strconv.Atoi(got[1])
				bi, _ := strconv.Atoi(before["i"])
				if ai, _ := strconv.Atoi(after["i"]); ai != bi-moved {
					t.Errorf("i = %d, want %d", ai, bi-moved)
				}
			}
			if f.exists(kOut) != tt.wantOut {
				t.Errorf("out flag = %v, want %v", f.exists(kOut), tt.wantOut)
			}
			if tt.wantOut && tt.want[0] == "1" {
				f.wantTTL(kOut)
			}
			moves := f.hash(kMoves)
			if tt.wantMoved == "" {
				if len(moves) != 0 {
					t.Errorf("moves = %v, want none", moves)
				}
			} else {
				if moves["M1"] != tt.wantMoved {
					t.Errorf("moves[M1] = %q, want %q", moves["M1"], tt.wantMoved)
				}
				f.wantTTL(kMoves)
			}
		})
	}
}

func TestConfirm(t *testing.T) {
	f := newFx(t)
	pending := [][]string{stock(4, 5, 1, 0, 0), {"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}}
	tests := []struct {
		name    string
		setup   [][]string
		token   string
		want    []string
		wantRec string
		wantP   string
		wantC   string
	}{
		{name: "ok", setup: pending, token: "T1", want: []string{"1"}, wantRec: "c|u1|1|900|O-1|", wantP: "0", wantC: "1"},
		{name: "same", setup: [][]string{stock(4, 5, 0, 1, 0), {"HSET", kRes, "T1", "c|u1|1|900|O-0|"}},
			token: "T1", want: []string{"6"}, wantRec: "c|u1|1|900|O-0|", wantP: "0", wantC: "1"},
		{name: "released", setup: [][]string{stock(5, 5, 0, 0, 1), {"HSET", kRes, "T1", "x|u1|1|900||shop said no"}},
			token: "T1", want: []string{"7"}, wantRec: "x|u1|1|900||shop said no", wantP: "0", wantC: "0"},
		{name: "unknown", setup: pending, token: "T9", want: []string{"8"}, wantRec: "p|u1|1|900||", wantP: "1", wantC: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			wantReply(t, f.run(lua.Confirm, confirmKeys, []string{tt.token, "O-1"}), tt.want)
			f.wantHash(kRes, map[string]string{"T1": tt.wantRec})
			f.wantHash(kStock, map[string]string{"p": tt.wantP, "c": tt.wantC})
			if tt.want[0] == "1" && f.int("ZCARD", kPending) != 0 {
				t.Error("confirmed token still in pending zset")
			}
		})
	}
}

// TestRequestIDReplay: a winner's confirm keeps the shop's answer in its
// request-id record (same TTL), atomically with the confirm, and the
// reserve script's request-id branch hands it back; only the record naming
// the confirmed token is written, and none is created.
func TestRequestIDReplay(t *testing.T) {
	f := newFx(t)
	const kRid = "t:{a:s:0}:rid:u1|r1"
	const kRidBits = "t:{a:s:0}:ridbits:s"
	ridKeys := append(append([]string{}, reserveKeys...), kRid, kRidBits)
	// Every call is a new request with a token id of its own (the first
	// is T1): a repeat never reuses one (an existing id is a tombstone).
	calls := 0
	reserve := func() []string {
		tok := "T1"
		if calls++; calls > 1 {
			tok = "R" + strconv.Itoa(calls)
		}
		return f.run(lua.Reserve, ridKeys, append(f.reserveArgs("u1", 1, 1, tok, false, 0, ""), "300000", "0", "4242", "8192"))
	}
	withRid := append(append([]string{}, confirmKeys...), kRid)
	replay := "200|application/json; charset=utf-8|gzip|{\"order\":\"O-1\"}|\n\x00bytes"

	f.reset([][]string{stock(5, 5, 0, 0, 0)})
	wantReply(t, reserve(), []string{"1", "4"})
	wantReply(t, reserve(), []string{"3", "T1"}) // at the shop: pending
	// The request id's bit is set in a bitset of the size asked for, which
	// expires with the activity: sold-out readers find it there.
	if n := f.int("STRLEN", kRidBits); n != 8192/8 {
		t.Errorf("ridbits is %d bytes, want %d", n, 8192/8)
	}
	if b := f.int("GETBIT", kRidBits, "4242"); b != 1 {
		t.Errorf("GETBIT ridbits 4242 = %d, want 1", b)
	}
	if n := f.int("BITCOUNT", kRidBits); n != 1 {
		t.Errorf("BITCOUNT ridbits = %d, want 1", n)
	}
	f.wantTTL(kRidBits)
	ttl := f.int("PTTL", kRid)
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", replay}), []string{"1"})
	if got, _ := f.do("GET", kRid).ToString(); got != "1|T1|"+replay {
		t.Fatalf("rid record = %q", got)
	}
	if after := f.int("PTTL", kRid); after <= 0 || after > ttl {
		t.Errorf("rid PTTL %d after the confirm, was %d: want it kept", after, ttl)
	}
	wantReply(t, reserve(), []string{"4", "T1", "O-1", replay})
	// A retried confirm (SAME) with the replay: harmless, same record.
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", replay}), []string{"6"})
	wantReply(t, reserve(), []string{"4", "T1", "O-1", replay})
	f.wantHash(kStock, map[string]string{"r": "4", "p": "0", "c": "1"})

	// A confirm without a replay leaves the record as the reserve wrote it.
	f.reset([][]string{stock(5, 5, 0, 0, 0)})
	calls = 0
	wantReply(t, reserve(), []string{"1", "4"})
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", ""}), []string{"1"})
	wantReply(t, reserve(), []string{"4", "T1", "O-1"})

	// A record naming another token is not touched; none is created.
	f.reset([][]string{stock(4, 5, 1, 0, 0), {"HSET", kRes, "T1", "p|u1|1|900||"}, {"SET", kRid, "3|T0", "PX", "300000"}})
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", replay}), []string{"1"})
	if got, _ := f.do("GET", kRid).ToString(); got != "3|T0" {
		t.Errorf("another token's rid record = %q", got)
	}
	f.reset([][]string{stock(4, 5, 1, 0, 0), {"HSET", kRes, "T1", "p|u1|1|900||"}})
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", replay}), []string{"1"})
	if f.exists(kRid) {
		t.Error("confirm created a request-id record")
	}
	// Released: nothing changes, the repeat reads RELEASED.
	f.reset([][]string{stock(5, 5, 0, 0, 1), {"HSET", kRes, "T1", "x|u1|1|900||shop said no"}, {"SET", kRid, "1|T1", "PX", "300000"}})
	wantReply(t, f.run(lua.Confirm, withRid, []string{"T1", "O-1", replay}), []string{"7"})
	wantReply(t, reserve(), []string{"7", "T1"})
}

func TestRelease(t *testing.T) {
	f := newFx(t)
	tests := []struct {
		name        string
		setup       [][]string
		only        string // ARGV[4]
		sent        string // ARGV[5]: the send stamp the caller judged by ("" = none)
		want        []string
		wantStock   map[string]string
		wantRec     string
		wantUser    string // users[u1] after, "" = field deleted
		wantOut     bool
		wantPending int64
	}{
		{
			name: "ok from pending, last unit of the user",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}},
			only: "1", want: []string{"1", "1"},
			wantStock: map[string]string{"r": "1", "i": "1", "p": "0", "c": "0", "x": "1"},
			wantRec:   "x|u1|1|900||shop 500|2000",
		},
		{
			name: "ok from confirmed keeps other units of the user",
			setup: [][]string{stock(3, 6, 1, 2, 0), {"HSET", kUsers, "u1", "3|T2"},
				{"HSET", kRes, "T1", "c|u1|2|900|O-1|"}, {"HSET", kRes, "T2", "p|u1|1|950||"}, {"ZADD", kPending, "950", "T2"}},
			only: "0", want: []string{"1", "5"},
			wantStock:   map[string]string{"r": "5", "i": "6", "p": "1", "c": "0", "x": "2"},
			wantRec:     "x|u1|2|900|O-1|shop 500|2000",
			wantUser:    "1|T2",
			wantPending: 1,
		},
		{
			name:      "same",
			setup:     [][]string{stock(2, 2, 0, 0, 1), {"HSET", kRes, "T1", "x|u1|1|900||earlier"}},
			only:      "0",
			want:      []string{"6", "2"},
			wantStock: map[string]string{"r": "2", "x": "1"},
			wantRec:   "x|u1|1|900||earlier",
		},
		{
			name:      "unknown",
			setup:     [][]string{stock(2, 2, 0, 0, 0)},
			only:      "0",
			want:      []string{"8", "0"},
			wantStock: map[string]string{"r": "2", "x": "0"},
		},
		{
			name:      "confirmed refused by pending-only release",
			setup:     [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "c|u1|1|900|O-1|"}},
			only:      "1",
			want:      []string{"9", "0"},
			wantStock: map[string]string{"r": "0", "c": "1", "x": "0"},
			wantRec:   "c|u1|1|900|O-1|",
			wantUser:  "1|T1",
			wantOut:   true,
		},
		{
			name: "queued refused by pending-only release: never released for not being sent",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "q|u1|1|900||0-4"}},
			only: "1", want: []string{"13", "0"},
			wantStock: map[string]string{"r": "0", "p": "1", "x": "0"},
			wantRec:   "q|u1|1|900||0-4",
			wantUser:  "1|T1",
			wantOut:   true,
		},
		{
			name: "queued released by an operator",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "q|u1|1|900||0-4"}},
			only: "0", want: []string{"1", "1"},
			wantStock: map[string]string{"r": "1", "p": "0", "x": "1"},
			wantRec:   "x|u1|1|900||shop 500|2000",
		},
		{
			name: "orphan release: queued without a stream entry, released; its entry will never come",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"HSET", kStock, "u", "1"}, {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "q|u1|1|900||"}},
			only: "u", want: []string{"1", "1"},
			wantStock: map[string]string{"r": "1", "p": "0", "x": "1", "u": "0"},
			wantRec:   "x|u1|1|900||shop 500|2000",
		},
		{
			name: "orphan release of one enqueued since: LISTED, left for the workers",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "q|u1|1|900||0-4"}},
			only: "u", want: []string{"17", "0"},
			wantStock: map[string]string{"r": "0", "p": "1", "x": "0"},
			wantRec:   "q|u1|1|900||0-4",
			wantUser:  "1|T1",
			wantOut:   true,
		},
		{
			name: "orphan release of one claimed and sent since: LISTED",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|1500||"}, {"ZADD", kPending, "1500", "T1"}},
			only: "u", want: []string{"17", "0"},
			wantStock:   map[string]string{"r": "0", "p": "1", "x": "0"},
			wantRec:     "p|u1|1|1500||",
			wantUser:    "1|T1",
			wantOut:     true,
			wantPending: 1,
		},
		{
			name: "pending-only release with the stamp it judged by: released",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}},
			only: "1", sent: "900", want: []string{"1", "1"},
			wantStock: map[string]string{"r": "1", "i": "1", "p": "0", "c": "0", "x": "1"},
			wantRec:   "x|u1|1|900||shop 500|2000",
		},
		{
			name: "re-stamped since (a takeover re-sent it): refused, nothing changed",
			setup: [][]string{stock(0, 1, 1, 0, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|1500||"}, {"ZADD", kPending, "1500", "T1"}},
			only: "1", sent: "900", want: []string{"16", "0"},
			wantStock:   map[string]string{"r": "0", "p": "1", "x": "0"},
			wantRec:     "p|u1|1|1500||",
			wantUser:    "1|T1",
			wantOut:     true,
			wantPending: 1,
		},
		{
			name:  "a stamp given for a confirmed one: still CONFIRMED",
			setup: [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}, {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "c|u1|1|1500|O-1|"}},
			only:  "1", sent: "900", want: []string{"9", "0"},
			wantStock: map[string]string{"r": "0", "c": "1", "x": "0"},
			wantRec:   "c|u1|1|1500|O-1|",
			wantUser:  "1|T1",
			wantOut:   true,
		},
		{
			name: "broken: counters already above initial",
			setup: [][]string{stock(5, 5, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}},
			only: "0", want: []string{"10", "5"},
			wantStock:   map[string]string{"r": "5", "i": "5", "p": "1", "x": "0"},
			wantRec:     "p|u1|1|900||",
			wantUser:    "1|T1",
			wantPending: 1,
		},
		{
			name: "broken: fewer pending than the reservation holds",
			setup: [][]string{stock(4, 5, 1, 0, 0), {"HSET", kUsers, "u1", "2|T1"},
				{"HSET", kRes, "T1", "p|u1|2|900||"}, {"ZADD", kPending, "900", "T1"}},
			only: "0", want: []string{"10", "4"},
			wantStock:   map[string]string{"r": "4", "p": "1", "x": "0"},
			wantRec:     "p|u1|2|900||",
			wantUser:    "2|T1",
			wantPending: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			wantReply(t, f.run(lua.Release, releaseKeys, []string{"T1", "shop 500", "2000", tt.only, tt.sent}), tt.want)
			f.wantHash(kStock, tt.wantStock)
			if tt.wantRec != "" {
				f.wantHash(kRes, map[string]string{"T1": tt.wantRec})
			}
			users := f.hash(kUsers)
			if u, ok := users["u1"]; tt.wantUser == "" && ok || u != tt.wantUser {
				t.Errorf("users[u1] = %q (present %v), want %q", u, ok, tt.wantUser)
			}
			if f.exists(kOut) != tt.wantOut {
				t.Errorf("out flag = %v, want %v", f.exists(kOut), tt.wantOut)
			}
			if n := f.int("ZCARD", kPending); n != tt.wantPending {
				t.Errorf("pending zset size = %d, want %d", n, tt.wantPending)
			}
		})
	}
}

// A repeated request id whose reservation is queued answers PENDING.
func TestReserveRepeatWhileQueued(t *testing.T) {
	f := newFx(t)
	rid := "t:{a:s:0}:rid:u1|R1"
	f.reset([][]string{stock(4, 5, 1, 0, 0), {"HSET", kUsers, "u1", "1|T0"}, {"HSET", kRes, "T0", "q|u1|1|900||0-1"},
		{"SET", rid, "1|T0"}})
	args := append(f.reserveArgs("u1", 1, 1, "T1", true, 0, ""), "60000")
	wantReply(t, f.run(lua.Reserve, append(append([]string(nil), reserveKeys...), rid), args), []string{"3", "T0"})
}

func TestClaim(t *testing.T) {
	f := newFx(t)
	claimKeys := []string{kRes, kPending}
	tests := []struct {
		name      string
		setup     [][]string
		want      []string
		wantRec   string
		wantScore int64 // pending index score of T1 after; 0 = absent
	}{
		{name: "queued is claimed: stamped with the send time, indexed",
			setup: [][]string{{"HSET", kRes, "T1", "q|u1|2|900||0-3"}},
			want:  []string{"1"}, wantRec: "p|u1|2|5000||", wantScore: 5000},
		{name: "pending again (redelivered): re-stamped, send again",
			setup: [][]string{{"HSET", kRes, "T1", "p|u1|2|4000||"}, {"ZADD", kPending, "4000", "T1"}},
			want:  []string{"6"}, wantRec: "p|u1|2|5000||", wantScore: 5000},
		{name: "released (operator) is never sent",
			setup: [][]string{{"HSET", kRes, "T1", "x|u1|2|900||cancelled|950"}},
			want:  []string{"7"}, wantRec: "x|u1|2|900||cancelled|950"},
		{name: "confirmed is not sent again",
			setup: [][]string{{"HSET", kRes, "T1", "c|u1|2|900|O-1|"}},
			want:  []string{"9"}, wantRec: "c|u1|2|900|O-1|"},
		{name: "unknown", want: []string{"8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			wantReply(t, f.run(lua.Claim, claimKeys, []string{"T1", "5000", strconv.FormatInt(f.exp, 10)}), tt.want)
			if tt.wantRec != "" {
				f.wantHash(kRes, map[string]string{"T1": tt.wantRec})
			}
			score, err := f.do("ZSCORE", kPending, "T1").AsInt64()
			if tt.wantScore == 0 && err == nil || tt.wantScore != 0 && score != tt.wantScore {
				t.Errorf("pending score = %d (%v), want %d", score, err, tt.wantScore)
			}
			if tt.wantScore != 0 {
				f.wantTTL(kPending)
			}
		})
	}
}

func TestDeposit(t *testing.T) {
	f := newFx(t)
	tests := []struct {
		name      string
		setup     [][]string
		want      []string
		wantStock map[string]string
		wantOut   bool
		gen       string // ARGV[4], "" = not sent
	}{
		{name: "ok", setup: [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}},
			want: []string{"1"}, wantStock: map[string]string{"r": "3", "i": "4", "c": "1"}},
		{name: "same", setup: [][]string{stock(0, 1, 0, 1, 0), {"SET", kOut, "1"}, {"SADD", kMovesIn, "M1"}},
			want: []string{"6"}, wantStock: map[string]string{"r": "0", "i": "1"}, wantOut: true},
		{name: "not ready", want: []string{"5"}},
		{name: "same generation", setup: [][]string{stock(0, 1, 0, 1, 0), {"HSET", kStock, "g", "7"}, {"SET", kOut, "1"}},
			gen: "7", want: []string{"1"}, wantStock: map[string]string{"r": "3", "i": "4", "c": "1"}},
		{name: "stale generation", setup: [][]string{stock(0, 1, 0, 1, 0), {"HSET", kStock, "g", "8"}, {"SET", kOut, "1"}},
			gen: "7", want: []string{"15"}, wantStock: map[string]string{"r": "0", "i": "1"}, wantOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			args := []string{"M1", "3", strconv.FormatInt(f.exp, 10)}
			if tt.gen != "" {
				args = append(args, tt.gen)
			}
			wantReply(t, f.run(lua.Deposit, depositKeys, args), tt.want)
			if tt.wantStock != nil {
				f.wantHash(kStock, tt.wantStock)
			}
			if f.exists(kOut) != tt.wantOut {
				t.Errorf("out flag = %v, want %v", f.exists(kOut), tt.wantOut)
			}
			if tt.want[0] == "1" {
				f.wantTTL(kMovesIn)
				// A replay is a no-op.
				wantReply(t, f.run(lua.Deposit, depositKeys, args), []string{"6"})
				f.wantHash(kStock, tt.wantStock)
			}
			if tt.want[0] == "5" && f.int("DBSIZE") != 0 {
				t.Error("NOT_READY wrote keys")
			}
		})
	}
}

func TestAbort(t *testing.T) {
	f := newFx(t)
	const kRid = "t:{a:s:0}:rid:u1|r1"
	keys := []string{kStock, kUsers, kRes, kPending, kOut, kMovesIn, kEpoch, kRid}
	tests := []struct {
		name      string
		setup     [][]string
		move      bool // the aborted call carried move M1 of 2 units, generation 0
		want      []string
		wantStock map[string]string
		wantRec   string
		wantUser  string // users[u1] after, "" = none
		wantRid   bool
		queue     bool // ARGV[9] = "1"
	}{
		{name: "releases the late reservation",
			setup: [][]string{stock(1, 2, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "p|u1|1|900||"},
				{"ZADD", kPending, "900", "T1"}, {"SET", kRid, "1|T1"}},
			want: []string{"1"}, wantStock: map[string]string{"r": "2", "i": "2", "p": "0", "x": "1"},
			wantRec: "x|u1|1|900||store_timeout|1000"},
		{name: "keeps the buyer's other units",
			setup: [][]string{stock(0, 2, 2, 0, 0), {"HSET", kUsers, "u1", "2|T1"}, {"HSET", kRes, "T1", "p|u1|1|900||"},
				{"HSET", kRes, "T0", "p|u1|1|800||"}, {"ZADD", kPending, "900", "T1"}},
			want: []string{"1"}, wantStock: map[string]string{"r": "1", "p": "1"},
			wantRec: "x|u1|1|900||store_timeout|1000", wantUser: "1|T1"},
		{name: "tombstone when the reserve has not run",
			setup: [][]string{stock(2, 2, 0, 0, 0), {"SET", kRid, "3|T0"}},
			want:  []string{"14"}, wantStock: map[string]string{"r": "2", "i": "2", "p": "0", "x": "0"},
			wantRec: "x|u1|0|1000||store_timeout|1000", wantRid: true},
		{name: "deposits the carried move and tombstones",
			setup: [][]string{stock(0, 0, 0, 0, 0), {"SET", kOut, "1"}}, move: true,
			want: []string{"14"}, wantStock: map[string]string{"r": "2", "i": "2"},
			wantRec: "x|u1|0|1000||store_timeout|1000"},
		{name: "the move landed already",
			setup: [][]string{stock(1, 2, 1, 0, 0), {"SADD", kMovesIn, "M1"}, {"HSET", kUsers, "u1", "1|T1"},
				{"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}}, move: true,
			want: []string{"1"}, wantStock: map[string]string{"r": "2", "i": "2", "p": "0"},
			wantRec: "x|u1|1|900||store_timeout|1000"},
		{name: "aborted before",
			setup: [][]string{stock(2, 2, 0, 0, 0), {"HSET", kRes, "T1", "x|u1|0|900||store_timeout|900"}},
			want:  []string{"6"}, wantStock: map[string]string{"r": "2"}, wantRec: "x|u1|0|900||store_timeout|900"},
		{name: "confirmed is left alone",
			setup: [][]string{stock(1, 2, 0, 1, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "c|u1|1|900|o1|"}},
			want:  []string{"9"}, wantStock: map[string]string{"r": "1", "c": "1"}, wantRec: "c|u1|1|900|o1|", wantUser: "1|T1"},
		{name: "queue mode: a queued reservation is released", queue: true,
			setup: [][]string{stock(1, 2, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "q|u1|1|900||0-1"}},
			want:  []string{"1"}, wantStock: map[string]string{"r": "2", "p": "0", "x": "1"},
			wantRec: "x|u1|1|900||store_timeout|1000"},
		{name: "queue mode: a late reservation with no stream entry yet is released, its u counted down", queue: true,
			setup: [][]string{stock(1, 2, 1, 0, 0), {"HSET", kStock, "u", "1"}, {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "q|u1|1|900||"}},
			want:  []string{"1"}, wantStock: map[string]string{"r": "2", "p": "0", "x": "1", "u": "0"},
			wantRec: "x|u1|1|900||store_timeout|1000"},
		{name: "queue mode: a claimed (sent) reservation is left alone", queue: true,
			setup: [][]string{stock(1, 2, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "p|u1|1|950||"}, {"ZADD", kPending, "950", "T1"}},
			want:  []string{"9"}, wantStock: map[string]string{"r": "1", "p": "1"}, wantRec: "p|u1|1|950||", wantUser: "1|T1"},
		{name: "sync mode: a queued record is not this mode's",
			setup: [][]string{stock(1, 2, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "q|u1|1|900||0-1"}},
			want:  []string{"9"}, wantStock: map[string]string{"r": "1", "p": "1"}, wantRec: "q|u1|1|900||0-1", wantUser: "1|T1"},
		{name: "broken counters",
			setup: [][]string{stock(2, 2, 1, 0, 0), {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "p|u1|1|900||"}},
			want:  []string{"10"}, wantStock: map[string]string{"r": "2", "p": "1"}, wantRec: "p|u1|1|900||", wantUser: "1|T1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			units, move := "0", ""
			if tt.move {
				units, move = "2", "M1"
			}
			mode := "0"
			if tt.queue {
				mode = "1"
			}
			args := []string{"T1", "u1", "store_timeout", "1000", units, move, "0", strconv.FormatInt(f.exp, 10), mode}
			wantReply(t, f.run(lua.Abort, keys, args), tt.want)
			f.wantHash(kStock, tt.wantStock)
			if got := f.hash(kRes)["T1"]; got != tt.wantRec {
				t.Errorf("res[T1] = %q, want %q", got, tt.wantRec)
			}
			if got := f.hash(kUsers)["u1"]; got != tt.wantUser {
				t.Errorf("users[u1] = %q, want %q", got, tt.wantUser)
			}
			if f.exists(kRid) != tt.wantRid {
				t.Errorf("request id record exists = %v, want %v", f.exists(kRid), tt.wantRid)
			}
			if tt.want[0] == "1" || tt.want[0] == "14" {
				if n := f.int("ZCARD", kPending); n != 0 && tt.name != "keeps the buyer's other units" {
					t.Errorf("pending index holds %d", n)
				}
				if tt.want[0] == "14" {
					f.wantTTL(kRes)
				}
				// The late reserve finds the token settled and takes nothing.
				// A buyer still at their limit is answered by their last
				// reservation, the tombstone not looked for (issue 10: it is,
				// before the first write); either way nothing is written.
				st, us, rs := f.hash(kStock), f.hash(kUsers), f.hash(kRes)
				late := f.run(lua.Reserve, reserveKeys, f.reserveArgs("u1", 1, 1, "T1", tt.queue, 0, ""))
				if tt.name == "keeps the buyer's other units" {
					// T1 is given back: the answer names no reservation
					// rather than a released one.
					wantReply(t, late, []string{"4", "", ""})
				} else {
					wantReply(t, late, []string{"14"})
				}
				f.wantHash(kStock, st)
				f.wantHash(kUsers, us)
				f.wantHash(kRes, rs)
				// A replay of the abort changes nothing.
				before := f.hash(kStock)
				wantReply(t, f.run(lua.Abort, keys, args), []string{"6"})
				f.wantHash(kStock, before)
			}
		})
	}
}

func TestSettleMove(t *testing.T) {
	f := newFx(t)
	args := func() []string { return []string{"M1", "1000", strconv.FormatInt(f.exp, 10)} }
	// The steal ran: its record says where the units go.
	f.reset([][]string{{"HSET", kMoves, "M1", "2|3|900|77"}})
	wantReply(t, f.run(lua.SettleMove, []string{kMoves}, args()), []string{"1", "2", "3", "77"})
	// A record from before generations.
	f.reset([][]string{{"HSET", kMoves, "M1", "2|3|900"}})
	wantReply(t, f.run(lua.SettleMove, []string{kMoves}, args()), []string{"1", "2", "3", "0"})
	// It had not run: a tombstone, and the late steal takes nothing.
	f.reset([][]string{stock(4, 4, 0, 0, 0)})
	wantReply(t, f.run(lua.SettleMove, []string{kMoves}, args()), []string{"14"})
	f.wantHash(kMoves, map[string]string{"M1": "-1|0|1000|0"})
	f.wantTTL(kMoves)
	wantReply(t, f.run(lua.Steal, stealKeys, []string{"1", "M1", "3", "1000", strconv.FormatInt(f.exp, 10)}), []string{"14", "0"})
	f.wantHash(kStock, map[string]string{"r": "4", "i": "4"})
	wantReply(t, f.run(lua.SettleMove, []string{kMoves}, args()), []string{"6"})
}

// TestScriptSHA pins every script: a change to one must be deliberate, and
// this test updated with it (deployed instances cache scripts by SHA).
func TestScriptSHA(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{name: "reserve", src: lua.Reserve, want: "61ec4932ed9578f7bd1238f0703575e841b215bd"},
		{name: "reservebatch", src: lua.ReserveBatch, want: "ef31a381ff4f579cbb2ed23712792a883f1c97f1"},
		{name: "steal", src: lua.Steal, want: "b6856157fe29f93c2b42255f3e61dea17a3005a9"},
		{name: "confirm", src: lua.Confirm, want: "c3919655a6b88d9c4b1943f5a116b57181b3a33c"},
		{name: "release", src: lua.Release, want: "ac53d863f9dc25a56ef52f18e3550acb02e803bc"},
		{name: "confirmbatch", src: lua.ConfirmBatch, want: "b1abfda3e760f4a8897c43978f2e65559f390701"},
		{name: "claim", src: lua.Claim, want: "b0620c8ed6c0c18611fe9d2275d6af9ee4c6523b"},
		{name: "deposit", src: lua.Deposit, want: "90af21c9259a27ce2fd67f111d5e01d92baa5081"},
		{name: "abort", src: lua.Abort, want: "30b097040cce394846382debf986de8eda01b9d4"},
		{name: "settlemove", src: lua.SettleMove, want: "d18a52fc394960a482388ca298c0cc0b63ab4e27"},
		{name: "fleet", src: lua.Fleet, want: "ba92c253300e8a8d4e53ed053e50fea443aa81c7"},
		{name: "bundle", src: lua.Bundle, want: "e1556b190ee98baef13c0d60ffa8abaf4d2240d2"},
		{name: "bundlerelease", src: lua.BundleRelease, want: "039420a8b0dc64aa3876e688513a6268d54dcb40"},
		{name: "bundleconfirm", src: lua.BundleConfirm, want: "f2e4893e32a4c119be0df8fbb6593c6a28f3d1c8"},
		{name: "inflight", src: lua.Inflight, want: "fdb195e6a728ae701bed333f29abee511ffbd408"},
		{name: "spill", src: lua.Spill, want: "288ca27b1c617622419003660f2c30893159f8d7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum := sha1.Sum([]byte(tt.src))
			if got := hex.EncodeToString(sum[:]); got != tt.want {
				t.Errorf("%s.lua SHA1 = %s, want %s: if the change is on purpose, update this test", tt.name, got, tt.want)
			}
		})
	}
}

func TestCodeString(t *testing.T) {
	for c := lua.OK; c <= lua.Listed; c++ {
		if s := c.String(); s == "INVALID" || s == "" {
			t.Errorf("Code(%d).String() = %q", c, s)
		}
	}
	for _, c := range []lua.Code{0, lua.Listed + 1, -1} {
		if s := c.String(); s != "INVALID" {
			t.Errorf("Code(%d).String() = %q, want INVALID", c, s)
		}
	}
	tests := []struct {
		give lua.Code
		want string
	}{
		{lua.Pending, "PENDING"},
		{lua.Purchased, "ALREADY_PURCHASED"},
		{lua.NotReady, "NOT_READY"},
		{lua.Empty, "SOLD_OUT"},
		{lua.Backlog, "BUSY"},
		{lua.Aborted, "STORE_UNAVAILABLE"},
		{lua.Stale, ""},
		{lua.Restamped, ""},
		{lua.Listed, ""},
		{lua.OK, ""},
	}
	for _, tt := range tests {
		if got := tt.give.SpecCode(); got != tt.want {
			t.Errorf("%v.SpecCode() = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// fleet.lua: the roll call counts live instances, drops those not seen
// for stale ms, and keeps the key expiring.
func TestFleetScript(t *testing.T) {
	f := newFx(t)
	const key = "seckill:{fleet}:instances"
	beat := func(id string) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := rueidis.NewLuaScript(lua.Fleet).Exec(ctx, f.c, []string{key}, []string{id, "2000", "10000"}).AsInt64()
		if err != nil {
			t.Fatalf("fleet: %v", err)
		}
		return n
	}
	f.reset(nil)
	if n := beat("a"); n != 1 {
		t.Fatalf("first beat: %d live, want 1", n)
	}
	if n := beat("b"); n != 2 {
		t.Fatalf("second instance: %d live, want 2", n)
	}
	if n := beat("a"); n != 2 {
		t.Fatalf("repeat beat: %d live, want 2", n)
	}
	// c's last beat was 5 s ago (by the local clock, close to Redis'):
	// gone at the next beat, whoever beats.
	f.mustDo("ZADD", key, strconv.FormatInt(time.Now().Add(-5*time.Second).UnixMilli(), 10), "c")
	if n := beat("b"); n != 2 {
		t.Fatalf("stale member kept: %d live, want 2", n)
	}
	if ttl := f.int("PTTL", key); ttl <= 0 || ttl > 10000 {
		t.Fatalf("key ttl %d ms, want (0, 10000]", ttl)
	}
}

// TestEpochMovesWhenUnitsGoDown: every script that lowers a buyer's units
// increments the shard's epoch (the buyer memo's validity, reserve.lua
// KEYS[6]); a script that changes nothing, or a shard without an epoch
// (preheated before it existed), leaves it as it is.
func TestEpochMovesWhenUnitsGoDown(t *testing.T) {
	f := newFx(t)
	confirmed := [][]string{stock(4, 5, 0, 1, 0), {"SET", kEpoch, "100"}, {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "c|u1|1|900|O1|"}}
	pending := [][]string{stock(4, 5, 1, 0, 0), {"SET", kEpoch, "100"}, {"HSET", kUsers, "u1", "1|T1"}, {"HSET", kRes, "T1", "p|u1|1|900||"}, {"ZADD", kPending, "900", "T1"}}
	epoch := func() string {
		v, err := f.do("GET", kEpoch).ToString()
		if rueidis.IsRedisNil(err) {
			return "(none)"
		}
		return v
	}
	abortArgs := []string{"T1", "u1", "store_timeout", "1000", "0", "", "0", strconv.FormatInt(f.exp, 10), "0"}
	abortKeys := []string{kStock, kUsers, kRes, kPending, kOut, kMovesIn, kEpoch}
	for _, tt := range []struct {
		name  string
		setup [][]string
		run   func()
		want  string
	}{
		{"release of a confirmed one", confirmed, func() { f.run(lua.Release, releaseKeys, []string{"T1", "refund", "2000", "0"}) }, "101"},
		{"pending-only release refused", confirmed, func() { f.run(lua.Release, releaseKeys, []string{"T1", "shop", "2000", "1"}) }, "100"},
		{"release of a pending one", pending, func() { f.run(lua.Release, releaseKeys, []string{"T1", "shop", "2000", "1"}) }, "101"},
		{"abort of a late reservation", pending, func() { f.run(lua.Abort, abortKeys, abortArgs) }, "101"},
		{"abort that leaves a tombstone", [][]string{stock(5, 5, 0, 0, 0), {"SET", kEpoch, "100"}}, func() { f.run(lua.Abort, abortKeys, abortArgs) }, "100"},
		{"no epoch: none is created", append(append([][]string{}, confirmed...), []string{"DEL", kEpoch}), func() {
			f.run(lua.Release, releaseKeys, []string{"T1", "refund", "2000", "0"})
		}, "(none)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.t = t
			f.reset(tt.setup)
			tt.run()
			if got := epoch(); got != tt.want {
				t.Errorf("epoch = %s, want %s", got, tt.want)
			}
		})
	}
}
