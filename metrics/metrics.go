// Package metrics holds every Prometheus metric of seckill-proxy as typed
// fields, built once and passed to the components that record them, so the
// hot path touches pre-resolved counters only.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the set of metrics one proxy process exports.
type Metrics struct {
	Registry *prometheus.Registry

	// Outcomes counts buy answers by activity and SPEC code (ADMITTED for
	// winners forwarded in sync mode).
	Outcomes *prometheus.CounterVec
	// Rejections counts refusals by the layer that refused and the reason.
	Rejections *prometheus.CounterVec
	// BuyLatency is the whole buy request as the proxy handled it, by activity.
	BuyLatency *prometheus.HistogramVec
	// ScriptLatency is each Redis script call, by script.
	ScriptLatency *prometheus.HistogramVec
	// UpstreamLatency is each forwarded request to the shop, by outcome
	// (ok, refused, failed, timeout, passthrough).
	UpstreamLatency *prometheus.HistogramVec
	// Settlements counts reservation transitions by kind and result.
	Settlements *prometheus.CounterVec
	// RedisSaved counts buy requests answered with no Redis call.
	RedisSaved *prometheus.CounterVec
	// StockMoves counts units moved between shards of a SKU.
	StockMoves *prometheus.CounterVec
	// Passthrough counts ordinary (non-buy) requests by status class.
	Passthrough *prometheus.CounterVec
	// QueueBacklog is how many queue-mode reservations wait in the streams
	// of each activity for a forwarder.
	QueueBacklog *prometheus.GaugeVec
	// ReconcileAlerts counts reconciler findings that need a person.
	ReconcileAlerts *prometheus.CounterVec
	// RedisRetries counts background settlements of calls whose reply
	// never came (abort, move, confirm, release), by kind and outcome.
	RedisRetries *prometheus.CounterVec
	// SessionLookups counts session look-ups (identity.user.session) by
	// outcome: ok, refused, no_user (200 without a usable user id), error
	// (unreachable or unexpected status), timeout, overloaded (not made:
	// max_in_flight reached). Only ok through timeout called the shop.
	SessionLookups *prometheus.CounterVec
	// SessionCache counts session answers from memory (hit, negative_hit)
	// and misses that needed a look-up.
	SessionCache *prometheus.CounterVec
	// SessionLatency is each whoami call to the shop.
	SessionLatency prometheus.Histogram
	// FleetInstances is how many proxy instances this one counts in the
	// fleet's roll call: it enforces 1/N of the per-IP, per-device and
	// per-user limits (limits.fleet).
	FleetInstances prometheus.Gauge
	// AuthFailures counts buys whose identity could not be verified, by
	// reason (missing, malformed, expired, ..., no_keys).
	AuthFailures *prometheus.CounterVec
	// Inflight is this instance's winners in flight to the shop, by
	// activity (upstream.max_inflight; sync winners and queue workers).
	Inflight *prometheus.GaugeVec
	// InflightLimit is the fleet's in-flight limit in force, by activity
	// (moves with upstream.adaptive).
	InflightLimit *prometheus.GaugeVec
	// Overflow counts winners that found the shop's in-flight budget full,
	// by activity and outcome: waited (got a slot after waiting), queued
	// (202 QUEUED), busy (503 BUSY, released), backlog (the queue was
	// full too: 503 BUSY, released), too_large (the request is over
	// queue.max_request_bytes: 503 BUSY, released), unknown (Redis did not answer the
	// spill: 504 UPSTREAM_TIMEOUT with the token).
	Overflow *prometheus.CounterVec
	// WarmWorkers is how many of the listener's workers the last warm-up
	// made ready (server.warm_workers).
	WarmWorkers prometheus.Gauge
	// FairHeld is how many buys this instance holds in fair_start windows.
	FairHeld prometheus.Gauge
	// FairReleases counts held buys let on after their window, by outcome:
	// released (went on to admission) or gone (the buyer had disconnected:
	// nothing reserved).
	FairReleases *prometheus.CounterVec
	// DurableWinners counts winners' durability checks
	// (redis.durable_winners), by path (buy: the buyer's request; queue:
	// a queue worker before sending) and result (durable, forwarded:
	// not acknowledged in time and sent anyway, refused: released (buy
	// only), taken: a queue worker had claimed it first, deferred: a
	// queue worker's wait failed with on_timeout: refuse, the entry left
	// unsent and unreleased for its next delivery, docs/decisions.md §56).
	DurableWinners *prometheus.CounterVec
	// ClockOffset is Redis's TIME less this host's clock, in seconds, at
	// the last check (the node furthest off; server.max_clock_skew).
	ClockOffset prometheus.Gauge
	// ClockSkewed is 1 while this host's clock is further from Redis's
	// than server.max_clock_skew: the instance takes no buys.
	ClockSkewed prometheus.Gauge
	// Gauges are read from Redis by a background collector (gauges.go).
	Gauges *Gauges
}

