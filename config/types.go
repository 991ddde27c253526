// Package config owns the YAML schema of seckill-proxy, its defaults, strict
// validation with FILE:LINE messages, and reload.
package config

import "time"

// Config is one validated configuration file. Every field has its default
// filled in by Load; code reading a Config never checks for zero values.
type Config struct {
	// Path is the file the config was read from (for messages and reload).
	Path string `yaml:"-"`

	Listen         string            `yaml:"listen"`
	PublicPrefix   string            `yaml:"public_prefix"` // default "/_seckill"
	Watch          bool              `yaml:"watch"`
	Admin          Admin             `yaml:"admin"`
	Upstream       Upstream          `yaml:"upstream"`
	Server         Server            `yaml:"server"` // the public listener's connection limits
	Redis          Redis             `yaml:"redis"`
	TrustedProxies []string          `yaml:"trusted_proxies"`
	Identity       Identity          `yaml:"identity"`
	Limits         Limits            `yaml:"limits"`
	Messages       map[string]string `yaml:"messages"`
	Activities     []Activity        `yaml:"activities"`
	Reconcile      Reconcile         `yaml:"reconcile"`
}

// Reconcile configures what the reconciler keeps for people.
type Reconcile struct {
	// ExceptionsMax bounds each activity's stream of reconcile exceptions
	// (XADD MAXLEN ~ N: Redis trims whole stream nodes, so the stream may
	// hold up to about 100 entries more). Read at start by serve.
	ExceptionsMax int `yaml:"exceptions_max"`
}

// Admin is the admin listener: metrics, health, pprof, dashboard, admin API.
type Admin struct {
	Listen   string `yaml:"listen"`    // default "127.0.0.1:9090"
	TokenEnv string `yaml:"token_env"` // default "SECKILL_ADMIN_TOKEN"
}

// Upstream is the shop behind the proxy.
type Upstream struct {
	URL              string        `yaml:"url"` // required, http://host:port[/base]
	Timeout          time.Duration `yaml:"timeout"`
	MaxConns         int           `yaml:"max_conns"`
	SigningSecretEnv string        `yaml:"signing_secret_env"` // default "SECKILL_SIGNING_SECRET"; one key, id "default"

	// SigningKeys are the keys of X-Seckill-Signature, current first: the
	// first signs every winner, the others sign nothing and are listed so
	// the shop can be given them ahead of a rotation (README, "Rotating
	// the signing key"). Exclusive with SigningSecretEnv.
	SigningKeys []SigningKey `yaml:"signing_keys"`
	// PassTimeout bounds one ordinary (non-buy) request's exchange with the
	// shop: sending its body and streaming the answer back, at the
	// client's pace, both ways.
	PassTimeout time.Duration `yaml:"pass_timeout"`
	// IdleTimeout closes keep-alive connections to the shop idle this long.
	// Keep it below the shop's own keep-alive timeout: a buy sent on a
	// connection the shop is closing has an unknown outcome.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WarmConns is how many connections to the shop the proxy keeps
	// dialled and unused while a sync-mode activity is near its start or
	// open, so the first winners after a quiet moment do not each dial
	// first (proxy/shopwarm.go). 0 keeps none; at most MaxConns.
	WarmConns int `yaml:"warm_conns"`
	// ReplayMaxBytes bounds the body of a winner's answer kept with its
	// request id for exact replays; a larger answer is replayed as 409
	// ALREADY_PURCHASED with token and order id. 0 keeps none.
	ReplayMaxBytes int `yaml:"replay_max_bytes"`
	// ReleaseStatuses are the shop's answers to a buy that release the
	// reservation: "4xx"-style classes or exact codes. Any other non-2xx
	// answer is an unknown outcome (pending, settled by verify.url) for an
	// activity with verify.url, and releases for one without.
	ReleaseStatuses []string `yaml:"release_statuses"`

	// MaxInflight bounds the winners in flight to the shop at once, per
	// activity, for the whole fleet (issue 11 §1): 0, the default, keeps
	// no bound. With Adaptive it is the bound's upper end.
	MaxInflight int `yaml:"max_inflight"`
	// Overflow is what a winner past MaxInflight gets: OverflowQueue (202
	// QUEUED, sent by the queue workers when the shop has room),
	// OverflowWait (waits up to OverflowWait for a slot, then 503 BUSY with
	// the unit released) or OverflowBusy (503 BUSY at once, unit released).
	Overflow string `yaml:"overflow"`
	// OverflowWait is how long a winner waits for a slot before Overflow
	// applies: default 1s with wait, 0 with queue (queued at once).
	OverflowWait time.Duration `yaml:"overflow_wait"`
	// Adaptive makes the limit follow the shop's latency, between
	// MinInflight and MaxInflight.
	Adaptive    bool `yaml:"adaptive"`
	MinInflight int  `yaml:"min_inflight"`
}

