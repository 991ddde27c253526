package reservation

import "time"

// SetLeaseTTL shortens the reconciler lease for a test; the returned
// function restores it.
func SetLeaseTTL(d time.Duration) (restore func()) {
	old := leaseTTL
	leaseTTL = d
	return func() { leaseTTL = old }
}

// SetQueueTrouble makes queue workers started from now on begin as after
// Redis trouble (reading back their own delivered entries first), and runs
// after on the reader's goroutine after each answered read-back of a
// shard's own entries (complete: it reached their end). The returned
// function restores both.
func SetQueueTrouble(after func(consumer string, shard int, complete bool)) (restore func()) {
	oldT, oldA := troubleAtStart, afterOwnRead
	troubleAtStart, afterOwnRead = true, after
	return func() { troubleAtStart, afterOwnRead = oldT, oldA }
}

// LeaseTTL is the reconciler lease's TTL serve and the CLI take it with.
func LeaseTTL() time.Duration { return leaseTTL }
