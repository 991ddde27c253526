package collector

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func open(t *testing.T, addrs []string, cluster bool) *store.Store {
	t.Helper()
	st, err := store.OpenNow(config.Redis{Addrs: addrs, Cluster: cluster, KeyPrefix: "seckill",
		Timeout: redistest.TimeoutScale * 300 * time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatalf("store.OpenNow: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func activity(id string, stock int64, start time.Time) *config.Activity {
	return &config.Activity{ID: id, Start: start, End: start.Add(time.Hour), Shards: 2, KeyTTLAfterEnd: time.Hour,
		PerUserLimit: 1, SKUs: []config.SKU{{ID: "a", Stock: stock}, {ID: "b", Stock: 3}}}
}

// clock is a settable clock for the once-a-second guard.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newCollector(st *store.Store, acts ...*config.Activity) (*Collector, *metrics.Metrics, *clock) {
	m := metrics.New()
	cfg := &config.Config{}
	for _, a := range acts {
		cfg.Activities = append(cfg.Activities, *a)
	}
	c := New(st, m, func() *config.Config { return cfg }, zap.NewNop())
	clk := &clock{t: time.Now()}
	c.now = clk.now
	return c, m, clk
}

func gauge(t *testing.T, v *prometheus.GaugeVec, labels ...string) float64 {
	t.Helper()
	return testutil.ToFloat64(v.WithLabelValues(labels...))
}

// Stock gauges follow what Redis holds after reserves, a confirm and a
// release; node gauges say what INFO and SLOWLOG LEN say; evictions show.
func TestCollectSingleNode(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random", "--slowlog-log-slower-than", "0")
	addr := srv.Addr
	st := open(t, []string{addr}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	now := time.Now()
	a := activity("flash", 10, now.Add(-time.Minute))
	later := activity("later", 5, now.Add(time.Hour))
	if _, err := st.Preheat(ctx, a, false, now); err != nil {
		t.Fatalf("preheat: %v", err)
	}
	var toks []store.Token
	for i := range 4 {
		r, err := st.Reserve(ctx, store.ReserveRequest{Activity: a.ID, SKU: "a", User: "u" + strconv.Itoa(i), Qty: 1, Limit: 1,
			Shards: a.Shards, NowMs: now.UnixMilli(), ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("reserve %d: %v %v", i, r.Code, err)
		}
		toks = append(toks, r.Token)
	}
	if c, err := st.Confirm(ctx, toks[0], a.Shards, "o1"); err != nil || c != lua.OK {
		t.Fatalf("confirm: %v %v", c, err)
	}
	if c, err := st.Release(ctx, toks[1], a.Shards, "test", now.UnixMilli(), false); err != nil || c != lua.OK {
		t.Fatalf("release: %v %v", c, err)
	}

	c, m, clk := newCollector(st, a, later)
	g := m.Gauges
	if !c.Collect(ctx) {
		t.Fatal("first round skipped")
	}
	for _, w := range []struct {
		v    *prometheus.GaugeVec
		want float64
	}{{g.StockInitial, 10}, {g.StockRemaining, 7}, {g.StockPending, 2}, {g.StockConfirmed, 1}, {g.StockReleased, 1}, {g.StockInvariantOK, 1}} {
		if got := gauge(t, w.v, "flash", "a"); got != w.want {
			t.Errorf("%v{flash,a} = %v, want %v", w.v, got, w.want)
		}
	}
	if got := gauge(t, g.StockRemaining, "flash", "b"); got != 3 {
		t.Errorf("remaining{flash,b} = %v, want 3", got)
	}
	if gauge(t, g.ActivityReady, "flash") != 1 || gauge(t, g.ActivityOpen, "flash") != 1 || gauge(t, g.ActivityPaused, "flash") != 0 {
		t.Errorf("flash: ready/open/paused wrong")
	}
	if gauge(t, g.ActivityReady, "later") != 0 || gauge(t, g.ActivityOpen, "later") != 0 {
		t.Errorf("later: must be neither ready nor open")
	}
	if n := testutil.CollectAndCount(g.StockRemaining); n != 2 {
		t.Errorf("remaining series = %d, want 2 (the unpreheated activity draws nothing)", n)
	}

	role := "master"
	if got := gauge(t, g.RedisUp, addr, role); got != 1 {
		t.Fatalf("redis_up{%s} = %v", addr, got)
	}
	if got := gauge(t, g.RedisMemoryMax, addr, role); got != 4<<20 {
		t.Errorf("memory_max = %v, want %d", got, 4<<20)
	}
	if used := gauge(t, g.RedisMemoryUsed, addr, role); used <= 0 {
		t.Errorf("memory_used = %v", used)
	}
	if f := gauge(t, g.RedisFragmentation, addr, role); f <= 0 {
		t.Errorf("fragmentation = %v", f)
	}
	if n := gauge(t, g.RedisClients, addr, role); n < 1 {
		t.Errorf("connected_clients = %v", n)
	}
	if n := gauge(t, g.RedisSlowlogLen, addr, role); n < 1 {
		t.Errorf("slowlog length = %v with slowlog-log-slower-than 0", n)
	}
	if n := gauge(t, g.RedisEvictedKeys, addr, role); n != 0 {
		t.Errorf("evicted_keys = %v before filling", n)
	}

	// Fill past maxmemory: Redis evicts, the gauge shows it next round.
	rc, _ := st.Client()
	val := strings.Repeat("x", 4096)
	for i := 0; i < 2000; i++ {
		if err := rc.Do(ctx, rc.B().Set().Key("filler:"+strconv.Itoa(i)).Value(val).Build()).Error(); err != nil {
			t.Fatalf("set: %v", err)
		}
	}
	if c.Collect(ctx) {
		t.Fatal("a second round within a second must do nothing")
	}
	if n := gauge(t, g.RedisEvictedKeys, addr, role); n != 0 {
		t.Errorf("evicted_keys changed by a skipped round: %v", n)
	}
	clk.t = clk.t.Add(MinInterval)
	if !c.Collect(ctx) {
		t.Fatal("round after MinInterval skipped")
	}
	if n := gauge(t, g.RedisEvictedKeys, addr, role); n <= 0 {
		t.Errorf("evicted_keys = %v after writing 8 MB into 4 MB", n)
	}

	// A dead node: up 0, its other figures gone; the stock keeps its last
	// values (whatever the eviction left: allkeys-random is what preflight
	// refuses for a reason).
	lastRemaining := gauge(t, g.StockRemaining, "flash", "a")
	srv.Kill()
	clk.t = clk.t.Add(MinInterval)
	c.Collect(ctx)
	if got := gauge(t, g.RedisUp, addr, role); got != 0 {
		t.Errorf("redis_up after kill = %v", got)
	}
	if n := testutil.CollectAndCount(g.RedisMemoryUsed); n != 0 {
		t.Errorf("memory_used series after kill = %d, want 0", n)
	}
	if got := gauge(t, g.StockRemaining, "flash", "a"); got != lastRemaining {
		t.Errorf("remaining after kill = %v, want the last value %v", got, lastRemaining)
	}
	if testutil.ToFloat64(g.CollectErrors.WithLabelValues("status")) < 1 {
		t.Errorf("collect errors not counted")
	}
}

// A broken invariant (a shard edited by hand) shows as 0.
func TestCollectInvariantBroken(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, []string{srv.Addr}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := activity("flash", 10, time.Now().Add(-time.Minute))
	if _, err := st.Preheat(ctx, a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	c, m, _ := newCollector(st, a)
	c.Collect(ctx)
	if got := gauge(t, m.Gauges.StockInvariantOK, "flash", "a"); got != 1 {
		t.Fatalf("invariant_ok = %v before the edit", got)
	}
	k := st.SKUKeys(a.ID, "a", a.Shards)
	if _, err := srv.Do("HINCRBY", k.Shards[0].Stock, "r", "1"); err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return time.Now().Add(time.Hour) }
	c.Collect(ctx)
	if got := gauge(t, m.Gauges.StockInvariantOK, "flash", "a"); got != 0 {
		t.Errorf("invariant_ok = %v after adding a unit from nowhere", got)
	}
}

// On a cluster every master is reported, each under its own address.
func TestCollectClusterMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	cl := redistest.StartCluster(t, 3)
	st := open(t, cl.Addrs(), true)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	a := activity("flash", 10, time.Now().Add(-time.Minute))
	a.Shards = 4
	if _, err := st.Preheat(ctx, a, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	c, m, _ := newCollector(st, a)
	c.Collect(ctx)
	nodes, err := cl.ClusterNodes()
	if err != nil {
		t.Fatal(err)
	}
	masters := 0
	for _, n := range nodes {
		if !n.Has("master") {
			continue
		}
		masters++
		if got := gauge(t, m.Gauges.RedisUp, n.Addr, "master"); got != 1 {
			t.Errorf("redis_up{%s} = %v", n.Addr, got)
		}
	}
	if masters != 3 {
		t.Fatalf("cluster has %d masters", masters)
	}
	if n := testutil.CollectAndCount(m.Gauges.RedisMemoryUsed); n != masters {
		t.Errorf("memory_used series = %d, want one per master (%d)", n, masters)
	}
	if got := gauge(t, m.Gauges.StockRemaining, "flash", "a"); got != 10 {
		t.Errorf("remaining = %v", got)
	}
}
