package store

// Shard placement on a Redis Cluster (issue 11 §3). Each shard's keys share
// one hash tag; left to CRC16, an activity's shards fall unevenly over the
// masters (act_p6's 6 shards 4/1/1 on 3 masters; with fewer shards than
// masters, some get none while others get two). At preheat, on a cluster, each shard gets a tag {<act>:<s>:<salt>}
// with the salt searched so the activity's shards spread evenly over the
// masters that own slots: counts differ by at most one. The salts go into
// the activity's meta (field "place", comma-separated, one per shard) and
// every instance builds its keys with them (keyCache, via Flags). An
// activity whose meta has no "place" (a single node, or preheated before
// placement existed) keeps the original tags {<act>:<s>}.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// placeField is the meta hash field holding the shards' salts.
const placeField = "place"

// maxSaltTries bounds the salt search of one shard. A master owning a
// single slot of 16,384 is still found with probability 1-e^-64; a search
// that runs out takes the least loaded master it saw (PlacementCheck then
// reports the activity uneven).
const maxSaltTries = 1 << 20

// parsePlace reads a meta "place" field: shards salts (when shards >= 0),
// each of digits. Anything else is nil: the original tags.
func parsePlace(place string, shards int) []string {
	if place == "" {
		return nil
	}
	salts := strings.Split(place, ",")
	if shards >= 0 && len(salts) != shards {
		return nil
	}
	for _, v := range salts {
		if v == "" || len(v) > 10 {
			return nil
		}
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return nil
			}
		}
	}
	return salts
}

// skuKeys is every key-building call's way to an activity's keys: from the
// cache once the activity's placement is known (one map look-up, as
// before placement existed), else after reading the meta (Flags, client-
// side cached), which records the placement for every later call.
func (s *Store) skuKeys(ctx context.Context, act, sku string, shards int) (*SKUKeys, error) {
	if k := s.keys.lookup(act, sku, shards); k != nil {
		return k, nil
	}
	if !s.keys.resolved(act) {
		if _, err := s.Flags(ctx, act); err != nil {
			return nil, err
		}
	}
	return s.keys.get(act, sku, shards), nil
}

// learnPlacement records what a meta hash says of act's placement.
func (s *Store) learnPlacement(act string, meta map[string]string) {
	if meta["ready"] == "1" {
		s.keys.setPlace(act, meta[placeField])
	} else {
		s.keys.unresolve(act)
	}
}

// clusterMaster is one master owning slots, as the cluster reports it.
type clusterMaster struct {
	Addr  string
	Slots [][2]int
}

// topology is the masters of a cluster and which owns each slot.
type topology struct {
	masters []clusterMaster // sorted by address
	owner   [16384]int16    // index in masters, -1 where no master owns the slot
}

func newTopology(ms []clusterMaster) (*topology, error) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Addr < ms[j].Addr })
	t := &topology{}
	for i := range t.owner {
		t.owner[i] = -1
	}
	for i, m := range ms {
		for _, r := range m.Slots {
			for sl := max(r[0], 0); sl <= r[1] && sl < len(t.owner); sl++ {
				t.owner[sl] = int16(i)
			}
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("redis cluster reports no master owning slots")
	}
	t.masters = ms
	return t, nil
}

// errNotCluster means the server is a single node (or cluster mode is off).
var errNotCluster = errors.New("not a cluster")

// clusterTopology asks the cluster which master owns which slots: CLUSTER
// SHARDS (Redis 7+), or CLUSTER SLOTS on servers that do not know it. Nodes
// are asked one after another (by address) until one answers. On a single
// node it answers errNotCluster with no round trip.
func (s *Store) clusterTopology(ctx context.Context, c rueidis.Client) (*topology, error) {
	if c.Mode() != rueidis.ClientModeCluster {
		return nil, errNotCluster
	}
	nodes := c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var last error = ErrUnavailable
	for _, addr := range addrs {
		n := nodes[addr]
		cctx, cancel := s.ctx(ctx)
		ms, err := topologyFromShards(cctx, n, addr)
		if re, ok := rueidis.IsRedisErr(err); ok && isUnknownCommand(re) {
			ms, err = topologyFromSlots(cctx, n, addr)
		}
		cancel()
		if err == nil {
			return newTopology(ms)
		}
		last = err
	}
	return nil, fmt.Errorf("cluster topology: %w", wrap(last))
}

func isUnknownCommand(re *rueidis.RedisError) bool {
	m := strings.ToLower(re.Error())
	return strings.Contains(m, "unknown subcommand") || strings.Contains(m, "unknown command")
}