// Overflow values (upstream.overflow).
const (
	OverflowQueue = "queue"
	OverflowWait  = "wait"
	OverflowBusy  = "busy"
)

// InflightTTL is the lease under which an instance holds slots of an
// in-flight budget: a crashed instance's slots come back after it. It
// outlives one send to the shop (upstream.timeout) by InflightLeaseMargin,
// so a slot is only used while the lease will outlive the request.
func (u *Upstream) InflightTTL() time.Duration { return u.Timeout + InflightLeaseMargin }

// InflightLeaseMargin is how much an in-flight lease outlives
// upstream.timeout: its renewals (every quarter of it) may fail a few
// times before the instance stops sending.
const InflightLeaseMargin = 2 * time.Second

// SpillsToQueue reports whether a winner of activity a the shop has no room
// for is queued (a sync-mode activity with upstream.max_inflight and
// overflow: queue): its queue workers must then run, as in queue mode.
func (c *Config) SpillsToQueue(a *Activity) bool {
	return a.Mode == ModeSync && c.Upstream.MaxInflight > 0 && c.Upstream.Overflow == OverflowQueue
}

// UsesQueue reports whether activity a's reservations may wait in its
// queue: queue mode, or a sync-mode activity that spills into it.
func (c *Config) UsesQueue(a *Activity) bool { return a.Mode == ModeQueue || c.SpillsToQueue(a) }

// SigningKey is one key of upstream.signing_keys.
type SigningKey struct {
	// ID is sent as k= so the shop picks the key: [A-Za-z0-9._-]{1,32}.
	ID string `yaml:"id"`
	// SecretEnv names the environment variable holding the HMAC secret.
	SecretEnv string `yaml:"secret_env"`
}

// Secret returns the key's HMAC secret from its environment variable, ""
// when unset.
func (k SigningKey) Secret() string { return getenv(k.SecretEnv) }

// Releases reports whether the shop's non-2xx status releases a buy's
// reservation by ReleaseStatuses (validated: "Nxx" or three digits).
func (u *Upstream) Releases(status int) bool {
	for _, s := range u.ReleaseStatuses {
		if len(s) != 3 {
			continue
		}
		if s[1] == 'x' {
			if int(s[0]-'0') == status/100 {
				return true
			}
		} else if int(s[0]-'0')*100+int(s[1]-'0')*10+int(s[2]-'0') == status {
			return true
		}
	}
	return false
}

// Server is the public listener's connection limits.
type Server struct {
	// MaxConns bounds the connections served at once; more are refused.
	MaxConns int `yaml:"max_conns"`
	// MaxConnsPerIP bounds one client address's connections (0: no bound;
	// behind a balancer every connection comes from its address).
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// ReadTimeout bounds reading one request, headers and body.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainDelay is how long a stopping instance (SIGTERM, SIGINT) keeps
	// its listener open with readiness false, answering buys 503 BUSY with
	// Retry-After, so balancers take it out before it stops accepting
	// (default 1s; 0..5m).
	DrainDelay time.Duration `yaml:"drain_delay"`
	// MaxClockSkew is how far this host's clock may be from Redis's TIME
	// before the instance stops taking buys (STORE_UNAVAILABLE, /readyz
	// 503) and its reconciler and queue workers stop settling: windows and
	// reservation ages are judged by each instance's own clock, so one
	// instance's wrong clock opens a sale early or has a fresh winner
	// released as stale (default 1s; 0 turns the check off; at most 1m).
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// ShutdownTimeout bounds the wait, after the drain delay, for buys in
	// flight at the shop and their confirms (default 2 × upstream.timeout
	// + 5s; at least upstream.timeout). What is cut off stays pending for
	// the reconciler.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// FairStartMaxHeld bounds the buys this instance holds at once during
	// activities' fair_start windows (all activities together, default
	// 100,000); one more is answered 503 BUSY. Each held buy keeps its
	// connection, so max_conns bounds them too.
	FairStartMaxHeld int `yaml:"fair_start_max_held"`
	// WarmWorkers is how many of the listener's worker goroutines are made
	// ready at start-up and 2 s before each activity's start (default 1024;
	// 0: none): a sale's first wave then does not wait for a thousand
	// goroutines to be made and their stacks grown. Each round takes at
	// most half the connections max_conns leaves free and half the file
	// descriptors left; none with max_conns_per_ip (proxy/warm.go).
	WarmWorkers int `yaml:"warm_workers"`
}

