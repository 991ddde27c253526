package store

import (
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
