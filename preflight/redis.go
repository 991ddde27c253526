package preflight

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// node is one Redis server: a configured address or, on a cluster, any
// node CLUSTER NODES lists.
type node struct {
	addr    string
	master  bool
	c       rueidis.Client // nil when unreachable
	conf    map[string]string
	confErr error
	info    map[string]string
}

// settings are the CONFIG parameters the checks read, one CONFIG GET each
// (a single CONFIG GET of several needs Redis 7).
var settings = []string{"maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save", "cluster-enabled", "cluster-require-full-coverage"}

// timeout bounds one preflight call to Redis: the configured per-command
// timeout is for the buy path; preflight may run over a slower network.
func (r *run) timeout() time.Duration { return max(r.cfg.Redis.Timeout, 2*time.Second) }

func (r *run) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, r.timeout())
}

func (r *run) clustered() bool { return r.cfg.Redis.Cluster || len(r.cfg.Redis.Addrs) > 1 }

// connect opens a client to one node alone, with the configured ACL user.
func (r *run) connect(addr string) (rueidis.Client, error) {
	d := net.Dialer{Timeout: r.timeout(), KeepAlive: 10 * time.Second}
	tlsConf, err := r.cfg.Redis.TLS.Config()
	if err != nil {
		return nil, err
	}
	return rueidis.NewClient(rueidis.ClientOption{
		TLSConfig:         tlsConf,
		InitAddress:       []string{addr},
		Username:          r.cfg.Redis.Username,
		Password:          r.cfg.RedisPassword(),
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		ClientName:        "seckill-proxy-preflight",
		Dialer:            d,
		ConnWriteTimeout:  r.timeout(),
	})
}

// connectFix says what to do about a node that refused or did not answer.
func (r *run) connectFix(addr string, err error) string {
	msg := err.Error()
	if strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM") || strings.Contains(msg, "invalid username-password") {
		env := "redis.password_env"
		if r.cfg.Redis.PasswordEnv != "" {
			env = "$" + r.cfg.Redis.PasswordEnv
		}
		return fmt.Sprintf("check redis.username (%q) and %s against the ACL of %s (ACL GETUSER)", r.cfg.Redis.Username, env, addr)
	}
	return "start Redis at " + addr + " or fix redis.addrs; check firewalls between this host and it"
}

// redisNodes connects to every node and learns a cluster's topology.
func (r *run) redisNodes(ctx context.Context) {
	seen := map[string]*node{}
	addrs := r.cfg.Redis.Addrs
	if r.cfg.Redis.Sentinel.Enabled() {
		m := r.sentinelMaster(ctx)
		if m == "" {
			return
		}
		addrs = []string{m}
	}
	for _, addr := range addrs {
		if seen[addr] != nil {
			continue
		}
		n := &node{addr: addr, master: true}
		seen[addr] = n
		r.nodes = append(r.nodes, n)
		r.reach(ctx, n, true)
	}
	if r.clustered() {
		r.topology(ctx, seen)
	} else if len(r.nodes) == 1 && r.nodes[0].c != nil {
		r.single(r.nodes[0])
	}
}

// reach connects to n and reads its settings; what fails is reported.
func (r *run) reach(ctx context.Context, n *node, required bool) {
	name := "redis-reachable " + n.addr
	c, err := r.connect(n.addr)
	if err == nil {
		cctx, cancel := r.ctx(ctx)
		err = c.Do(cctx, c.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		if required {
			r.fail(name, "not reachable with the configured ACL user: "+err.Error(), r.connectFix(n.addr, err))
		} else {
			r.warn(name, "replica not reachable: "+err.Error()+"; its master has no standby", r.connectFix(n.addr, err))
		}
		return
	}
	n.c = c
	cctx, cancel := r.ctx(ctx)
	defer cancel()
	cmds := make(rueidis.Commands, 0, len(settings)+1)
	for _, p := range settings {
		cmds = append(cmds, c.B().ConfigGet().Parameter(p).Build())
	}
	cmds = append(cmds, c.B().Info().Build())
	res := c.DoMulti(cctx, cmds...)
	n.conf = map[string]string{}
	for i, p := range settings {
		m, err := res[i].AsStrMap()
		if err != nil {
			n.confErr = err
			break
		}
		if v, ok := m[p]; ok {
			n.conf[p] = v
		}
	}
	n.info = map[string]string{}
	if s, err := res[len(settings)].ToString(); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				n.info[k] = v
			}
		}
	}
	role := "master"
	if n.info["role"] == "slave" {
		role = "replica"
	}
	user := r.cfg.Redis.Username
	if user == "" {
		user = "default"
	}
	r.pass(name, fmt.Sprintf("Redis %s, %s, as ACL user %s", n.info["redis_version"], role, user))
}

