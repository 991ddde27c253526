package config

import "time"

// Defaults of SPEC §3. They are named so README, examples and tests can refer
// to one source of truth.
const (
	DefaultListen           = ":8080"
	DefaultPublicPrefix     = "/_seckill"
	DefaultAdminListen      = "127.0.0.1:9090"
	DefaultAdminTokenEnv    = "SECKILL_ADMIN_TOKEN"
	DefaultSigningSecretEnv = "SECKILL_SIGNING_SECRET"
	DefaultRedisAddr        = "127.0.0.1:6379"
	DefaultKeyPrefix        = "seckill"
	DefaultRoutePath        = "/api/seckill/{activity}/{sku}/buy"
	DefaultOrderIDFrom      = "json:/order_id"
	// DefaultSignatureWindow bounds clock skew between the shop's app and
	// the proxy; nonces are remembered for twice as long.
	DefaultSignatureWindow = time.Minute
	// DefaultJWTLeeway is the clock skew allowed on a token's exp, nbf, iat.
	DefaultJWTLeeway = 30 * time.Second
	// DefaultReplayMaxBytes bounds a winner's answer kept for exact replays.
	DefaultReplayMaxBytes = 8 << 10
	// DefaultQueueRequestBytes bounds the request kept in Redis for each
	// queued buyer (queue.max_request_bytes).
	DefaultQueueRequestBytes = 16 << 10
	// DefaultServerMaxConns bounds the public listener's connections: each
	// costs about 20 KiB of buffers, so the default stays under 1 GiB.
	DefaultServerMaxConns = 40_000
	// DefaultSessionUserFrom is where a whoami answer holds the user id.
	DefaultSessionUserFrom = "json:/user_id"
	// DefaultSessionMaxInFlight bounds session look-ups at the shop at once.
	DefaultSessionMaxInFlight = 64
	// DefaultSessionCacheSize bounds cached session answers; each costs
	// about 200 bytes (README: "Session identity").
	DefaultSessionCacheSize = 50_000
	// DefaultOverflowWait is how long a winner waits for room at the shop
	// with upstream.overflow: wait.
	DefaultOverflowWait = time.Second
	// MaxOverflowWait bounds upstream.overflow_wait: a buyer's client
	// waits that long for an answer on top of the shop's time.
	MaxOverflowWait = 30 * time.Second
	// MaxInflightBound bounds upstream.max_inflight.
	MaxInflightBound = 100_000
	// DefaultDurableTimeout is how long a winner waits for its replicas
	// (redis.durable_winners.timeout).
	DefaultDurableTimeout = 50 * time.Millisecond
	// PendingMargin is what pending_timeout must exceed twice
	// upstream.timeout by (see validatePending).
	PendingMargin = 2 * time.Second
)

// DefaultExceptionsMax is reconcile.exceptions_max's default: entries kept
// per activity in its stream of reconcile exceptions (a few hundred bytes
// each). MinExceptionsMax and MaxExceptionsMax bound it.
const (
	DefaultExceptionsMax = 10_000
	MinExceptionsMax     = 100
	MaxExceptionsMax     = 1_000_000
)

// DefaultSigningKeyID is the key id (k=) of the one key that
// upstream.signing_secret_env configures.
const DefaultSigningKeyID = "default"

// setOnce gives *p the default v unless the file set it. Presence, not the
// zero value, decides: an explicit `shards: 0` must be reported as an error,
// and an explicit `client_cache: false` must stay false.
func setOnce[T any](m *meta, p *T, v T) {
	if !m.has(p) {
		*p = v
	}
}

