//go:build race

package redistest

// TimeoutScale multiplies the Redis command timeouts of test configs: the
// race detector slows every process of the test several times over, and a
// spike that must see no STORE_UNAVAILABLE would otherwise depend on it.
const TimeoutScale = 5
