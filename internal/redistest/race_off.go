//go:build !race

package redistest

// TimeoutScale multiplies the Redis command timeouts of test configs (5
// under the race detector, see race_on.go).
const TimeoutScale = 1
