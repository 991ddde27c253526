package store

import "time"

// SetOutSnapTTL sets outSnapTTL for a test and returns what restores it.
func SetOutSnapTTL(d time.Duration) (restore func()) {
	old := outSnapTTL
	outSnapTTL = d
	return func() { outSnapTTL = old }
}