// topologyFromShards parses CLUSTER SHARDS: per shard, its slot ranges and
// its nodes; the master is the node with role master (an online one when
// the shard lists several, as during a failover).
func topologyFromShards(ctx context.Context, n rueidis.Client, asked string) ([]clusterMaster, error) {
	arr, err := n.Do(ctx, n.B().ClusterShards().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var out []clusterMaster
	for _, v := range arr {
		shard, err := v.AsMap()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
		}
		sv := shard["slots"]
		nv := shard["nodes"]
		slots, _ := sv.ToArray()
		nodes, _ := nv.ToArray()
		if len(slots) == 0 {
			continue // a master with no slots holds no shard
		}
		m := clusterMaster{}
		for i := 0; i+1 < len(slots); i += 2 {
			lo, err1 := slots[i].AsInt64()
			hi, err2 := slots[i+1].AsInt64()
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER SHARDS: bad slot range")
			}
			m.Slots = append(m.Slots, [2]int{int(lo), int(hi)})
		}
		online := false
		for _, nd := range nodes {
			d, err := nd.AsMap()
			if err != nil {
				continue
			}
			str := func(f string) string { v := d[f]; s, _ := v.ToString(); return s }
			num := func(f string) int64 { v := d[f]; n, _ := v.AsInt64(); return n }
			if str("role") != "master" || online && str("health") != "online" {
				continue
			}
			host := str("endpoint")
			if host == "" || host == "?" {
				host = str("ip")
			}
			if host == "" {
				host, _, _ = net.SplitHostPort(asked)
			}
			port := num("port")
			if port == 0 {
				port = num("tls-port")
			}
			m.Addr = net.JoinHostPort(host, strconv.FormatInt(port, 10))
			online = str("health") == "online"
		}
		if m.Addr == "" {
			continue // no master known for these slots (a failover under way)
		}
		out = append(out, m)
	}
	return merge(out), nil
}

// topologyFromSlots parses CLUSTER SLOTS (servers before 7): per slot
// range, its master first, then its replicas.
func topologyFromSlots(ctx context.Context, n rueidis.Client, asked string) ([]clusterMaster, error) {
	arr, err := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var out []clusterMaster
	for _, v := range arr {
		r, err := v.ToArray()
		if err != nil || len(r) < 3 {
			return nil, errors.New("CLUSTER SLOTS: bad reply")
		}
		lo, err1 := r[0].AsInt64()
		hi, err2 := r[1].AsInt64()
		node, err3 := r[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
			return nil, errors.New("CLUSTER SLOTS: bad reply")
		}
		host, _ := node[0].ToString()
		port, err := node[1].AsInt64()
		if err != nil {
			return nil, errors.New("CLUSTER SLOTS: bad reply")
		}
		if host == "" || host == "?" {
			host, _, _ = net.SplitHostPort(asked)
		}
		out = append(out, clusterMaster{Addr: net.JoinHostPort(host, strconv.FormatInt(port, 10)), Slots: [][2]int{{int(lo), int(hi)}}})
	}
	return merge(out), nil
}

// merge joins the entries of one master.
func merge(ms []clusterMaster) []clusterMaster {
	by := map[string]int{}
	var out []clusterMaster
	for _, m := range ms {
		if i, ok := by[m.Addr]; ok {
			out[i].Slots = append(out[i].Slots, m.Slots...)
			continue
		}
		by[m.Addr] = len(out)
		out = append(out, m)
	}
	return out
}

// placeShards chooses the salt of each of act's shards so they spread over
// t's masters evenly: shards/masters each, and one more on shards%masters
// of them. Shard by shard, salts 0, 1, 2, ... are tried and the first whose
// tag lands on a master with room is kept: deterministic for a given
// topology, so a re-preheat on an unchanged cluster keeps the same keys.
func placeShards(prefix, act string, shards int, t *topology) []string {
	m := len(t.masters)
	lo, extra := shards/m, shards%m
	count := make([]int, m)
	atCeil := 0 // masters holding lo+1 shards
	room := func(i int) bool { return count[i] < lo || (count[i] == lo && atCeil < extra) }
	salts := make([]string, shards)
	for s := 0; s < shards; s++ {
		best, bestSalt := -1, 0
		for salt := 0; salt < maxSaltTries; salt++ {
			i := int(t.owner[keySlot(shardBase(prefix, act, s, strconv.Itoa(salt)))])
			if i < 0 {
				continue // a slot no master owns (the cluster is not fully covered)
			}
			if room(i) {
				best, bestSalt = i, salt
				break
			}
			if best < 0 || count[i] < count[best] {
				best, bestSalt = i, salt
			}
		}
		if best < 0 {
			best, bestSalt = 0, 0 // no covered slot at all: nothing is better
		} else {
			count[best]++
			if count[best] == lo+1 {
				atCeil++
			}
		}
		salts[s] = strconv.Itoa(bestSalt)
	}
	return salts
}