// Redis says how to reach the store.
type Redis struct {
	Addrs       []string      `yaml:"addrs"`
	Cluster     bool          `yaml:"cluster"` // also true when len(Addrs) > 1
	Username    string        `yaml:"username"`
	PasswordEnv string        `yaml:"password_env"`
	Timeout     time.Duration `yaml:"timeout"` // per command
	ClientCache bool          `yaml:"client_cache"`
	// KeyPrefix is prepended to every key (default "seckill").
	KeyPrefix string `yaml:"key_prefix"`
	// BuyerMemo bounds how many buyers each instance remembers at their
	// per-user limit with a confirmed last reservation (default 262,144;
	// 0 = none): their repeats are answered from memory while their
	// shard's epoch, read through client-side caching, is unchanged.
	// Needs client_cache.
	BuyerMemo int `yaml:"buyer_memo"`
	// FlushDelay lets the Redis connection's writer wait up to this long
	// after a flush, while other calls are in flight, to send more calls
	// per system call (rueidis MaxFlushDelay). 0 = flush at once.
	FlushDelay time.Duration `yaml:"flush_delay"`
	// DurableWinners makes a winner wait, before the shop sees it, until
	// its reservation is on replicas (README "Durable winners").
	DurableWinners DurableWinners `yaml:"durable_winners"`
	// Sentinel, when master_set is set, finds the master through Redis
	// Sentinel (addrs are the sentinels) and follows it across failovers.
	// Excludes redis.addrs and redis.cluster.
	Sentinel Sentinel `yaml:"sentinel"`
	// TLS, when the block is present, speaks TLS to every Redis node (and
	// to the sentinels).
	TLS RedisTLS `yaml:"tls"`
}

// Sentinel is redis.sentinel.
type Sentinel struct {
	// MasterSet is the name the sentinels monitor the master under.
	MasterSet string `yaml:"master_set"`
	// Addrs are sentinels' host:port (one suffices; list all of them).
	Addrs []string `yaml:"addrs"`
}

// Enabled reports whether Redis is reached through Sentinel.
func (s *Sentinel) Enabled() bool { return s.MasterSet != "" }

// RedisTLS is redis.tls. Files are PEM. Without ca_file the system's roots
// verify the server; cert_file and key_file (both or neither) are the
// client certificate for servers that require one (tls-auth-clients).
type RedisTLS struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"` // default: the host of the address dialled
	// Enabled is set when the file has a redis.tls block (even `tls: {}`).
	Enabled bool `yaml:"-"`
}

// DurableWinners is redis.durable_winners: after a winning reserve, WAIT
// (or WAITAOF) on the node that holds the buyer's shard, so a failover
// right after cannot lose a reservation the shop already has.
type DurableWinners struct {
	// Replicas is how many replicas must acknowledge the reservation;
	// 0 (the default, with no durable_winners block) switches it off.
	Replicas int `yaml:"replicas"`
	// Timeout is the longest a winner waits for them (whole milliseconds).
	Timeout time.Duration `yaml:"timeout"`
	// OnTimeout is refuse (release the unit, answer STORE_UNAVAILABLE) or
	// forward (go on and count it).
	OnTimeout string `yaml:"on_timeout"`
	// FSync waits for the replicas' AOF fsync (WAITAOF 0 N) where the
	// servers have it (Redis 7.2+), WAIT otherwise.
	FSync bool `yaml:"fsync"`
}