// single checks that one configured address is a writable, non-cluster
// master, as the proxy in single-node mode needs.
func (r *run) single(n *node) {
	name := "redis-mode " + n.addr
	switch {
	case n.info["cluster_enabled"] == "1":
		r.fail(name, "the node is part of a Redis Cluster but the config names one node without redis.cluster: the proxy would get MOVED for most keys",
			"set redis.cluster: true (and list a few masters in redis.addrs)")
	case n.info["role"] == "slave":
		n.master = false
		r.fail(name, "the node is a replica: every write of the proxy would be refused (READONLY)", "point redis.addrs at the master")
	default:
		r.pass(name, "single node, master")
	}
}

// nodeChecks runs the per-node checks on a reachable node.
func (r *run) nodeChecks(ctx context.Context, n *node) {
	if n.confErr != nil {
		r.warn("settings "+n.addr, "CONFIG GET refused ("+n.confErr.Error()+"): eviction policy, persistence and save could not be read",
			"check them where your provider shows them: maxmemory-policy noeviction, appendonly yes, appendfsync everysec, no RDB save during the sale")
	} else {
		r.policy(n)
		if n.master {
			r.persistence(n)
		}
		r.rdbSave(n)
		if r.clustered() && n.master {
			r.fullCoverage(n)
		}
	}
	if n.master {
		r.memory(n)
		r.durableWinners(n)
	}
	r.clock(ctx, n)
	if n.master {
		r.scripts(ctx, n)
	}
}

func (r *run) policy(n *node) {
	name := "maxmemory-policy " + n.addr
	p, mm := n.conf["maxmemory-policy"], n.conf["maxmemory"]
	if p == "noeviction" {
		r.pass(name, "noeviction")
		return
	}
	detail := store.EvictionWarning(n.addr, n.conf)
	if detail == "" {
		detail = fmt.Sprintf("redis %s: maxmemory-policy is %s (maxmemory %s): once a maxmemory is set, Redis may evict stock or reservation keys", n.addr, p, mm)
	}
	r.fail(name, detail, "redis-cli -h "+host(n.addr)+" -p "+port(n.addr)+" CONFIG SET maxmemory-policy noeviction (and in redis.conf)")
}

func (r *run) persistence(n *node) {
	name := "persistence " + n.addr
	aof, fsync := n.conf["appendonly"], n.conf["appendfsync"]
	switch {
	case aof != "yes":
		r.warn(name, "appendonly is "+aof+": a restart loses every reservation since the last RDB snapshot (stock sold twice)",
			"CONFIG SET appendonly yes on every master (and in redis.conf)")
	case fsync != "everysec":
		why := "at most 1 s of writes is lost on a crash with everysec"
		if fsync == "always" {
			why = "always fsyncs every write: the buy path waits for the disk"
		} else if fsync == "no" {
			why = "no leaves flushing to the OS: a crash loses up to ~30 s of reservations"
		}
		r.warn(name, "appendonly yes, appendfsync "+fsync+": "+why, "CONFIG SET appendfsync everysec")
	default:
		r.pass(name, "appendonly yes, appendfsync everysec")
	}
}

func (r *run) rdbSave(n *node) {
	name := "rdb-save " + n.addr
	if s := strings.TrimSpace(n.conf["save"]); s != "" {
		r.warn(name, "save is \""+s+"\": a BGSAVE forks Redis during the sale, and the fork stalls every command for milliseconds per GB",
			"CONFIG SET save \"\" for the window (AOF keeps the data), and restore it after")
		return
	}
	r.pass(name, "no RDB save points")
}

func (r *run) fullCoverage(n *node) {
	name := "cluster-require-full-coverage " + n.addr
	if msg := store.FullCoverageWarning(n.addr, n.conf); msg != "" {
		r.warn(name, msg, "CONFIG SET cluster-require-full-coverage no on every master")
		return
	}
	r.pass(name, "no: live masters keep selling while a failed one is replaced")
}