// latencyBuckets span 50µs (a local refusal) to 10s (a stuck shop).
var latencyBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New builds and registers every metric.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_buy_outcomes_total", Help: "Buy requests answered, by activity and SPEC code.",
		}, []string{"activity", "code"}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_auth_failures_total", Help: "Buy requests whose identity (JWT) was refused, by reason.",
		}, []string{"reason"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_rejections_total", Help: "Buy requests refused, by the layer that refused and why.",
		}, []string{"layer", "reason"}),
		BuyLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_buy_duration_seconds", Help: "Time to answer a buy request, shop included for winners.", Buckets: latencyBuckets,
		}, []string{"activity"}),
		ScriptLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_redis_script_duration_seconds", Help: "Redis script calls, by script.", Buckets: latencyBuckets,
		}, []string{"script"}),
		UpstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_upstream_duration_seconds", Help: "Requests forwarded to the shop, by outcome.", Buckets: latencyBuckets,
		}, []string{"outcome"}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_reservation_transitions_total", Help: "Reservation transitions, by kind (confirm, release) and result.",
		}, []string{"kind", "result"}),
		RedisSaved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_redis_calls_saved_total", Help: "Buy requests answered from local memory with no Redis call, by reason.",
		}, []string{"reason"}),
		StockMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_stock_moves_total", Help: "Stock moves between shards of one SKU (a buyer's home shard ran dry).",
		}, []string{"activity"}),
		Passthrough: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_passthrough_requests_total", Help: "Ordinary requests passed to the shop, by status class.",
		}, []string{"class"}),
		QueueBacklog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_queue_backlog", Help: "Queue-mode reservations waiting in the streams, by activity.",
		}, []string{"activity"}),
		ReconcileAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_reconcile_alerts_total", Help: "Reconciler findings that need a person, by activity and kind.",
		}, []string{"activity", "kind"}),
		RedisRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_redis_retries_total", Help: "Background settlements of Redis calls whose reply never came, by kind (abort, move, confirm, release) and outcome (ok, retry, failed, dropped, abandoned).",
		}, []string{"kind", "outcome"}),
		SessionLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_session_lookups_total", Help: "Session look-ups at the shop's whoami, by outcome (ok, refused, no_user, error, timeout, overloaded).",
		}, []string{"outcome"}),
		SessionCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_session_cache_total", Help: "Session answers from the local cache (hit, negative_hit) and misses.",
		}, []string{"result"}),
		SessionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_session_lookup_duration_seconds", Help: "Calls to the shop's whoami endpoint.", Buckets: latencyBuckets,
		}),
		FleetInstances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_fleet_instances", Help: "Live proxy instances sharing the per-IP, per-device and per-user limits (1 with limits.fleet: false).",
		}),
		Inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_upstream_inflight", Help: "Winners this instance has in flight to the shop, by activity (upstream.max_inflight).",
		}, []string{"activity"}),
		InflightLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_upstream_inflight_limit", Help: "The fleet's limit of winners in flight to the shop, by activity (moves with upstream.adaptive).",
		}, []string{"activity"}),
		Overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_upstream_overflow_total", Help: "Winners that found the shop's in-flight budget full, by activity and outcome (waited, queued, busy, backlog, too_large, down, unknown).",
		}, []string{"activity", "outcome"}),
		DurableWinners: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_durable_winners_total", Help: "Winners' waits for replicas (redis.durable_winners), by path (buy, queue) and result (durable, forwarded, refused, taken, deferred).",
		}, []string{"path", "result"}),
	}
	r.MustRegister(m.Inflight, m.InflightLimit, m.Overflow)
	m.WarmWorkers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seckill_warm_workers", Help: "Listener workers the last warm-up made ready, with a buy's stack depth (server.warm_workers; at start-up and 2 s before each activity's start).",
	})
	r.MustRegister(m.WarmWorkers)
	r.MustRegister(m.DurableWinners)
	r.MustRegister(m.SessionLookups, m.SessionCache, m.SessionLatency)
	m.Gauges = newGauges(r)
	m.FairHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seckill_fair_start_held", Help: "Buys held in fair_start windows on this instance, waiting for their random release.",
	})
	m.FairReleases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_fair_start_releases_total", Help: "Held fair_start buys let on, by outcome (released, gone: the buyer had disconnected).",
	}, []string{"outcome"})
	r.MustRegister(m.FairHeld, m.FairReleases)
	m.ClockOffset = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seckill_clock_offset_seconds", Help: "Redis TIME less this host's clock at the last check (the node furthest off).",
	})
	m.ClockSkewed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seckill_clock_skewed", Help: "1 while this host's clock is further from Redis's than server.max_clock_skew: no buys taken.",
	})
	r.MustRegister(m.ClockOffset, m.ClockSkewed)
	m.FleetInstances.Set(1)
	r.MustRegister(m.AuthFailures, m.FleetInstances, m.RedisRetries, m.Outcomes, m.Rejections, m.BuyLatency, m.ScriptLatency, m.UpstreamLatency,
		m.Settlements, m.RedisSaved, m.StockMoves, m.Passthrough, m.QueueBacklog, m.ReconcileAlerts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchReserveBatches registers the reserve calls sent as batches and the
// buyers they carried (store.ReserveBatchStats), read at each scrape: their
// ratio is the average batch, and buyers over all reserve calls tells how
// much of the load was decided in batches.
func (m *Metrics) WatchReserveBatches(stats func() (calls, buyers int64)) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seckill_reserve_batches_total", Help: "Reserve calls that decided two or more buyers of one SKU shard at once (reservebatch.lua).",
		}, func() float64 { c, _ := stats(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seckill_reserve_batched_buyers_total", Help: "Buyers decided in those calls.",
		}, func() float64 { _, b := stats(); return float64(b) }),
	)
}
