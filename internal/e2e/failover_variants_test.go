//go:build failover

// The lagging-replica variants of the cluster failover test (~20 s each):
// `make test-failover`, and on their own in .ci/run (too long for `make
// test`'s 30 s budget per test).

package e2e_test

import (
	"testing"
	"time"
)

// TestClusterFailoverLagging is TestClusterFailover with the killed
// master's replica lagging: foLag before the kill it is SIGSTOPped and its
// link to the master cut (CLIENT KILL TYPE replica), and it is SIGCONTed
// right after the kill, so the winners of those moments are on the master
// only. Their orders are lost to the failover (their units sold
// twice): measured and logged, not failed on — the case durable winners
// exist for.
func TestClusterFailoverLagging(t *testing.T) { runFailover(t, foCase{lag: foLag}) }

// TestClusterFailoverDurable is the lagging failover with durable winners
// (redis.durable_winners: replicas 1, timeout 50ms, refuse): no order the
// shop holds may be lost, no unit sold twice. Winners homed on the killed
// master's shards are refused (STORE_UNAVAILABLE) while its replica lags,
// and again after the failover until the killed master, restarted, has
// rejoined as the new master's replica (a master with no replica cannot
// acknowledge a winner).
func TestClusterFailoverDurable(t *testing.T) {
	runFailover(t, foCase{lag: foLag, durable: true})
}

// foLag is how long the killed master's replica lags before the kill:
// below the cluster's node timeout (1 s), so the replica is not marked
// failed and is promoted once SIGCONTed.
const foLag = 700 * time.Millisecond
