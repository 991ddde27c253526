package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team chaosfo (2026-12-07, docs/decisions.md §60): the failover mix
// (bit 256 of the seed, chaosMixFor). Mid-sale the master the faults
// stall is SIGKILLed or SIGSTOPped until its replica is promoted:
//
//   - single node: a master, a replica and three sentinels, the proxy
//     (every instance, the operator's client) reaching Redis through
//     redis.sentinel (README "Sentinel"); sentinel down-after 3 s, above
//     the longest stall or restart a fault makes (0.2–1.5 s), so only the
//     failover fails the master over. Killed, the old master is started
//     again as a replica of the new one (its supervisor's config after a
//     failover); stopped, it is continued and Sentinel turns it into one
//     (+convert-to-slave, some seconds later);
//   - cluster: a replica per master, cluster-node-timeout 3 s (same
//     reason); killed, the old master is restarted and rejoins as a
//     replica of the promoted one; stopped, it is continued and does so.
//
// What a failover may lose is what docs/decisions.md §10 and §24 say
// replication loses: writes the dead master acknowledged and had not yet
// sent to its replica. The checker allows exactly that (chaosEnv.lostTo*),
// and nothing more; with durable winners (§18) a winner's reservation is
// on the replica before the buyer hears of it, so no winner and no order
// may be lost or doubled (see check in chaos_test.go).

// chaosFailover is one failover the harness made.
type chaosFailover struct {
	what          string
	old, promoted string
	kill, up      time.Time // the master stopped or killed; the replica promoted
	back          time.Time // the old master running again (as a replica, or about to be made one)
	conv          time.Time // the old master seen as a replica (zero: not yet)
	cut           time.Time // the replica stopped and cut off (zero: it did not lag)
}

const (
	chaosSentinelSet       = "chaos-master"
	chaosSentinelDownAfter = 3 * time.Second
	chaosClusterNodeTO     = "3000"
)

// startSentinel gives the single node a replica (the master's own
// arguments, so that promoted it stalls, restarts and syncs its own
// replica as the master did) and three sentinels.
func (c *chaosEnv) startSentinel(master *redistest.Server, args []string) {
	t := c.t
	t.Helper()
	if _, err := master.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("master: %v", err)
	}
	rargs := append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	c.replica = redistest.StartReplica(t, master, rargs...)
	c.sentinels = redistest.StartSentinelsWith(t, chaosSentinelSet, master, 3, 1, chaosSentinelDownAfter)
	nodes := append([]*redistest.Server{master, c.replica}, c.sentinels.Nodes...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the nodes and sentinels said about roles and the failover,
		// for a failing run (their logs go with their temporary dirs).
		for _, n := range nodes {
			b, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
			for _, l := range strings.Split(string(b), "\n") {
				if chaosRoleLine.MatchString(l) {
					t.Logf("%s: %s", n.Addr, l)
				}
			}
		}
	})
}

// chaosRoleLine picks a redis or sentinel log's lines about roles,
// replication links and the failover.
var chaosRoleLine = regexp.MustCompile(`MASTER|REPLICAOF|replica|Replica|sync|Sync|SYNC|[+-](sdown|odown|failover|switch|convert|slave|promoted|selected|elected|reboot|role|config|new-epoch|try-failover|vote|tilt)|master mode|Discarding|Connecting`)

func (c *chaosEnv) sentinelSet() string {
	if c.sentinels == nil {
		return ""
	}
	return chaosSentinelSet
}

func (c *chaosEnv) sentinelAddrs() []string {
	if c.sentinels == nil {
		return nil
	}
	return c.sentinels.Addrs()
}

// chaosClusterWithReplicas is the cluster of the durable and failover
// mixes: 3 masters with a replica each.
func chaosClusterWithReplicas(t *testing.T, m chaosMix) *Redis {
	t.Helper()
	extra := []string{"--cluster-node-timeout", chaosClusterNodeTO, "--repl-diskless-sync-delay", "0"}
	if m.restart {
		extra = append(extra, "--appendonly", "yes", "--appendfsync", "always")
	}
	nodes := redistest.StartClusterWithReplicasWith(t, 3, 1, extra...)
	return &Redis{Addrs: nodes.Addrs(), Cluster: true, Nodes: nodes}
}

// dataNodes is every redis-server holding data, replicas too (MONITOR
// watches them all: a replica promoted runs scripts from then on).
func (c *chaosEnv) dataNodes() []string {
	if c.cluster {
		var out []string
		for _, s := range c.redis.Nodes.All() {
			out = append(out, s.Addr)
		}
		return out
	}
	out := append([]string(nil), c.redis.Addrs...)
	if c.replica != nil {
		out = append(out, c.replica.Addr)
	}
	return out
}

