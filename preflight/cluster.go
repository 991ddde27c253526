package preflight

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// numSlots is Redis Cluster's hash slot count.
const numSlots = 16384

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	addr   string
	master bool
	failed bool // fail, noaddr or handshake: serves nothing
	slots  [][2]int
}

// parseClusterNodes reads CLUSTER NODES; migrating/importing entries
// ("[slot->-id]") are skipped.
func parseClusterNodes(text string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := clusterNode{addr: addr}
		for _, fl := range strings.Split(f[2], ",") {
			switch fl {
			case "master":
				n.master = true
			case "fail", "noaddr", "handshake":
				n.failed = true
			}
		}
		if strings.HasPrefix(addr, ":") {
			n.failed = true
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= b && a >= 0 && b < numSlots {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		out = append(out, n)
	}
	return out
}

// topology reads CLUSTER NODES from the first reachable seed, connects to
// every node it lists, and checks that every slot has a live master.
func (r *run) topology(ctx context.Context, seen map[string]*node) {
	var text string
	var err error
	asked := false
	for _, n := range r.nodes {
		if n.c == nil {
			continue
		}
		asked = true
		cctx, cancel := r.ctx(ctx)
		text, err = n.c.Do(cctx, n.c.B().ClusterNodes().Build()).ToString()
		cancel()
		if err == nil {
			break
		}
	}
	if !asked {
		return // every seed failed its reachable check
	}
	if err != nil {
		fix := "check the cluster with redis-cli --cluster check " + r.cfg.Redis.Addrs[0]
		if strings.Contains(err.Error(), "cluster support disabled") {
			fix = "Redis is a single node: list one address in redis.addrs and set redis.cluster: false"
		}
		r.fail("cluster-slots", "CLUSTER NODES failed: "+err.Error(), fix)
		return
	}
	r.slotOwner = make([]string, numSlots)
	for _, cn := range parseClusterNodes(text) {
		n := seen[cn.addr]
		if n == nil && !cn.failed {
			n = &node{addr: cn.addr, master: cn.master}
			seen[cn.addr] = n
			r.nodes = append(r.nodes, n)
			r.reach(ctx, n, cn.master)
		}
		if n != nil {
			n.master = cn.master
		}
		if cn.failed {
			// A configured seed that failed its reachable check is reported.
			if cn.master && len(cn.slots) > 0 && (n == nil || n.c != nil) {
				r.fail("redis-reachable "+cn.addr, "the cluster marks this master failed; its slots have no live master",
					"bring it back or fail over to a replica (redis-cli --cluster check)")
			}
			continue
		}
		if cn.master {
			for _, s := range cn.slots {
				for i := s[0]; i <= s[1]; i++ {
					r.slotOwner[i] = cn.addr
				}
			}
		}
	}
	var missing []string
	nMissing := 0
	for i := 0; i < numSlots; i++ {
		if r.slotOwner[i] != "" {
			continue
		}
		j := i
		for j+1 < numSlots && r.slotOwner[j+1] == "" {
			j++
		}
		nMissing += j - i + 1
		if len(missing) < 5 {
			if i == j {
				missing = append(missing, strconv.Itoa(i))
			} else {
				missing = append(missing, fmt.Sprintf("%d-%d", i, j))
			}
		}
		i = j
	}
	masters := len(r.masters())
	if nMissing > 0 {
		r.fail("cluster-slots", fmt.Sprintf("%d of %d slots have no live master (%s): keys there can be neither read nor written", nMissing, numSlots, strings.Join(missing, ", ")),
			"assign them (redis-cli --cluster fix "+r.cfg.Redis.Addrs[0]+") before the sale")
		return
	}
	r.pass("cluster-slots", fmt.Sprintf("all %d slots served by %d masters", numSlots, masters))
}

// masters are the addresses owning slots.
func (r *run) masters() map[string]bool {
	out := map[string]bool{}
	for _, a := range r.slotOwner {
		if a != "" {
			out[a] = true
		}
	}
	return out
}

// keySlot is Redis Cluster's slot of key (the store's own computation).
func keySlot(key string) int { return store.KeySlot(key) }

// shardSlots is where each stock shard of one SKU lives: the cluster slot
// of its stock key, named by the key layout of store/keys.go (all keys of
// a shard share its hash tag). It is the one place preflight knows how
// shards are placed: swap it for the store's own placement when shards
// are placed on purpose.
func shardSlots(st *store.Store, act, sku string, shards int) []int {
	out := make([]int, shards)
	for i, sk := range st.SKUKeys(act, sku, shards).Shards {
		out[i] = keySlot(sk.Stock)
	}
	return out
}

// owners returns the master of each shard of sku ("" when its slot has
// no live master). On a single node every shard is on it.
func (r *run) owners(a *config.Activity, sku string, shards int) []string {
	out := make([]string, shards)
	if !r.clustered() {
		for i := range out {
			out[i] = r.nodes[0].addr
		}
		return out
	}
	if r.slotOwner == nil || r.st == nil {
		return out
	}
	for i, s := range shardSlots(r.st, a.ID, sku, shards) {
		out[i] = r.slotOwner[s]
	}
	return out
}

// spread checks, per activity, that its shards sit evenly on the
// masters: a master without any is idle while the others take the spike.
// A preheated activity is read as the store placed it (issue 11 §3: preheat
// chooses each shard's tag so they spread evenly; a reshard since may have
// made it uneven); one not preheated yet is judged by what preheat will do.
func (r *run) spread(ctx context.Context) {
	if !r.clustered() || r.slotOwner == nil || r.st == nil {
		return
	}
	masters := len(r.masters())
	if masters == 0 {
		return
	}
	for _, a := range r.activities() {
		name := "shard-spread " + a.ID
		p, ok, err := r.st.PlacementOf(ctx, a.ID)
		switch {
		case err != nil:
			r.warn(name, "shard placement unreadable: "+err.Error(), "check the cluster answers CLUSTER SHARDS (or CLUSTER SLOTS)")
		case ok && !p.Even:
			r.warn(name, store.PlacementWarning(a.ID, p), fmt.Sprintf("seckill-proxy preheat -c FILE --activity %s --force (before the sale: it deletes its reservations)", a.ID))
		case ok:
			r.pass(name, p.Line())
		case a.Shards < masters:
			r.warn(name, fmt.Sprintf("%d shards for %d masters: preheat places one per master, %d masters take none of its spike", a.Shards, masters, masters-a.Shards),
				fmt.Sprintf("set shards: %d (or a multiple) for activity %s", masters, a.ID))
		default:
			r.pass(name, fmt.Sprintf("not preheated yet: preheat will spread its %d shards evenly over the %d masters", a.Shards, masters))
		}
	}
}
