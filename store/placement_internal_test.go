package store

import (
	"context"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestPlacementInternals, on a real 3-master cluster: keySlot is the slot
// Redis computes; CLUSTER SHARDS and CLUSTER SLOTS (the fallback for
// servers before 7) read the same masters; placeShards spreads 6 shards
// 2/2/2 and 8 shards 3/3/2, by the cluster's own CLUSTER KEYSLOT.
func TestPlacementInternals(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := Open(config.Redis{Addrs: cl.Addrs(), Cluster: true, Timeout: time.Second, KeyPrefix: "seckill"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, key := range []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"seckill:{act_1001:3}:stock:sku1", "seckill:{act_1001:3:17}:users", "{", "}{x}", "123456789"} {
		want, err := cl.Slot(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int(got) != want {
			t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}

	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	n := nodes[cl.Nodes[0].Addr]
	if n == nil {
		t.Fatalf("no client for %s in %v", cl.Nodes[0].Addr, nodes)
	}
	byShards, err := topologyFromShards(ctx, n, cl.Nodes[0].Addr)
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	bySlots, err := topologyFromSlots(ctx, n, cl.Nodes[0].Addr)
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	ts, err1 := newTopology(byShards)
	tl, err2 := newTopology(bySlots)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if len(ts.masters) != 3 || ts.owner != tl.owner || !reflect.DeepEqual(addrsOf(ts), addrsOf(tl)) {
		t.Fatalf("CLUSTER SHARDS says %v, CLUSTER SLOTS says %v", addrsOf(ts), addrsOf(tl))
	}
	for i, m := range ts.masters {
		if cl.Server(m.Addr) == nil {
			t.Errorf("master %d: %s is not a server of the cluster", i, m.Addr)
		}
	}
	topo, err := s.clusterTopology(ctx, c)
	if err != nil || topo.owner != ts.owner {
		t.Fatalf("clusterTopology: %v", err)
	}

	for _, tc := range []struct {
		act    string
		shards int
		want   []int
	}{
		{"act_6", 6, []int{2, 2, 2}},
		{"act_1001", 8, []int{2, 3, 3}},
		{"act_2", 2, []int{0, 1, 1}},
		{"act_1024", 1024, []int{341, 341, 342}},
	} {
		salts := placeShards("seckill", tc.act, tc.shards, topo)
		if len(salts) != tc.shards || parsePlace(joinSalts(salts), tc.shards) == nil {
			t.Fatalf("%s: salts %v", tc.act, salts)
		}
		count := map[string]int{}
		for _, m := range topo.masters {
			count[m.Addr] = 0
		}
		for i, salt := range salts {
			if tc.shards > 16 && i%64 != 0 {
				// Large case: every shard by keySlot, a sample by the server.
				count[topo.masters[topo.owner[keySlot(shardBase("seckill", tc.act, i, salt)+"x")]].Addr]++
				continue
			}
			m, err := cl.MasterFor(shardBase("seckill", tc.act, i, salt) + "stock:sku1")
			if err != nil {
				t.Fatal(err)
			}
			count[m.Addr]++
		}
		var got []int
		for _, v := range count {
			got = append(got, v)
		}
		sort.Ints(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %d shards per master %v, want %v", tc.act, tc.shards, got, tc.want)
		}
		if again := placeShards("seckill", tc.act, tc.shards, topo); !reflect.DeepEqual(again, salts) {
			t.Errorf("%s: placement not deterministic", tc.act)
		}
	}
}

func addrsOf(t *topology) []string {
	var out []string
	for _, m := range t.masters {
		out = append(out, m.Addr)
	}
	return out
}

func joinSalts(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

// TestParsePlace: anything but one run of digits per shard is no placement.
func TestParsePlace(t *testing.T) {
	for _, tc := range []struct {
		place  string
		shards int
		ok     bool
	}{
		{"0,1,2", 3, true}, {"0,1,2", -1, true}, {"0,1", 3, false}, {"", 0, false}, {"0,,2", 3, false},
		{"0,x,2", 3, false}, {"0,-1,2", 3, false}, {"12345678901", 1, false}, {strconv.Itoa(maxSaltTries), 1, true},
	} {
		if got := parsePlace(tc.place, tc.shards) != nil; got != tc.ok {
			t.Errorf("parsePlace(%q, %d) ok = %v, want %v", tc.place, tc.shards, got, tc.ok)
		}
	}
}

// TestKeyCachePlacement: keys follow the placement the cache learns; keys
// built under another one are dropped; an unknown placement is not served
// by lookup (the hot path) until resolved.
func TestKeyCachePlacement(t *testing.T) {
	c := keyCache{prefix: "p"}
	if c.lookup("a", "s", 2) != nil || c.resolved("a") {
		t.Fatal("an unknown activity is served")
	}
	legacy := c.get("a", "s", 2)
	if legacy.Shards[1].Stock != "p:{a:1}:stock:s" {
		t.Fatalf("original tags: %q", legacy.Shards[1].Stock)
	}
	if c.lookup("a", "s", 2) != nil {
		t.Fatal("keys of an unresolved placement served by lookup")
	}
	c.setPlace("a", "7,9")
	k := c.lookup("a", "s", 2)
	if k != nil {
		t.Fatal("keys of the old placement kept")
	}
	k = c.get("a", "s", 2)
	if k.Shards[0].Stock != "p:{a:0:7}:stock:s" || k.Shards[1].Users != "p:{a:1:9}:users" || k.Shards[1].RidBits != "p:{a:1:9}:ridbits:s" {
		t.Fatalf("placed keys: %+v", k.Shards)
	}
	if c.lookup("a", "s", 2) != k || c.n != 1 {
		t.Fatalf("placed keys not cached (n %d)", c.n)
	}
	if c.lookup("a", "s", 3) != nil || len(c.get("a", "s", 3).Shards) != 3 || c.get("a", "s", 3).Shards[2].Stock != "p:{a:2}:stock:s" {
		t.Fatal("a shard count the placement does not cover must use the original tags")
	}
	c.get("a", "s", 2)
	if got := c.getPlaced("a", "s", 2, ""); got.Shards[0].Stock != "p:{a:0}:stock:s" || c.lookup("a", "s", 2) == nil {
		t.Fatalf("getPlaced of another placement: %q (and must not touch the cache)", got.Shards[0].Stock)
	}
	c.unresolve("a")
	if c.lookup("a", "s", 2) != nil || c.resolved("a") {
		t.Fatal("unresolved placement still served")
	}
	c.setPlace("a", "7,9")
	if c.lookup("a", "s", 2) == nil {
		t.Fatal("same placement resolved again: keys should stay")
	}
}

// TestPlaceShardsTopologies: the spread on topologies a 3-node test
// cluster does not have: 10 masters (some would get no shard by CRC16
// alone), and a master owning a single slot.
func TestPlaceShardsTopologies(t *testing.T) {
	var ten []clusterMaster
	for i := 0; i < 10; i++ {
		ten = append(ten, clusterMaster{Addr: "m" + strconv.Itoa(i), Slots: [][2]int{{i * 1638, min(i*1638+1637, 16383)}}})
	}
	ten[9].Slots[0][1] = 16383
	oneSlot := []clusterMaster{{Addr: "a", Slots: [][2]int{{0, 8190}}}, {Addr: "b", Slots: [][2]int{{8191, 16382}}}, {Addr: "c", Slots: [][2]int{{16383, 16383}}}}
	split := []clusterMaster{{Addr: "a", Slots: [][2]int{{0, 99}, {8000, 16383}}}, {Addr: "b", Slots: [][2]int{{100, 7999}}}}
	for _, tc := range []struct {
		name   string
		ms     []clusterMaster
		shards int
		lo, hi int
	}{
		{"10 masters, 8 shards", ten, 8, 0, 1},
		{"10 masters, 10 shards", ten, 10, 1, 1},
		{"10 masters, 64 shards", ten, 64, 6, 7},
		{"a master of one slot", oneSlot, 8, 2, 3},
		{"slot ranges split", split, 5, 2, 3},
	} {
		topo, err := newTopology(append([]clusterMaster(nil), tc.ms...))
		if err != nil {
			t.Fatal(err)
		}
		salts := placeShards("seckill", "act_1001", tc.shards, topo)
		count := make([]int, len(topo.masters))
		for i, salt := range salts {
			count[topo.owner[keySlot(shardBase("seckill", "act_1001", i, salt))]]++
		}
		for m, n := range count {
			if n < tc.lo || n > tc.hi {
				t.Errorf("%s: master %s holds %d shards, want %d..%d (%v)", tc.name, topo.masters[m].Addr, n, tc.lo, tc.hi, count)
			}
		}
	}
	if _, err := newTopology(nil); err == nil {
		t.Error("a cluster with no master owning slots must be an error")
	}
}