// setDefaults fills every field the file left out. It is the only place
// defaults live, so SPEC §3 and the code are compared in one read.
func (c *Config) setDefaults(m *meta) {
	setOnce(m, &c.Listen, DefaultListen)
	c.bundleDefaults(m)
	setOnce(m, &c.PublicPrefix, DefaultPublicPrefix)
	setOnce(m, &c.Admin.Listen, DefaultAdminListen)
	setOnce(m, &c.Admin.TokenEnv, DefaultAdminTokenEnv)

	setOnce(m, &c.Upstream.Timeout, 3*time.Second)
	setOnce(m, &c.Upstream.MaxConns, 1024)
	if !m.has(&c.Upstream.SigningKeys) {
		setOnce(m, &c.Upstream.SigningSecretEnv, DefaultSigningSecretEnv)
	}
	setOnce(m, &c.Upstream.PassTimeout, 60*time.Second)
	setOnce(m, &c.Upstream.IdleTimeout, 4*time.Second) // below the usual 5 s keep-alive of shops
	setOnce(m, &c.Upstream.WarmConns, max(0, min(DefaultWarmConns, c.Upstream.MaxConns)))
	setOnce(m, &c.Upstream.ReplayMaxBytes, DefaultReplayMaxBytes)
	setOnce(m, &c.Upstream.ReleaseStatuses, []string{"4xx"})
	setOnce(m, &c.Upstream.Overflow, OverflowQueue)
	if c.Upstream.Overflow == OverflowWait {
		setOnce(m, &c.Upstream.OverflowWait, DefaultOverflowWait)
	}
	// A floor of a tenth of the bound: low enough to protect a shop that
	// slows down, high enough not to starve one that is merely noisy.
	setOnce(m, &c.Upstream.MinInflight, max(1, c.Upstream.MaxInflight/10))

	setOnce(m, &c.Server.MaxConns, DefaultServerMaxConns)
	setOnce(m, &c.Server.ReadTimeout, 30*time.Second)
	setOnce(m, &c.Server.WriteTimeout, 30*time.Second)
	setOnce(m, &c.Server.IdleTimeout, 90*time.Second)
	setOnce(m, &c.Server.DrainDelay, DefaultDrainDelay)
	setOnce(m, &c.Server.MaxClockSkew, DefaultMaxClockSkew)
	setOnce(m, &c.Server.ShutdownTimeout, 2*min(c.Upstream.Timeout, MaxUpstreamTimeout)+5*time.Second)
	setOnce(m, &c.Server.FairStartMaxHeld, DefaultFairStartMaxHeld)
	setOnce(m, &c.Server.WarmWorkers, max(0, min(DefaultWarmWorkers, c.Server.MaxConns)))

	if !c.Redis.Sentinel.Enabled() {
		// Behind Sentinel the master's address comes from the sentinels.
		setOnce(m, &c.Redis.Addrs, []string{DefaultRedisAddr})
	}
	c.Redis.TLS.Enabled = m.has(&c.Redis.TLS)
	setOnce(m, &c.Redis.Timeout, 200*time.Millisecond)
	setOnce(m, &c.Redis.ClientCache, true)
	setOnce(m, &c.Redis.KeyPrefix, DefaultKeyPrefix)
	setOnce(m, &c.Redis.BuyerMemo, DefaultBuyerMemo)
	if d := &c.Redis.DurableWinners; m.has(d) {
		// Only a written block switches durable winners on.
		setOnce(m, &d.Replicas, 1)
		setOnce(m, &d.Timeout, DefaultDurableTimeout)
		setOnce(m, &d.OnTimeout, DurableRefuse)
	}
	if len(c.Redis.Addrs) > 1 && !m.has(&c.Redis.Cluster) {
		// Several seeds only make sense for a cluster; a single-node client
		// would silently use the first and ignore the rest. An explicit
		// cluster: false with several is a validation error.
		c.Redis.Cluster = true
	}

	setOnce(m, &c.TrustedProxies, []string{"127.0.0.1/32"})
	setOnce(m, &c.Reconcile.ExceptionsMax, DefaultExceptionsMax)

	// A source is defaulted as a whole: `user: {cookie: uid}` must not also
	// inherit the default header and end up with two sources.
	setOnce(m, &c.Identity.User, Source{Header: "X-User-Id"})
	setOnce(m, &c.Identity.Device, Source{Header: "X-Device-Id"})
	setOnce(m, &c.Identity.RequestID, Source{Header: "X-Request-Id"})
	if ss := &c.Identity.User.Session; m.has(ss) {
		setOnce(m, &ss.UserFrom, DefaultSessionUserFrom)
		setOnce(m, &ss.TTL, 30*time.Second)
		setOnce(m, &ss.NegativeTTL, 2*time.Second)
		setOnce(m, &ss.Timeout, 300*time.Millisecond)
		setOnce(m, &ss.MaxInFlight, DefaultSessionMaxInFlight)
		setOnce(m, &ss.CacheSize, DefaultSessionCacheSize)
	}
	if j := &c.Identity.User.JWT; m.has(j) {
		if !m.has(&j.Cookie) {
			setOnce(m, &j.Header, "Authorization")
		}
		setOnce(m, &j.Claim, "sub")
		setOnce(m, &j.Leeway, DefaultJWTLeeway)
		if j.HMACSecretEnv != "" {
			setOnce(m, &j.Algorithms, []string{"HS256"})
		} else {
			setOnce(m, &j.Algorithms, AsymmetricJWTAlgorithms())
		}
	}

	setRate(m, &c.Limits.PerIP, 10, 20)
	setOnce(m, &c.Limits.IPv4Prefix, 32)
	setOnce(m, &c.Limits.IPv6Prefix, 64)
	setRate(m, &c.Limits.PerDevice, 5, 10)
	setRate(m, &c.Limits.PerUser, 2, 5)
	setOnce(m, &c.Limits.Fleet, true)

	for i := range c.Activities {
		a := &c.Activities[i]
		setOnce(m, &a.Route.Method, "POST")
		setOnce(m, &a.Route.Path, DefaultRoutePath)
		setOnce(m, &a.Route.SkuFrom, "path")
		setOnce(m, &a.PerUserLimit, 1)
		// Without a cap a request for qty 100 would be refused by the
		// per-user limit anyway; tying max_qty to it keeps them consistent.
		setOnce(m, &a.MaxQty, a.PerUserLimit)
		// Shards exist to spread one hot SKU over a cluster's nodes. A single
		// Redis runs one script at a time whatever the key, so there extra
		// shards only add stock moves between them near sell-out.
		if c.Redis.Cluster {
			setOnce(m, &a.Shards, 8)
		} else {
			setOnce(m, &a.Shards, 1)
		}
		setRate(m, &a.AdmissionRate, 20000, 30000)
		setOnce(m, &a.Mode, ModeSync)
		setOnce(m, &a.Queue.Workers, 32)
		setOnce(m, &a.Queue.Rate, 2000)
		// Enough for a big sale's spike at the default rate (50 s of it),
		// small enough for Redis: an entry is ~100 bytes.
		setOnce(m, &a.Queue.MaxBacklog, 100000)
		// A browser's buy with its cookies is 1–3 KB; Redis holds at most
		// max_backlog of them (the entry goes when the worker is done).
		setOnce(m, &a.Queue.MaxRequestBytes, DefaultQueueRequestBytes)
		setOnce(m, &a.PendingTimeout, 10*time.Minute)
		setOnce(m, &a.OrderIDFrom, DefaultOrderIDFrom)
		setOnce(m, &a.KeyTTLAfterEnd, 24*time.Hour)
		setOnce(m, &a.FairStartSpread, a.FairStart)
		if m.has(&a.Signature) {
			// Only a configured signature block gets defaults: an activity
			// without one stays exactly as written (and unsigned).
			setOnce(m, &a.Signature.Window, DefaultSignatureWindow)
			setOnce(m, &a.Signature.KeyIDHeader, "X-App-Key-Id")
			setOnce(m, &a.Signature.TimestampHeader, "X-App-Timestamp")
			setOnce(m, &a.Signature.NonceHeader, "X-App-Nonce")
			setOnce(m, &a.Signature.SignatureHeader, "X-App-Signature")
		}
	}
}