// clock compares this host's clock with the node's TIME, allowing for the
// round trip: the offset judged is the least the clocks can differ.
func (r *run) clock(ctx context.Context, n *node) {
	name := "clock " + n.addr
	cctx, cancel := r.ctx(ctx)
	defer cancel()
	offset, rtt, err := store.MeasureClock(cctx, n.c, r.opt.Now)
	if err != nil {
		r.warn(name, fmt.Sprintf("TIME failed: %v", err), "allow TIME to the ACL user")
		return
	}
	least := store.NodeClock{Offset: offset, RTT: rtt}.Least()
	detail := fmt.Sprintf("Redis is %s %s this host (round trip %s)", roundDur(offset.Abs()), aheadBehind(offset), roundDur(rtt))
	fix := "sync both clocks with NTP (chronyc tracking / timedatectl): windows and reservation ages are judged by the proxies' clocks, shared budgets by Redis'; serve refuses buys past server.max_clock_skew"
	switch {
	case least > ClockFail:
		r.fail(name, detail+", more than "+ClockFail.String(), fix)
	case least > ClockWarn:
		r.warn(name, detail+", more than "+ClockWarn.String(), fix)
	default:
		r.pass(name, detail)
	}
}

// roundDur keeps a duration readable: ms above 10 ms, else µs.
func roundDur(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

func aheadBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}

// scripts loads every script the proxy runs (SCRIPT LOAD compiles it) and
// checks the SHA Redis names it by.
func (r *run) scripts(ctx context.Context, n *node) {
	name := "scripts " + n.addr
	all := lua.All()
	names := sortedKeys(all)
	cctx, cancel := r.ctx(ctx)
	defer cancel()
	cmds := make(rueidis.Commands, 0, len(names))
	for _, s := range names {
		cmds = append(cmds, n.c.B().ScriptLoad().Script(all[s]).Build())
	}
	var bad []string
	var first error
	for i, res := range n.c.DoMulti(cctx, cmds...) {
		sha, err := res.ToString()
		if err == nil {
			h := sha1.Sum([]byte(all[names[i]]))
			if want := hex.EncodeToString(h[:]); sha != want {
				err = fmt.Errorf("SCRIPT LOAD answered %s, want %s", sha, want)
			}
		}
		if err != nil {
			bad = append(bad, names[i])
			if first == nil {
				first = err
			}
		}
	}
	if len(bad) > 0 {
		fix := "use Redis 7 with Lua scripting"
		if strings.Contains(first.Error(), "NOPERM") {
			fix = "grant the ACL user +@scripting (EVAL, EVALSHA, SCRIPT LOAD)"
		}
		r.fail(name, fmt.Sprintf("%d of %d scripts do not load (%s): %v", len(bad), len(names), strings.Join(bad, ", "), first), fix)
		return
	}
	r.pass(name, fmt.Sprintf("%d scripts load", len(names)))
}

func host(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "6379"
	}
	return p
}

// durableWinners checks, with redis.durable_winners on, that a master has
// the replicas a winner waits for: one with fewer refuses (or forwards
// as not durable) every winner of its shards, each after the timeout.
func (r *run) durableWinners(n *node) {
	d := r.cfg.Redis.DurableWinners
	if !d.Enabled() {
		return
	}
	name := "durable-winners " + n.addr
	got, err := strconv.Atoi(n.info["connected_slaves"])
	if err != nil {
		r.warn(name, "INFO replication not readable: cannot tell how many replicas acknowledge winners",
			"check that every master has redis.durable_winners.replicas replicas connected")
		return
	}
	if got < d.Replicas {
		r.fail(name, fmt.Sprintf("%d connected replica(s), redis.durable_winners.replicas is %d: every winner on this master's shards would wait %s and be %s",
			got, d.Replicas, d.Timeout, map[bool]string{true: "refused (STORE_UNAVAILABLE)", false: "forwarded without a replica's copy"}[d.OnTimeout != config.DurableForward]),
			"attach replicas (REPLICAOF, or cluster replicas) or lower redis.durable_winners.replicas")
		return
	}
	if d.FSync && !versionAtLeast(n.info["redis_version"], 7, 2) {
		r.warn(name, "redis.durable_winners.fsync needs WAITAOF (Redis 7.2+), this node runs "+n.info["redis_version"]+": winners wait with WAIT (received, not fsynced)",
			"upgrade to Redis 7.2+ or set fsync: false")
		return
	}
	r.pass(name, fmt.Sprintf("%d connected replica(s) for %d wanted", got, d.Replicas))
}

// versionAtLeast reports whether a redis_version "X.Y.Z" is at least major.minor.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
