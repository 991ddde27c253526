package preflight

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/redis/rueidis"
)

// sentinelMaster asks every configured sentinel where the master of
// redis.sentinel.master_set is, and what it knows of replicas; it returns
// the master's address ("" when no sentinel could say).
func (r *run) sentinelMaster(ctx context.Context) string {
	set := r.cfg.Redis.Sentinel.MasterSet
	masters := map[string][]string{} // master address -> sentinels saying so
	replicas := -1
	for _, addr := range r.cfg.Redis.Sentinel.Addrs {
		name := "redis-sentinel " + addr
		c, err := r.connect(addr)
		if err != nil {
			r.warn(name, "sentinel not reachable: "+err.Error(), "start the sentinel at "+addr+" or fix redis.sentinel.addrs")
			continue
		}
		cctx, cancel := r.ctx(ctx)
		hp, err := c.Do(cctx, c.B().SentinelGetMasterAddrByName().Master(set).Build()).AsStrSlice()
		if err == nil && len(hp) == 2 {
			n, rerr := c.Do(cctx, c.B().SentinelReplicas().Master(set).Build()).ToArray()
			if rerr == nil && (replicas < 0 || len(n) < replicas) {
				replicas = len(n)
			}
		}
		cancel()
		c.Close()
		switch {
		case rueidis.IsRedisNil(err):
			r.fail(name, fmt.Sprintf("the sentinel monitors no master set %q", set), "set redis.sentinel.master_set to the name in the sentinels' `sentinel monitor NAME ...` line")
		case err != nil:
			r.fail(name, "the sentinel refused SENTINEL GET-MASTER-ADDR-BY-NAME: "+err.Error(), "check redis.sentinel.addrs and the sentinel's ACL")
		case len(hp) != 2:
			r.fail(name, fmt.Sprintf("the sentinel monitors no master set %q", set), "set redis.sentinel.master_set to the name in the sentinels' `sentinel monitor NAME ...` line")
		default:
			m := net.JoinHostPort(hp[0], hp[1])
			masters[m] = append(masters[m], addr)
		}
	}
	if len(masters) == 0 {
		r.fail("redis-sentinel", "no sentinel named the master of "+set, "start the sentinels and check redis.sentinel.addrs and master_set")
		return ""
	}
	var master string
	if len(masters) > 1 {
		var views []string
		for m, by := range masters {
			views = append(views, m+" (by "+strings.Join(by, ",")+")")
			if len(by) > len(masters[master]) {
				master = m
			}
		}
		r.warn("redis-sentinel", "the sentinels disagree on the master: "+strings.Join(views, "; "), "wait for the failover to settle before the sale; check the sentinels' quorum")
	} else {
		for m := range masters {
			master = m
		}
		r.pass("redis-sentinel", fmt.Sprintf("master %s of %q, named by %d sentinel(s)", master, set, len(masters[master])))
	}
	switch {
	case replicas == 0:
		r.warn("redis-sentinel-replicas", "the master has no replica: a failover has nothing to promote", "run at least one replica of "+master)
	case len(r.cfg.Redis.Sentinel.Addrs) < 3:
		r.warn("redis-sentinel-quorum", fmt.Sprintf("%d sentinel(s) configured: fewer than 3 cannot fail over while one of them is down", len(r.cfg.Redis.Sentinel.Addrs)),
			"run 3 sentinels on different hosts and list them all in redis.sentinel.addrs")
	}
	return master
}
