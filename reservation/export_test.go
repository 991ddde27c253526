package reservation

import "time"

// SetLeaseTTL shortens the reconciler lease for a test; the returned
// function restores it.
func SetLeaseTTL(d time.Duration) (restore func()) {
	old := leaseTTL
	leaseTTL = d
	return func() { leaseTTL = old }
}
