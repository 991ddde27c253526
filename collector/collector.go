// Package collector refreshes the Redis-side gauges of /metrics (per Redis
// node and per SKU) from a goroutine, at most once a second, so a scrape
// never waits on Redis and many scrapers cost Redis nothing more.
package collector

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// MinInterval is the shortest time between two rounds: the INFO, SLOWLOG
// LEN and stock reads of one round are never repeated faster than this.
const MinInterval = time.Second

// Collector reads Redis and sets metrics.Gauges.
type Collector struct {
	st  *store.Store
	g   *metrics.Gauges
	cfg func() *config.Config
	log *zap.Logger
	now func() time.Time

	// Label sets set by the last round, to delete those that went away
	// (an activity removed by a reload, a node gone from the cluster).
	nodes map[string]string // addr → role
	skus  map[[2]string]bool
	acts  map[string]bool
	last  time.Time
}

// New builds a collector; cfg is read each round (it changes on reload).
func New(st *store.Store, m *metrics.Metrics, cfg func() *config.Config, log *zap.Logger) *Collector {
	return &Collector{st: st, g: m.Gauges, cfg: cfg, log: log, now: time.Now,
		nodes: map[string]string{}, skus: map[[2]string]bool{}, acts: map[string]bool{}}
}

// Run collects every interval (at least MinInterval) until ctx ends.
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	interval = max(interval, MinInterval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		c.Collect(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Collect runs one round: every node's INFO and SLOWLOG LEN, every
// activity's status. A round asked for less than MinInterval after the
// previous one does nothing (returns false).
func (c *Collector) Collect(ctx context.Context) bool {
	now := c.now()
	if !c.last.IsZero() && now.Sub(c.last) < MinInterval {
		return false
	}
	c.last = now
	c.collectNodes(ctx)
	c.collectStock(ctx, now)
	return true
}

func (c *Collector) collectNodes(ctx context.Context) {
	stats, err := c.st.NodeStats(ctx)
	if err != nil {
		c.g.CollectErrors.WithLabelValues("nodes").Inc()
		for addr, role := range c.nodes {
			c.nodeDown(addr, role)
		}
		return
	}
	seen := map[string]string{}
	for _, n := range stats {
		if n.Err != nil {
			c.g.CollectErrors.WithLabelValues("nodes").Inc()
			role := c.nodes[n.Addr]
			seen[n.Addr] = role
			c.nodeDown(n.Addr, role)
			continue
		}
		if old, ok := c.nodes[n.Addr]; ok && old != n.Role {
			c.deleteNode(n.Addr, old) // failover: the series moves to the new role
		}
		seen[n.Addr] = n.Role
		l := prometheus.Labels{"node": n.Addr, "role": n.Role}
		c.g.RedisUp.With(l).Set(1)
		c.g.RedisMemoryUsed.With(l).Set(float64(n.UsedMemory))
		c.g.RedisMemoryMax.With(l).Set(float64(n.MaxMemory))
		c.g.RedisFragmentation.With(l).Set(n.Fragmentation)
		c.g.RedisClients.With(l).Set(float64(n.Clients))
		c.g.RedisEvictedKeys.With(l).Set(float64(n.EvictedKeys))
		c.g.RedisOps.With(l).Set(float64(n.OpsPerSec))
		if n.SlowlogLen >= 0 {
			c.g.RedisSlowlogLen.With(l).Set(float64(n.SlowlogLen))
		} else {
			c.g.RedisSlowlogLen.Delete(l)
		}
	}
	for addr, role := range c.nodes {
		if _, ok := seen[addr]; !ok {
			c.deleteNode(addr, role) // gone from the cluster
		}
	}
	c.nodes = seen
}

// nodeDown keeps only up=0 for a node that did not answer: its last
// figures would be stale.
func (c *Collector) nodeDown(addr, role string) {
	c.deleteNode(addr, role)
	c.g.RedisUp.With(prometheus.Labels{"node": addr, "role": role}).Set(0)
}

func (c *Collector) deleteNode(addr, role string) {
	l := prometheus.Labels{"node": addr, "role": role}
	for _, v := range []*prometheus.GaugeVec{c.g.RedisUp, c.g.RedisMemoryUsed, c.g.RedisMemoryMax, c.g.RedisFragmentation,
		c.g.RedisClients, c.g.RedisEvictedKeys, c.g.RedisSlowlogLen, c.g.RedisOps} {
		v.Delete(l)
	}
}

func (c *Collector) collectStock(ctx context.Context, now time.Time) {
	cfg := c.cfg()
	skus := map[[2]string]bool{}
	acts := map[string]bool{}
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		acts[a.ID] = true
		open := 0.0
		if !now.Before(a.Start) && now.Before(a.End) {
			open = 1
		}
		c.g.ActivityOpen.WithLabelValues(a.ID).Set(open)
		st, err := c.st.Status(ctx, a)
		if err != nil {
			// Keep the last figures (a Redis blip should not draw the
			// stock as zero); seckill_redis_up says what is wrong.
			c.g.CollectErrors.WithLabelValues("status").Inc()
			for k := range c.skus {
				if k[0] == a.ID {
					skus[k] = true
				}
			}
			continue
		}
		ready := len(st.SKUs) > 0
		for _, s := range st.SKUs {
			ready = ready && s.Preheated
		}
		c.g.ActivityReady.WithLabelValues(a.ID).Set(b2f(ready))
		c.g.ActivityPaused.WithLabelValues(a.ID).Set(b2f(st.Paused))
		for _, s := range st.SKUs {
			if !s.Preheated {
				continue // deleted below: nothing to draw yet
			}
			k := [2]string{a.ID, s.ID}
			skus[k] = true
			c.g.StockInitial.WithLabelValues(a.ID, s.ID).Set(float64(s.Initial))
			c.g.StockRemaining.WithLabelValues(a.ID, s.ID).Set(float64(s.Remaining))
			c.g.StockPending.WithLabelValues(a.ID, s.ID).Set(float64(s.Pending))
			c.g.StockConfirmed.WithLabelValues(a.ID, s.ID).Set(float64(s.Confirmed))
			c.g.StockReleased.WithLabelValues(a.ID, s.ID).Set(float64(s.Released))
			c.g.StockInvariantOK.WithLabelValues(a.ID, s.ID).Set(b2f(s.OK))
		}
	}
	for k := range c.skus {
		if !skus[k] {
			for _, v := range []*prometheus.GaugeVec{c.g.StockInitial, c.g.StockRemaining, c.g.StockPending,
				c.g.StockConfirmed, c.g.StockReleased, c.g.StockInvariantOK} {
				v.DeleteLabelValues(k[0], k[1])
			}
		}
	}
	for id := range c.acts {
		if !acts[id] {
			c.g.ActivityReady.DeleteLabelValues(id)
			c.g.ActivityPaused.DeleteLabelValues(id)
			c.g.ActivityOpen.DeleteLabelValues(id)
		}
	}
	c.skus, c.acts = skus, acts
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
