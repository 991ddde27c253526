package store

import "time"

// SetOutSnapTTL sets outSnapTTL for a test and returns what restores it.
func SetOutSnapTTL(d time.Duration) (restore func()) {
	old := outSnapTTL
	outSnapTTL = d
	return func() { outSnapTTL = old }
}

// ReserveKeys is reserve.lua's KEYS[1..8] of a shard (a test that calls
// the script directly sends them in the store's order).
func (sk ShardKeys) ReserveKeys() []string { return sk.reserveKeys() }