// Enabled reports whether winners wait for replicas.
func (d *DurableWinners) Enabled() bool { return d.Replicas > 0 }

// OnTimeout values of redis.durable_winners.
const (
	DurableRefuse  = "refuse"
	DurableForward = "forward"
)

// Bounds of redis.durable_winners.
const (
	MaxDurableReplicas = 16
	MaxDurableTimeout  = 5 * time.Second
)

// Source names where one value of a request comes from. Exactly one of
// Header, Cookie and Query is set.
type Source struct {
	Header string `yaml:"header"`
	Cookie string `yaml:"cookie"`
	Query  string `yaml:"query"`
	// CaseFold makes ids that differ only in case one id (Unicode case
	// folding, after trimming white space and NFC, which always apply).
	CaseFold bool `yaml:"case_fold"`
	// Numeric accepts only ASCII digits and drops leading zeros ("007" is
	// "7"); any other id is BAD_REQUEST.
	Numeric bool `yaml:"numeric"`
	// JWT (identity.user only) takes the user from a verified token's claim.
	JWT JWT `yaml:"jwt"`
	// Session (identity.user only) names the shop's session credential and
	// the whoami endpoint that turns it into a user id.
	Session Session `yaml:"session"`
}

// Session is identity.user.session: the buyer is whoever the shop's whoami
// endpoint says the session cookie (or header) belongs to.
type Session struct {
	// Cookie or Header names where the credential is; exactly one is set.
	Cookie string `yaml:"cookie"`
	Header string `yaml:"header"`
	// URL is the whoami endpoint; it gets the credential as the buyer sent
	// it (same cookie or header). 200 = signed in, 401/403 = not.
	URL string `yaml:"url"`
	// UserFrom is where the user id is in a 200 answer: json:/pointer or
	// header:NAME (default json:/user_id).
	UserFrom string `yaml:"user_from"`
	// TTL is how long a signed-in answer is cached (default 30s).
	TTL time.Duration `yaml:"ttl"`
	// NegativeTTL is how long a 401/403 answer is cached (default 2s).
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// Timeout bounds one look-up (default 300ms); beyond it the buy is
	// answered 503 AUTH_UNAVAILABLE.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight bounds look-ups in flight at once (default 64); a buy
	// that would need one more is answered 503 AUTH_UNAVAILABLE.
	MaxInFlight int `yaml:"max_in_flight"`
	// CacheSize bounds the cached answers (default 50,000 entries).
	CacheSize int `yaml:"cache_size"`
}

// JWT is identity.user.jwt: the buyer is a claim of a signed token, verified
// at the edge with keys from a JWKS (file or URL) or an HMAC secret.
type JWT struct {
	// Header carries "Bearer <token>" (default Authorization); or Cookie
	// names a cookie holding the bare token. Exactly one is set.
	Header string `yaml:"header"`
	Cookie string `yaml:"cookie"`
	// Exactly one key source: a JWKS file (reloaded on change and SIGHUP),
	// a JWKS URL (refreshed in the background), or the name of an
	// environment variable holding an HMAC secret (HS algorithms only).
	JWKSFile      string `yaml:"jwks_file"`
	JWKSURL       string `yaml:"jwks_url"`
	HMACSecretEnv string `yaml:"hmac_secret_env"`
	// Issuer and Audience must match the token's iss and aud (required).
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// Claim holds the user id: a member name ("sub", the default) or a
	// JSON pointer into the claims ("/ext/uid").
	Claim string `yaml:"claim"`
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30s).
	Leeway time.Duration `yaml:"leeway"`
	// Algorithms are the accepted "alg" values; "none" never is.
	Algorithms []string `yaml:"algorithms"`
}

// Enabled reports whether identity.user is a JWT claim (validation ensures
// a configured jwt block names exactly one key source).
func (j *JWT) Enabled() bool { return j.JWKSFile != "" || j.JWKSURL != "" || j.HMACSecretEnv != "" }