// addrs is the masters' addresses now.
func (c *chaosEnv) addrs() []string {
	c.amu.Lock()
	defer c.amu.Unlock()
	return append([]string(nil), c.masters...)
}

// relayless: the instances reach Redis past any relay (a cluster's nodes
// and a Sentinel's master are dialled at the addresses they announce), so
// a kill closes the client but cannot cut it (§53, §57).
func (c *chaosEnv) relayless() bool { return c.cluster || c.sentinels != nil }

// failover fails the victim master over: SIGSTOP (stop) or SIGKILL, then
// waits (up to 30 s) until its replica is the master, then brings the old
// master back as described at the top of this file. With lag, the replica
// lags that long before the master goes: SIGSTOPped and its link cut
// (CLIENT KILL TYPE replica, as the lagging cluster failover tests do),
// SIGCONTed the moment the master is gone, so everything the master
// acknowledged meanwhile is lost with it (the window §10 and §18 are
// about; a healthy local replica is ~never behind).
func (c *chaosEnv) failover(stop bool, lag time.Duration) {
	t := c.t
	old := c.victim
	var rep *redistest.Server
	if c.cluster {
		r, err := c.redis.Nodes.ReplicaOf(old)
		if err != nil || r == nil {
			t.Errorf("failover: no replica of %s: %v", old.Addr, err)
			return
		}
		rep = r
	} else {
		rep = c.replica
	}
	f := chaosFailover{what: "sigkill", old: old.Addr, promoted: rep.Addr}
	if stop {
		f.what = "sigstop"
	}
	if lag > 0 {
		f.what += fmt.Sprintf(" (replica lagging %v)", lag)
	}
	if lag > 0 {
		f.cut = time.Now()
		rep.Pause(t)
		if _, err := old.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
			c.logf("failover: CLIENT KILL TYPE replica on %s: %v", old.Addr, err)
		}
		time.Sleep(lag)
	}
	f.kill = time.Now()
	if stop {
		old.Pause(t)
	} else {
		old.Kill()
	}
	if lag > 0 {
		rep.Resume(t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.promoted(rep) {
		if time.Now().After(deadline) {
			t.Errorf("failover: %s not promoted 30 s after %s of %s", rep.Addr, f.what, old.Addr)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.up = time.Now()
	c.amu.Lock()
	for i, a := range c.masters {
		if a == old.Addr {
			c.masters[i] = rep.Addr
		}
	}
	c.amu.Unlock()
	c.victim = rep // later faults stall the new master
	if !c.cluster {
		rep.SetReplicaOf(nil)
		old.SetReplicaOf(rep)
		c.replica = old
	}
	if stop {
		old.Resume(t)
	} else {
		old.Restart(t) // MONITOR dials it again by itself (keepDialling)
	}
	f.back = time.Now()
	c.amu.Lock()
	c.failovers = append(c.failovers, f)
	n := len(c.failovers) - 1
	c.amu.Unlock()
	// When the old master turns replica (at once when restarted with
	// --replicaof; Sentinel's +convert-to-slave some seconds after a
	// stopped one is seen again; a cluster node at its first gossip).
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if old.Info("replication", "role") == "slave" {
				c.amu.Lock()
				c.failovers[n].conv = time.Now()
				c.amu.Unlock()
				c.logf("failover: old master %s a replica again", old.Addr)
				return
			}
		}
		t.Errorf("failover: old master %s not a replica 30 s after it was back", old.Addr)
	}()
	c.logf("failover (%s) of %s: %s promoted %v after, old master back %v after", f.what, f.old, f.promoted,
		f.up.Sub(f.kill).Round(time.Millisecond), f.back.Sub(f.kill).Round(time.Millisecond))
}

// promoted: rep is a master serving (cluster: the cluster is ok as rep
// sees it; Sentinel: the sentinels name it).
func (c *chaosEnv) promoted(rep *redistest.Server) bool {
	if rep.Info("replication", "role") != "master" {
		return false
	}
	if c.cluster {
		info, err := rep.Do("CLUSTER", "INFO")
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}
	addr, err := c.sentinels.MasterAddr()
	return err == nil && addr == rep.Addr
}

// failoversNow is the failovers made so far.
func (c *chaosEnv) failoversNow() []chaosFailover {
	c.amu.Lock()
	defer c.amu.Unlock()
	return append([]chaosFailover(nil), c.failovers...)
}

// onTheOldMaster: call ran on a master a failover replaced while it still
// acted as a master — before its kill, or, stopped and continued, before
// it was made a replica (a write a client still connected to it made
// there: §24's "the new master is a replica fed asynchronously", and the
// demoted master's writes are dropped by its resync). Such a write may be
// missing on the new master.
func (c *chaosEnv) onTheOldMaster(call chaosCall) bool {
	for _, f := range c.failoversNow() {
		if call.addr == f.old && (call.at.Before(f.kill) || f.conv.IsZero() || call.at.Before(f.conv)) {
			return true
		}
	}
	return false
}

// ranBeforeAFailover: the first script call naming token id (MONITOR)
// ran on a master a failover then replaced (onTheOldMaster).
func (c *chaosEnv) ranBeforeAFailover(id string) bool {
	calls := c.mon.callsOf(id)
	return len(calls) > 0 && c.onTheOldMaster(calls[0])
}

// settledBeforeAFailover: besides the call that made it, a later script
// call naming token id (a confirm, a release, an abort, a claim) ran on a
// master a failover replaced: a settle the new master may lack, so the
// record may be back as it was before it (§24: "reservations, confirms
// and releases the dead master acknowledged in its last moments may be
// missing").
func (c *chaosEnv) settledBeforeAFailover(id string) bool {
	calls := c.mon.callsOf(id)
	for _, call := range calls[min(1, len(calls)):] {
		if c.onTheOldMaster(call) {
			return true
		}
	}
	return false
}

func (c *chaosEnv) failoversText() string {
	var s []string
	for _, f := range c.failoversNow() {
		s = append(s, fmt.Sprintf("%s of %s at %s, %s promoted at %s, old master a replica at %s", f.what, f.old, f.kill.Format("15:04:05.000"),
			f.promoted, f.up.Format("15:04:05.000"), f.conv.Format("15:04:05.000")))
	}
	return strings.Join(s, "; ")
}

// chaosCall is one script call naming a token id: when, and on which node.
type chaosCall struct {
	at   time.Time
	addr string
}

// callsOf is every script call naming token id, by time.
func (m *chaosMonitor) callsOf(id string) []chaosCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]chaosCall(nil), m.calls[id]...)
}