// setRate defaults rate and burst separately, so `{rate: 50}` keeps the
// default burst.
func setRate(m *meta, r *Rate, rate float64, burst int) {
	setOnce(m, &r.Rate, rate)
	setOnce(m, &r.Burst, burst)
}

// DefaultDrainDelay is server.drain_delay's default: a balancer probing
// readiness every second has seen the instance go unready by then.
const DefaultDrainDelay = time.Second

// DefaultMaxClockSkew is server.max_clock_skew's default: far above what
// NTP keeps (milliseconds), far below the margins pending_timeout leaves.
const DefaultMaxClockSkew = time.Second

// DefaultBuyerMemo is redis.buyer_memo's default: at most ~85 MiB per
// instance for buyers remembered at their limit (~330 B each, store
// TestBuyerMemoMemoryBound).
const DefaultBuyerMemo = 1 << 18

// DefaultWarmConns is upstream.warm_conns' default.
const DefaultWarmConns = 32

// DefaultWarmWorkers is server.warm_workers' default: the 1000users
// preset's first wave (seed 001's load profile) finds a worker ready.
const DefaultWarmWorkers = 1024

// MaxWarmWorkers bounds server.warm_workers.
const MaxWarmWorkers = 100_000

// DefaultFairStartMaxHeld is server.fair_start_max_held's default: buys
// one instance holds at once in fair_start windows.
const DefaultFairStartMaxHeld = 100_000

// Fair start bounds: a longer hold than MaxFairStart keeps buyers waiting
// with no answer past what clients and balancers usually allow.
const (
	MaxFairStart       = 10 * time.Second
	MinFairStartSpread = 10 * time.Millisecond
	MaxFairStartHeld   = 10_000_000
)