// Placement is how an activity's shards sit on the cluster's masters now.
type Placement struct {
	// Placed is true when preheat chose the shards' tags (false: the
	// original tags, from a preheat before placement existed).
	Placed bool `json:"placed"`
	Shards int  `json:"shards"`
	// PerMaster counts the shards on each master owning slots (by
	// address), zero included.
	PerMaster map[string]int `json:"per_master"`
	// Even: the counts differ by at most one.
	Even bool `json:"even"`
}

// Spread is the counts of PerMaster, highest first, as "3/3/2".
func (p Placement) Spread() string {
	n := make([]int, 0, len(p.PerMaster))
	for _, v := range p.PerMaster {
		n = append(n, v)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(n)))
	parts := make([]string, len(n))
	for i, v := range n {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, "/")
}

// PlacementOf reports how act's shards sit on the masters now: preheat
// spreads them evenly, but a reshard (slots moved between masters, masters
// added or removed) may have made it uneven since. It answers ok false
// with no error on a single node, or when the activity is not preheated.
func (s *Store) PlacementOf(ctx context.Context, act string) (p Placement, ok bool, err error) {
	c, err := s.Client()
	if err != nil {
		return Placement{}, false, err
	}
	if c.Mode() != rueidis.ClientModeCluster {
		return Placement{}, false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, max(10*s.timeout, 2*time.Second))
	defer cancel()
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(act)).Build()).AsStrMap()
	if err != nil {
		return Placement{}, false, wrap(err)
	}
	shards, _ := strconv.Atoi(meta["shards"])
	if meta["ready"] != "1" || shards <= 0 {
		return Placement{}, false, nil
	}
	t, err := s.clusterTopology(cctx, c)
	if err != nil {
		return Placement{}, false, err
	}
	salts := parsePlace(meta[placeField], shards)
	if meta[placeField] != "" && salts == nil {
		return Placement{}, false, fmt.Errorf("activity %s: meta field %q is malformed: %q", act, placeField, meta[placeField])
	}
	p = Placement{Placed: salts != nil, Shards: shards, PerMaster: map[string]int{}}
	for _, m := range t.masters {
		p.PerMaster[m.Addr] = 0
	}
	for i := 0; i < shards; i++ {
		salt := ""
		if salts != nil {
			salt = salts[i]
		}
		if o := t.owner[keySlot(shardBase(s.prefix, act, i, salt))]; o >= 0 {
			p.PerMaster[t.masters[o].Addr]++
		}
	}
	lo, hi := shards, 0
	for _, v := range p.PerMaster {
		lo, hi = min(lo, v), max(hi, v)
	}
	p.Even = hi-lo <= 1
	return p, true, nil
}

// PlacementCheck is PlacementOf for checks (preflight, status): the
// shards per master and whether they are even. On a single node, or for
// an activity not preheated, it answers nil and true.
func (s *Store) PlacementCheck(ctx context.Context, act string) (perMaster map[string]int, even bool, err error) {
	p, ok, err := s.PlacementOf(ctx, act)
	if err != nil || !ok {
		return nil, err == nil, err
	}
	return p.PerMaster, p.Even, nil
}

// WithPlacement adds to st how its activity's shards sit on the masters
// (a cluster only; nothing on a single node or before preheat). A
// placement that cannot be read is said in st.PlacementError, not failed:
// the stock counters are what status is for.
func (s *Store) WithPlacement(ctx context.Context, st *ActivityStatus) {
	p, ok, err := s.PlacementOf(ctx, st.ID)
	switch {
	case err != nil:
		st.PlacementError = err.Error()
	case ok:
		st.Placement = &p
	}
}

// Line is the placement as one line: "8 shards over 3 masters:
// 127.0.0.1:7000=3 127.0.0.1:7001=3 127.0.0.1:7002=2".
func (p Placement) Line() string {
	addrs := make([]string, 0, len(p.PerMaster))
	for a := range p.PerMaster {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var b strings.Builder
	fmt.Fprintf(&b, "%d shards over %d masters:", p.Shards, len(p.PerMaster))
	for _, a := range addrs {
		fmt.Fprintf(&b, " %s=%d", a, p.PerMaster[a])
	}
	if !p.Placed {
		b.WriteString(" (original tags, not placed)")
	}
	return b.String()
}

// PlacementWarning is the operator's line for an uneven placement.
func PlacementWarning(act string, p Placement) string {
	why := "a reshard moved slots since preheat"
	if !p.Placed {
		why = "it was preheated before shard placement existed"
	}
	return fmt.Sprintf("%s: its %d shards sit unevenly on the %d masters (%s): %s; a preheat that rewrites its stock (preheat --force, which deletes its reservations: before the sale) places them evenly again",
		act, p.Shards, len(p.PerMaster), p.Spread(), why)
}

// keySlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash
// tag (the text between the first '{' and the next '}', when not empty),
// else of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

// KeySlot is keySlot for other packages (preflight): the cluster hash slot of key.
func KeySlot(key string) int { return int(keySlot(key)) }

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}
