package store

import (
	"runtime"
	"strconv"
	"testing"
)

// TestBuyerMemoHoldsItsBound: redis.buyer_memo counts buyers. ristretto
// adds its own per-entry overhead (~56 bytes) to every entry's cost unless
// told to ignore it, and the memo gives each buyer a cost of 1: a memo of
// 262,144 buyers held ~4,600, and the repeat clicks of the rest ran the
// script. Now IgnoreInternalCost: a memo of n buyers holds n (ristretto
// admits every new entry while there is room).
func TestBuyerMemoHoldsItsBound(t *testing.T) {
	const n = 5000
	m := newBuyerMemo(n)
	defer m.close()
	for i := range n {
		u := "u" + strconv.Itoa(i)
		m.c.Set(m.key("act", u), memoEntry{act: "act", user: u, units: 1, epoch: "1"}, 1)
		if i%500 == 0 {
			m.c.Wait() // ristretto drops sets its buffer cannot take at once
		}
	}
	m.c.Wait()
	held := 0
	for i := range n {
		if _, ok := m.c.Get(m.key("act", "u"+strconv.Itoa(i))); ok {
			held++
		}
	}
	if held < n*95/100 {
		t.Fatalf("a memo of %d buyers holds %d", n, held)
	}
}

// TestBuyerMemoMemoryBound measures what README states for
// redis.buyer_memo: the heap a full memo takes per buyer remembered (the
// entry, its strings, ristretto's item and its 10 counters per entry),
// with ids of a real sale's length: about 330 B, ~85 MiB at the default
// 262,144.
func TestBuyerMemoMemoryBound(t *testing.T) {
	const n = 50000
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m := newBuyerMemo(n)
	defer m.close()
	for i := range n {
		u := "user-" + strconv.Itoa(10_000_000+i)
		m.c.Set(m.key("act_2026_1111", u), memoEntry{act: "act_2026_1111", user: u, units: 1, epoch: "3",
			token:   Token{Activity: "act_2026_1111", SKU: "sku-123456", Shard: 3, ID: newID()},
			orderID: "ORD-2026-" + strconv.Itoa(90_000_000+i)}, 1)
		if i%1000 == 0 {
			m.c.Wait()
		}
	}
	m.c.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d buyers remembered: heap +%.1f MiB, %.0f B each", n, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), per)
	if per > 400 {
		t.Fatalf("%.0f B per buyer remembered; README states about 330", per)
	}
	runtime.KeepAlive(m)
}