// keepDialling makes every MONITOR connection that ends dial again,
// every 10 ms until it is back or the test ends (a killed node's until it
// is restarted). Lines seen on two connections count once.
func (m *chaosMonitor) keepDialling() {
	var done atomic.Bool
	m.t.Cleanup(func() { done.Store(true) })
	m.mu.Lock()
	defer m.mu.Unlock()
	m.redial = func(addr string) {
		go func() {
			for !done.Load() {
				time.Sleep(10 * time.Millisecond)
				if err := m.dial(addr); err == nil {
					return
				}
			}
		}()
	}
}

// lostToAFailover: without durable winners, token id's reservation
// (record r, State "" when Redis has none) is one a failover lost: Redis
// has no record of it, and its reserve ran on a master before that
// master's failover (§10, §24). With durable winners nothing a buyer was
// told of may be lost (§18): false.
func (c *chaosEnv) lostToAFailover(id string, r rtRecord) bool {
	return !c.mix.durable && r.State == "" && c.ranBeforeAFailover(id)
}

// lostToAFailoverAt is lostToAFailover for a reservation MONITOR never
// saw a script call of (its connections have gaps: a node restarted or
// stopped while it dials again, Sentinel's CLIENT KILL): judged by when
// the buyer's request reached the shop (or the answer, never sent), which
// came after the reserve: before the old master was a replica again.
func (c *chaosEnv) lostToAFailoverAt(id string, r rtRecord, at time.Time) bool {
	if c.mix.durable || r.State != "" {
		return false
	}
	if len(c.mon.callsOf(id)) > 0 {
		return c.ranBeforeAFailover(id)
	}
	for _, f := range c.failoversNow() {
		if f.conv.IsZero() || at.Before(f.conv) {
			return true
		}
	}
	return false
}

// resentAfterAFailover: without durable winners, a queue entry sent
// again because the claim of its first send (queued -> pending) was lost
// with the master a failover replaced: the new master has it queued with
// its entry and a worker claims it afresh (§56: "after a failover that
// lost the claim ... a worker claims it afresh and sends it again; the
// shop must dedup by token"). Its first send came before the failover's
// kill. With durable winners a worker sends only after its claim reached
// the replicas: false.
func (c *chaosEnv) resentAfterAFailover(tok string, s chaosSent) bool {
	if c.mix.durable || s.act != chaosB || s.n < 2 {
		return false
	}
	for _, f := range c.failoversNow() {
		if s.at[0].Before(f.kill) && s.at[len(s.at)-1].After(f.kill) {
			return true
		}
	}
	return false
}