// HMACSecret returns the HMAC key from the environment ("" when unset or
// not configured): secrets never live in the file.
func (j *JWT) HMACSecret() string { return getenv(j.HMACSecretEnv) }

// Identity says where the shopper's identities are found.
type Identity struct {
	User      Source `yaml:"user"`
	Device    Source `yaml:"device"`
	RequestID Source `yaml:"request_id"`
}

// Rate is a token bucket: Rate tokens per second, at most Burst saved up.
type Rate struct {
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
}

// Limits are the per-IP, per-device and per-user rate limits, kept in each
// instance's memory (shared out over the fleet when Fleet is true).
type Limits struct {
	PerIP Rate `yaml:"per_ip"`
	// IPv4Prefix and IPv6Prefix are how many leading bits of a client
	// address name one client for per_ip (defaults 32 and 64: an IPv6
	// subscriber gets a whole /64 and can rotate the rest at will).
	IPv4Prefix int  `yaml:"ipv4_prefix"`
	IPv6Prefix int  `yaml:"ipv6_prefix"`
	PerDevice  Rate `yaml:"per_device"`
	PerUser    Rate `yaml:"per_user"`
	// Fleet (default true) makes the three limits hold for the whole fleet:
	// instances count each other through a heartbeat in Redis, and each
	// enforces rate/N and burst/N (at least 1) of the N live instances.
	// false: each instance enforces the full limits on its own.
	Fleet bool `yaml:"fleet"`
}

// Route matches buy requests of one activity.
type Route struct {
	Method string `yaml:"method"` // default POST
	// Path is a pattern; segments {activity} and {sku} are captured.
	Path string `yaml:"path"`
	// SkuFrom is path | query:NAME | form:NAME | json:/pointer.
	SkuFrom string `yaml:"sku_from"`
	// QtyFrom uses the same forms; empty means qty 1.
	QtyFrom string `yaml:"qty_from"`
	// CaseSensitive makes Path's literal segments match only as written.
	// By default they match in any case, as ASP.NET, IIS and Express route:
	// a case the shop would still run as a buy must not skip admission.
	CaseSensitive bool `yaml:"case_sensitive"`
	// PassMethods are other methods on Path that go to the shop as ordinary
	// traffic (e.g. OPTIONS for CORS preflights, GET for a product page on
	// the same path). Any other method on Path is answered 405.
	PassMethods []string `yaml:"pass_methods"`
	// FieldCookies is refuse (the default) or allow. Refused (400): a buy
	// carrying a cookie named, as PHP names variables, like a field the buy
	// takes from the query, a form body or the path (sku_from, qty_from,
	// the {sku} and {activity} captures, identity sources of those kinds).
	// PHP's $_REQUEST reads cookies over the query and the form when
	// php.ini's request_order is unset (the official Docker images ship no
	// php.ini), so the shop would sell the cookie's SKU. allow, for a shop
	// that sets a cookie of such a name itself and does not read
	// $_REQUEST with cookies (request_order = "GP").
	FieldCookies string `yaml:"field_cookies"`
}

// Route.FieldCookies values.
const (
	FieldCookiesRefuse = "refuse"
	FieldCookiesAllow  = "allow"
)

// SKU is one item on sale.
type SKU struct {
	ID    string `yaml:"id"`
	Stock int64  `yaml:"stock"`
}

// Queue tunes queue mode's forwarding.
type Queue struct {
	Workers int     `yaml:"workers"`
	Rate    float64 `yaml:"rate"`
	// MaxBacklog bounds the reservations queued and not yet handled: beyond
	// it a buyer is answered 503 BUSY (the stream is never trimmed instead).
	MaxBacklog int64 `yaml:"max_backlog"`
	// MaxRequestBytes bounds the request kept for each queued buyer (its
	// request line, headers and body, as the worker sends it to the shop):
	// a larger buy is refused 400 before anything is reserved (queue mode),
	// or answered 503 BUSY where it would have spilled (overflow: queue).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
}

// Verify says how the reconciler asks the shop whether an order exists.
type Verify struct {
	URL string `yaml:"url"` // {token} is replaced; 200 = exists, 404 = absent
	// CountURL, optional, tells the reconciler how many units the shop
	// holds tokened orders for: {activity} and {sku} are replaced; the
	// answer is 200 with {"count": N}.
	CountURL string `yaml:"count_url"`
}

