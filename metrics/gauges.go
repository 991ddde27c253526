package metrics

import "github.com/prometheus/client_golang/prometheus"

// Gauges are the figures a background collector reads from Redis at most
// once a second (collector package, started by serve): per Redis node and
// per SKU. A scrape reads the last values and never waits on Redis.
type Gauges struct {
	// Per Redis node (label node = address as the client knows it, role =
	// master or slave).
	RedisUp            *prometheus.GaugeVec
	RedisMemoryUsed    *prometheus.GaugeVec
	RedisMemoryMax     *prometheus.GaugeVec
	RedisFragmentation *prometheus.GaugeVec
	RedisClients       *prometheus.GaugeVec
	RedisEvictedKeys   *prometheus.GaugeVec
	RedisSlowlogLen    *prometheus.GaugeVec
	RedisOps           *prometheus.GaugeVec

	// Per SKU (labels activity, sku), as Store.Status reads them.
	StockInitial   *prometheus.GaugeVec
	StockRemaining *prometheus.GaugeVec
	StockPending   *prometheus.GaugeVec
	StockConfirmed *prometheus.GaugeVec
	StockReleased  *prometheus.GaugeVec
	// StockInvariantOK is 1 while initial = remaining + pending +
	// confirmed holds (and nothing is negative or oversold), 0 when broken.
	StockInvariantOK *prometheus.GaugeVec

	// Per activity.
	ActivityReady  *prometheus.GaugeVec // 1 once preheated
	ActivityPaused *prometheus.GaugeVec // 1 while the kill switch is on
	ActivityOpen   *prometheus.GaugeVec // 1 between start and end (config clock)

	// CollectErrors counts collector rounds that could not read something,
	// by what (nodes, status).
	CollectErrors *prometheus.CounterVec
}

func newGauges(r *prometheus.Registry) *Gauges {
	node := []string{"node", "role"}
	sku := []string{"activity", "sku"}
	act := []string{"activity"}
	g := func(name, help string, labels []string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		r.MustRegister(v)
		return v
	}
	out := &Gauges{
		RedisUp:            g("seckill_redis_up", "1 when the Redis node answered the collector's last INFO, else 0.", node),
		RedisMemoryUsed:    g("seckill_redis_memory_used_bytes", "Redis used_memory, per node.", node),
		RedisMemoryMax:     g("seckill_redis_memory_max_bytes", "Redis maxmemory, per node (0: no limit).", node),
		RedisFragmentation: g("seckill_redis_memory_fragmentation_ratio", "Redis mem_fragmentation_ratio, per node.", node),
		RedisClients:       g("seckill_redis_connected_clients", "Redis connected_clients, per node.", node),
		RedisEvictedKeys:   g("seckill_redis_evicted_keys", "Redis evicted_keys since the node started, per node (must stay 0).", node),
		RedisSlowlogLen:    g("seckill_redis_slowlog_length", "Redis SLOWLOG LEN, per node.", node),
		RedisOps:           g("seckill_redis_ops_per_second", "Redis instantaneous_ops_per_sec, per node.", node),

		StockInitial:     g("seckill_stock_initial", "Units preheated, per SKU.", sku),
		StockRemaining:   g("seckill_stock_remaining", "Units still for sale (released ones included), per SKU.", sku),
		StockPending:     g("seckill_stock_pending", "Units reserved by winners, not yet confirmed or released, per SKU.", sku),
		StockConfirmed:   g("seckill_stock_confirmed", "Units confirmed by the shop (sold), per SKU.", sku),
		StockReleased:    g("seckill_stock_released", "Units released back to stock, per SKU.", sku),
		StockInvariantOK: g("seckill_stock_invariant_ok", "1 while initial = remaining + pending + confirmed holds for the SKU, 0 when broken.", sku),

		ActivityReady:  g("seckill_activity_ready", "1 once the activity's stock is preheated.", act),
		ActivityPaused: g("seckill_activity_paused", "1 while the activity's kill switch is on.", act),
		ActivityOpen:   g("seckill_activity_open", "1 between the activity's start and end.", act),

		CollectErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_collector_errors_total", Help: "Collector rounds that could not read Redis, by what (nodes, status).",
		}, []string{"what"}),
	}
	r.MustRegister(out.CollectErrors)
	return out
}