// preheatLostB: B's preheat is an operator's write like any other; one
// acknowledged by a master a failover then replaced may be missing on the
// new master (seed 259: preheated through a client still connected to
// the stopped master, continued, before the proxy followed the
// switch). The operator's `status` after the failover shows it (README:
// run reconcile after a failover) and they preheat again; B was NOT_READY
// meanwhile (nothing reserved, nothing sold).
func (c *chaosEnv) preheatLostB() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.op.Status(ctx, c.actB)
	if err != nil {
		c.t.Fatalf("status %s: %v", chaosB, err)
	}
	for _, k := range st.SKUs {
		if k.Preheated {
			return
		}
	}
	out, err := c.op.Preheat(ctx, c.actB, false, time.Now())
	c.logf("B's preheat lost with a failover (%s); preheated again: %v %v", c.failoversText(), out, err)
	c.t.Logf("B's preheat lost with a failover (%s); preheated again: %v %v", c.failoversText(), out, err)
	if err != nil {
		c.t.Fatalf("preheat %s again: %v", chaosB, err)
	}
}

// chaosSteal is one steal.lua call MONITOR saw: a stock move out of a
// donor shard (KEYS stock, moves, out; ARGV units needed, move id, …).
type chaosSteal struct {
	at    time.Time
	addr  string
	moves string // the donor's moves key
	need  int64
}

// steal records a steal.lua call: EVALSHA sha 3 stock moves out need id ...
func (m *chaosMonitor) steal(rest string, at time.Time, addr string) {
	i := strings.Index(rest, "\"EVALSHA\"")
	args := strings.Split(strings.Trim(strings.TrimSpace(rest[i:]), "\""), "\" \"")
	if len(args) < 7 || args[2] != "3" || !strings.HasSuffix(args[4], "moves") {
		return
	}
	need, err := strconv.ParseInt(args[6], 10, 64)
	if err != nil {
		return
	}
	m.mu.Lock()
	m.steals = append(m.steals, chaosSteal{at: at, addr: addr, moves: args[4], need: need})
	m.mu.Unlock()
}

// lostMoveSlack is how many of act's units a failover may have counted
// twice without durable winners (0 with them): the units asked of every
// steal.lua call the old master ran from just before its replica fell
// behind (the lag's cut, else 100 ms before the kill: a healthy local
// replica is milliseconds behind) until it was a replica again (§10: "a
// stock move acknowledged by the dead master and not yet sent to its
// replica is lost").
func (c *chaosEnv) lostMoveSlack(act string) int64 {
	if c.mix.durable {
		return 0
	}
	var n int64
	c.mon.mu.Lock()
	steals := append([]chaosSteal(nil), c.mon.steals...)
	c.mon.mu.Unlock()
	for _, f := range c.failoversNow() {
		from := f.kill.Add(-100 * time.Millisecond)
		if !f.cut.IsZero() {
			from = f.cut
		}
		for _, s := range steals {
			if s.addr == f.old && strings.Contains(s.moves, "{"+act+":") && !s.at.Before(from) && (f.conv.IsZero() || s.at.Before(f.conv)) {
				n += s.need
			}
		}
	}
	return n
}

// audit is rtAuditAt over the masters now, with lostMoveSlack.
func (c *chaosEnv) audit(x chaosAct) map[string]rtRecord {
	return rtAuditAtSlack(c.t, c.addrs(), x.a.ID, x.stock, x.limit, c.lostMoveSlack(x.a.ID))
}

// callsText is what MONITOR saw of token id, for a failing run of the
// failover mix ("" otherwise).
func (c *chaosEnv) callsText(id string) string {
	if !c.mix.failover {
		return ""
	}
	var b strings.Builder
	b.WriteString("; script calls naming it:")
	for _, call := range c.mon.callsOf(id) {
		fmt.Fprintf(&b, " %s on %s", call.at.Format("15:04:05.000000"), call.addr)
	}
	fmt.Fprintf(&b, "; failovers: %s", c.failoversText())
	c.mon.mu.Lock()
	fmt.Fprintf(&b, "; MONITOR: %s", strings.Join(c.mon.events, ", "))
	c.mon.mu.Unlock()
	return b.String()
}

// failoverOverlap is how much of [from, to] a failover held Redis (its
// kill to its promotion): no pass can take a lease over meanwhile (§60).
func (c *chaosEnv) failoverOverlap(from, to time.Time) time.Duration {
	var d time.Duration
	for _, f := range c.failoversNow() {
		lo, hi := f.kill, f.up
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// firstSeen is when the shop first got the buy, else or.
func (c *chaosEnv) firstSeen(s chaosSent, or time.Time) time.Time {
	if len(s.at) > 0 {
		return s.at[0]
	}
	return or
}