// Activity is one flash sale.
type Activity struct {
	ID    string `yaml:"id"`
	Route Route  `yaml:"route"`
	// BundleRoute, when its path is set, takes bundles: several SKUs of
	// the activity reserved all or none (see config/bundle.go).
	BundleRoute    BundleRoute   `yaml:"bundle_route"`
	Start          time.Time     `yaml:"start"`
	End            time.Time     `yaml:"end"`
	SKUs           []SKU         `yaml:"skus"`
	PerUserLimit   int64         `yaml:"per_user_limit"`
	MaxQty         int64         `yaml:"max_qty"` // largest qty in one request; default per_user_limit
	Shards         int           `yaml:"shards"`
	AdmissionRate  Rate          `yaml:"admission_rate"`
	Mode           string        `yaml:"mode"` // sync | queue | shadow
	Queue          Queue         `yaml:"queue"`
	PendingTimeout time.Duration `yaml:"pending_timeout"`
	Verify         Verify        `yaml:"verify"`
	OrderIDFrom    string        `yaml:"order_id_from"` // json:/pointer | header:NAME
	KeyTTLAfterEnd time.Duration `yaml:"key_ttl_after_end"`
	// PreheatAt, when set, has `serve` preheat the activity at Start +
	// PreheatAt (negative: before start), once across the fleet under a
	// Redis lease. 0: not scheduled (preheat by hand).
	PreheatAt time.Duration `yaml:"preheat_at"`
	// Signature, when it names keys, requires every buy request to carry an
	// HMAC signature from the shop's app (see docs/traffic-control.md).
	Signature Signature `yaml:"signature"`
	// EligibleOnly lets only users on the activity's eligibility list (held
	// in Redis, changed by admin calls and `seckill-proxy eligible`) buy.
	EligibleOnly bool `yaml:"eligible_only"`
	// ShadowHeaders (mode: shadow only) adds X-Seckill-Shadow: <code> to
	// each buy forwarded to the shop: what the proxy would have answered.
	ShadowHeaders bool `yaml:"shadow_headers"`

	// shadow is the copy a shadow activity's buys are decided against
	// (its own keys), built once per config (see shadow.go).
	shadow *Activity
	// shadowCopy marks the copy a shadow activity's buys are decided
	// against (PrepareShadows).
	shadowCopy bool

	// FairStart, when positive, holds the buys that arrive in
	// [start, start+fair_start) and lets them on, after the window, in a
	// uniformly random order: each draws a release moment uniformly in
	// [start+fair_start, start+fair_start+fair_start_spread). 0: off.
	FairStart time.Duration `yaml:"fair_start"`
	// FairStartSpread is how long the held buys are let on over (default
	// fair_start): it also meters them into Redis.
	FairStartSpread time.Duration `yaml:"fair_start_spread"`
}

// Signature is the optional request signature from the shop's app:
// hex(HMAC-SHA256(key, METHOD "\n" PATH "\n" USER "\n" TIMESTAMP "\n" NONCE))
// with TIMESTAMP in Unix milliseconds. A nonce is accepted once (Redis SET NX).
type Signature struct {
	// Keys maps a key id (sent in KeyIDHeader) to the name of the environment
	// variable holding that app's HMAC key. No keys: no signature required.
	Keys map[string]string `yaml:"keys"`
	// Window is how far a request's timestamp may be from the proxy's clock.
	Window          time.Duration `yaml:"window"`
	KeyIDHeader     string        `yaml:"key_id_header"`
	TimestampHeader string        `yaml:"timestamp_header"`
	NonceHeader     string        `yaml:"nonce_header"`
	SignatureHeader string        `yaml:"signature_header"`
}

// Enabled reports whether requests of the activity must be signed.
func (s *Signature) Enabled() bool { return len(s.Keys) > 0 }

// Mode values.
const (
	ModeSync  = "sync"
	ModeQueue = "queue"
	// ModeShadow forwards every buy to the shop unchanged and records what
	// the funnel would have decided (see shadow.go).
	ModeShadow = "shadow"
)
