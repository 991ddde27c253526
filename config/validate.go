package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	maxStock       = 1_000_000_000
	maxReplayBytes = 1 << 20
)

// Upper bounds of the timeouts others are computed from (shutdown_timeout,
// pending_timeout, lease TTLs): a shop or Redis slower than these is down,
// and a larger value (2000000h) would overflow what is derived from it.
const (
	MaxUpstreamTimeout = 10 * time.Minute
	MaxRedisTimeout    = time.Minute
)

// MinPendingTimeout is the shortest pending_timeout allowed with an
// upstream: the proxy waits up to one timeout for the shop, a shop behind a
// balancer with the same timeout may work one more on a request the proxy
// gave up on, and the proxy's confirm or release then takes up to
// PendingMargin. With an in-flight limit to the shop a winner may first wait
// up to overflow_wait for a slot, holding its reservation, and only then be
// sent. The reconciler only settles reservations older than this, so it
// never releases one the shop may still answer for, or that is still to be
// sent.
func MinPendingTimeout(u Upstream) time.Duration {
	return 2*u.Timeout + slotWait(u) + PendingMargin
}

// LateToSend reports whether a reservation stamped at stamp (its reserve,
// or a queue worker's claim) is too old at now to be sent to the shop. The
// reconciler may settle a reservation pending_timeout after its stamp; a
// shop behind a balancer may work on a request up to two upstream timeouts
// after it was sent, and the confirm or release that follows needs time
// too. MinPendingTimeout leaves PendingMargin for that; a send may use half
// of it (the reserve's own round trip, a durability wait), so the confirm
// keeps the other half. Past that, sent, the shop could take the order
// after the reconciler released the unit and sold it again (red-team
// findings, docs/decisions.md §34, §35).
func LateToSend(stamp, now time.Time, pending, upstream time.Duration) bool {
	if stamp.IsZero() || pending <= 0 {
		return false
	}
	return now.Sub(stamp) > pending-2*upstream-PendingMargin/2
}

// slotWait is the longest a winner may wait for room at the shop before it
// is sent (0 without an in-flight limit, or with overflow: busy).
func slotWait(u Upstream) time.Duration {
	if u.MaxInflight > 0 && u.Overflow != OverflowBusy {
		return u.OverflowWait
	}
	return 0
}

var (
	idPattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	envPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	keyIDPattern  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)
	tokenPattern  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 token
	releaseStatus = regexp.MustCompile(`^(?:[1345]xx|[1345][0-9][0-9])$`)
	routeMethods  = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	passMethods   = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	knownMessages = map[string]bool{
		"QUEUED": true, "PENDING": true, "ALREADY_PURCHASED": true, "SOLD_OUT": true,
		"NOT_STARTED": true, "ENDED": true, "NOT_READY": true, "PAUSED": true,
		"BUSY": true, "RATE_LIMITED": true, "BLOCKED": true, "UNKNOWN_ITEM": true,
		"BAD_REQUEST": true, "STORE_UNAVAILABLE": true, "UPSTREAM_FAILED": true,
		"UPSTREAM_TIMEOUT": true, "UNAUTHENTICATED": true, "AUTH_UNAVAILABLE": true,
	}
)

// validator checks a defaulted Config. It reads lines from meta so each
// message points at the offending node, or at its nearest present parent when
// the node itself is missing.
type validator struct {
	m    *meta
	errs []Error
}

func (v *validator) errorf(line int, format string, args ...any) {
	v.errs = append(v.errs, Error{Line: line, Msg: fmt.Sprintf(format, args...)})
}

// dupLine is where to report a repeated value found at line, first seen at
// first: line, unless that is first itself (the list repeats the entry
// through an alias, *a): then the list entry's own line, the alias.
func (v *validator) dupLine(line, first int, elem any) int {
	if line == first {
		return v.m.line(elem)
	}
	return line
}

// MinNetTimeout is the least timeout of a network exchange (the listener's
// reads and writes, the shop, Redis). Below it nothing completes: a
// write_timeout of 1ns (a unit typo: ns or us for s) validated, and the
// proxy answered no request at all, its answers timed out unwritten.
const MinNetTimeout = time.Millisecond

// minTimeout reports a positive timeout under MinNetTimeout (not positive
// is said elsewhere).
func (v *validator) minTimeout(p *time.Duration, name string, parent any) {
	if v.ok(p) && *p > 0 && *p < MinNetTimeout {
		v.errorf(v.m.line(p, parent), "%s must be at least %s, got %s: nothing completes in less (a unit typo?)", name, MinNetTimeout, *p)
	}
}

// ok reports whether p holds a usable value: defaulted or decoded. Fields that
// failed to decode were already reported.
func (v *validator) ok(p any) bool { return !v.m.failed(p) }

func (v *validator) config(c *Config) {
	v.listenAddr(&c.Listen, "listen", c.Listen)
	v.listenAddr(&c.Admin.Listen, "admin.listen", c.Admin.Listen, &c.Admin)
	if v.ok(&c.Listen) && v.ok(&c.Admin.Listen) && sameListen(c.Listen, c.Admin.Listen) {
		v.errorf(v.m.line(&c.Admin.Listen, &c.Admin), "admin.listen %q is the same address as listen: the two listeners need ports of their own", c.Admin.Listen)
	}
	if p := c.PublicPrefix; !strings.HasPrefix(p, "/") || len(p) < 2 || strings.HasSuffix(p, "/") {
		v.errorf(v.m.line(&c.PublicPrefix), "public_prefix must start with \"/\" and not end with one, got %q", p)
	}
	v.envName(&c.Admin.TokenEnv, "admin.token_env", c.Admin.TokenEnv, &c.Admin)
	v.upstream(c)
	v.upstreamSelf(c)
	v.redis(c)
	if n := c.Reconcile.ExceptionsMax; v.ok(&c.Reconcile.ExceptionsMax) && (n < MinExceptionsMax || n > MaxExceptionsMax) {
		v.errorf(v.m.line(&c.Reconcile.ExceptionsMax, &c.Reconcile), "reconcile.exceptions_max must be between %d and %d entries, got %d", MinExceptionsMax, MaxExceptionsMax, n)
	}
	for i, s := range c.TrustedProxies {
		if _, ok := parsePrefix(s); !ok && v.ok(&c.TrustedProxies[i]) {
			v.errorf(v.m.line(&c.TrustedProxies[i], &c.TrustedProxies), "trusted_proxies: %q is neither a CIDR nor an IP address", s)
		}
	}
	v.source(&c.Identity.User, "identity.user", false, &c.Identity)
	v.source(&c.Identity.Device, "identity.device", false, &c.Identity)
	// request_id may be switched off with `request_id: {}`: idempotency keys
	// are optional on requests, and a shop may not want them honoured.
	v.source(&c.Identity.RequestID, "identity.request_id", true, &c.Identity)
	v.rate(&c.Limits.PerIP, "limits.per_ip", &c.Limits)
	if l := &c.Limits; v.ok(&l.IPv4Prefix) && (l.IPv4Prefix < 8 || l.IPv4Prefix > 32) {
		v.errorf(v.m.line(&l.IPv4Prefix, &c.Limits), "limits.ipv4_prefix must be 8..32 bits, got %d", l.IPv4Prefix)
	}
	if l := &c.Limits; v.ok(&l.IPv6Prefix) && (l.IPv6Prefix < 16 || l.IPv6Prefix > 128) {
		v.errorf(v.m.line(&l.IPv6Prefix, &c.Limits), "limits.ipv6_prefix must be 16..128 bits, got %d", l.IPv6Prefix)
	}
	v.rate(&c.Limits.PerDevice, "limits.per_device", &c.Limits)
	v.rate(&c.Limits.PerUser, "limits.per_user", &c.Limits)
	for code := range c.Messages {
		if !knownMessages[code] {
			v.errorf(v.m.line(mapEntry{&c.Messages, code}, &c.Messages), "messages: %q is not a SPEC response code", code)
		}
	}
	v.requestHeaders(c)
	v.activities(c)
	v.bundleRouteClashes(c)
	// Two routes one request matches, or one under the public endpoints:
	// some buys could never be made.
	v.routeOverlaps(c)
	v.publicPrefixRoutes(c)
}

func (v *validator) upstream(c *Config) {
	u := &c.Upstream
	switch {
	case !v.m.has(&u.URL):
		v.errorf(v.m.line(&c.Upstream), "upstream.url is required")
	case v.ok(&u.URL):
		if msg := httpURL(u.URL); msg != "" {
			v.errorf(v.m.line(&u.URL), "upstream.url %s", msg)
		} else if msg := baseURL(u.URL); msg != "" {
			v.errorf(v.m.line(&u.URL), "upstream.url %s", msg)
		}
	}
	if v.ok(&u.Timeout) && (u.Timeout <= 0 || u.Timeout > MaxUpstreamTimeout) {
		v.errorf(v.m.line(&u.Timeout, &c.Upstream), "upstream.timeout must be positive and at most %s, got %s", MaxUpstreamTimeout, u.Timeout)
	}
	if v.ok(&u.WarmConns) && u.WarmConns < 0 {
		v.errorf(v.m.line(&u.WarmConns, &c.Upstream), "upstream.warm_conns must be 0 (none) or more, got %d", u.WarmConns)
	} else if v.ok(&u.WarmConns) && v.ok(&u.MaxConns) && u.MaxConns >= 1 && u.WarmConns > u.MaxConns {
		v.errorf(v.m.line(&u.WarmConns, &c.Upstream), "upstream.warm_conns (%d) cannot exceed upstream.max_conns (%d)", u.WarmConns, u.MaxConns)
	}
	if v.ok(&u.MaxConns) && u.MaxConns < 1 {
		v.errorf(v.m.line(&u.MaxConns, &c.Upstream), "upstream.max_conns must be at least 1, got %d", u.MaxConns)
	}
	v.signingKeys(u)
	if v.ok(&u.PassTimeout) && u.PassTimeout <= 0 {
		v.errorf(v.m.line(&u.PassTimeout, &c.Upstream), "upstream.pass_timeout must be positive, got %s", u.PassTimeout)
	}
	if v.ok(&u.IdleTimeout) && u.IdleTimeout <= 0 {
		v.errorf(v.m.line(&u.IdleTimeout, &c.Upstream), "upstream.idle_timeout must be positive, got %s", u.IdleTimeout)
	}
	v.minTimeout(&u.Timeout, "upstream.timeout", &c.Upstream)
	v.minTimeout(&u.PassTimeout, "upstream.pass_timeout", &c.Upstream)
	v.minTimeout(&u.IdleTimeout, "upstream.idle_timeout", &c.Upstream)
	if v.ok(&u.ReplayMaxBytes) && (u.ReplayMaxBytes < 0 || u.ReplayMaxBytes > maxReplayBytes) {
		v.errorf(v.m.line(&u.ReplayMaxBytes, &c.Upstream), "upstream.replay_max_bytes must be between 0 and %d, got %d", maxReplayBytes, u.ReplayMaxBytes)
	}
	for i, st := range u.ReleaseStatuses {
		if !releaseStatus.MatchString(st) && v.ok(&u.ReleaseStatuses[i]) {
			v.errorf(v.m.line(&u.ReleaseStatuses[i], &u.ReleaseStatuses, &c.Upstream),
				"upstream.release_statuses: %q is neither a class like \"4xx\" nor a status like \"409\" (1xx, 3xx, 4xx or 5xx: a 2xx confirms)", st)
		}
	}
	v.inflight(c)
	sv := &c.Server
	if v.ok(&sv.MaxConns) && sv.MaxConns < 1 {
		v.errorf(v.m.line(&sv.MaxConns, &c.Server), "server.max_conns must be at least 1, got %d", sv.MaxConns)
	}
	if v.ok(&sv.MaxConnsPerIP) && sv.MaxConnsPerIP < 0 {
		v.errorf(v.m.line(&sv.MaxConnsPerIP, &c.Server), "server.max_conns_per_ip must be 0 (no bound) or more, got %d", sv.MaxConnsPerIP)
	}
	if v.ok(&sv.MaxClockSkew) && (sv.MaxClockSkew < 0 || sv.MaxClockSkew > time.Minute) {
		v.errorf(v.m.line(&sv.MaxClockSkew, &c.Server), "server.max_clock_skew must be between 0s (no check) and 1m, got %s", sv.MaxClockSkew)
	}
	if v.ok(&sv.DrainDelay) && (sv.DrainDelay < 0 || sv.DrainDelay > 5*time.Minute) {
		v.errorf(v.m.line(&sv.DrainDelay, &c.Server), "server.drain_delay must be between 0s and 5m, got %s", sv.DrainDelay)
	}
	if v.ok(&sv.ShutdownTimeout) && v.ok(&u.Timeout) && u.Timeout <= MaxUpstreamTimeout && sv.ShutdownTimeout < u.Timeout {
		v.errorf(v.m.line(&sv.ShutdownTimeout, &c.Server),
			"server.shutdown_timeout (%s) must be at least upstream.timeout (%s): winners still at the shop would be cut off and left pending", sv.ShutdownTimeout, u.Timeout)
	}
	if v.ok(&sv.FairStartMaxHeld) && (sv.FairStartMaxHeld < 1 || sv.FairStartMaxHeld > MaxFairStartHeld) {
		v.errorf(v.m.line(&sv.FairStartMaxHeld, &c.Server), "server.fair_start_max_held must be between 1 and %d, got %d", MaxFairStartHeld, sv.FairStartMaxHeld)
	}
	if v.ok(&sv.WarmWorkers) && (sv.WarmWorkers < 0 || sv.WarmWorkers > MaxWarmWorkers) {
		v.errorf(v.m.line(&sv.WarmWorkers, &c.Server), "server.warm_workers must be between 0 (none) and %d, got %d", MaxWarmWorkers, sv.WarmWorkers)
	} else if v.ok(&sv.WarmWorkers) && v.ok(&sv.MaxConns) && sv.MaxConns >= 1 && sv.WarmWorkers > sv.MaxConns {
		v.errorf(v.m.line(&sv.WarmWorkers, &c.Server), "server.warm_workers (%d) cannot exceed server.max_conns (%d): each warm worker is made by a connection", sv.WarmWorkers, sv.MaxConns)
	}
	for _, d := range []struct {
		p    *time.Duration
		name string
	}{{&sv.ReadTimeout, "read_timeout"}, {&sv.WriteTimeout, "write_timeout"}, {&sv.IdleTimeout, "idle_timeout"}} {
		if v.ok(d.p) && *d.p <= 0 {
			v.errorf(v.m.line(d.p, &c.Server), "server.%s must be positive, got %s", d.name, *d.p)
		}
		v.minTimeout(d.p, "server."+d.name, &c.Server)
	}
}

func (v *validator) redis(c *Config) {
	r := &c.Redis
	if v.m.has(&r.Sentinel) {
		v.sentinel(c)
	}
	if r.TLS.Enabled {
		v.redisTLS(c)
	}
	if v.m.has(&r.Cluster) && v.ok(&r.Cluster) && !r.Cluster && len(r.Addrs) > 1 {
		v.errorf(v.m.line(&r.Cluster), "redis.cluster is false but redis.addrs lists %d addresses: a single Redis takes one address (list only its master), a Redis Cluster several (set cluster: true)", len(r.Addrs))
	}
	if v.ok(&r.Addrs) && len(r.Addrs) == 0 && !r.Sentinel.Enabled() {
		v.errorf(v.m.line(&r.Addrs, &c.Redis), "redis.addrs needs at least one address")
	}
	for i, a := range r.Addrs {
		v.hostPort(&r.Addrs[i], "redis.addrs", a, &r.Addrs)
	}
	if v.ok(&r.Timeout) && (r.Timeout <= 0 || r.Timeout > MaxRedisTimeout) {
		v.errorf(v.m.line(&r.Timeout, &c.Redis), "redis.timeout must be positive and at most %s, got %s", MaxRedisTimeout, r.Timeout)
	}
	v.minTimeout(&r.Timeout, "redis.timeout", &c.Redis)
	// Braces would open a hash tag of their own and move keys of one SKU to
	// different cluster slots, breaking the single-slot scripts.
	if r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, "{}") {
		v.errorf(v.m.line(&r.KeyPrefix, &c.Redis), "redis.key_prefix must be non-empty and contain no braces, got %q", r.KeyPrefix)
	}
	if r.PasswordEnv != "" {
		v.envName(&r.PasswordEnv, "redis.password_env", r.PasswordEnv, &c.Redis)
	}
	if r.BuyerMemo < 0 || r.BuyerMemo > 1<<24 {
		v.errorf(v.m.line(&r.BuyerMemo, &c.Redis), "redis.buyer_memo must be between 0 and %d buyers, got %d", 1<<24, r.BuyerMemo)
	}
	if r.FlushDelay < 0 || r.FlushDelay > time.Millisecond {
		v.errorf(v.m.line(&r.FlushDelay, &c.Redis), "redis.flush_delay must be between 0 and 1ms, got %s", r.FlushDelay)
	}
	v.durableWinners(c)
}

// durableWinners checks redis.durable_winners (README "Durable winners").
func (v *validator) durableWinners(c *Config) {
	d := &c.Redis.DurableWinners
	if !v.m.has(d) {
		return
	}
	at := func(p any) int { return v.m.line(p, d, &c.Redis) }
	if v.ok(&d.Replicas) && (d.Replicas < 0 || d.Replicas > MaxDurableReplicas) {
		v.errorf(at(&d.Replicas), "redis.durable_winners.replicas must be 0 (off) to %d, got %d", MaxDurableReplicas, d.Replicas)
	}
	if v.ok(&d.Timeout) {
		switch {
		case d.Timeout < time.Millisecond || d.Timeout > MaxDurableTimeout:
			v.errorf(at(&d.Timeout), "redis.durable_winners.timeout must be 1ms to %s, got %s", MaxDurableTimeout, d.Timeout)
		case d.Timeout%time.Millisecond != 0:
			v.errorf(at(&d.Timeout), "redis.durable_winners.timeout must be whole milliseconds (WAIT counts in ms), got %s", d.Timeout)
		}
	}
	if v.ok(&d.OnTimeout) && d.OnTimeout != DurableRefuse && d.OnTimeout != DurableForward {
		v.errorf(at(&d.OnTimeout), "redis.durable_winners.on_timeout must be %q or %q, got %q", DurableRefuse, DurableForward, d.OnTimeout)
	}
}

// sentinel checks redis.sentinel: a master set and at least one sentinel,
// and neither redis.addrs nor redis.cluster beside it.
func (v *validator) sentinel(c *Config) {
	r, s := &c.Redis, &c.Redis.Sentinel
	if v.ok(&s.MasterSet) && (s.MasterSet == "" || strings.ContainsAny(s.MasterSet, " \t\r\n")) {
		v.errorf(v.m.line(&s.MasterSet, s, &c.Redis), "redis.sentinel.master_set is required: the name the sentinels monitor the master under (`sentinel monitor NAME ...`), with no spaces, got %q", s.MasterSet)
	}
	if v.ok(&s.Addrs) && len(s.Addrs) == 0 {
		v.errorf(v.m.line(&s.Addrs, s, &c.Redis), "redis.sentinel.addrs needs at least one sentinel address (host:port, usually port 26379)")
	}
	for i, a := range s.Addrs {
		v.hostPort(&s.Addrs[i], "redis.sentinel.addrs", a, &s.Addrs, s)
	}
	if v.m.has(&r.Addrs) {
		v.errorf(v.m.line(&r.Addrs), "redis.addrs and redis.sentinel exclude each other: behind Sentinel the master's address comes from the sentinels; list the sentinels in redis.sentinel.addrs")
	}
	if r.Cluster && v.m.has(&r.Cluster) {
		v.errorf(v.m.line(&r.Cluster), "redis.cluster and redis.sentinel exclude each other: a Redis Cluster fails over by itself; use redis.addrs with cluster: true, or redis.sentinel for a master watched by sentinels")
	}
}

// redisTLS checks redis.tls by loading what it names, so a missing or
// unreadable file is reported at its line, not when the proxy dials.
func (v *validator) redisTLS(c *Config) {
	t := &c.Redis.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		at := &t.CertFile
		if t.CertFile == "" {
			at = &t.KeyFile
		}
		v.errorf(v.m.line(at, t, &c.Redis), "redis.tls: cert_file and key_file go together (the client certificate and its key), got only one")
		return
	}
	if t.CAFile != "" {
		if _, err := loadCAPool(t.CAFile); err != nil {
			v.errorf(v.m.line(&t.CAFile, t), "redis.tls.ca_file: %v", err)
		}
	}
	if t.CertFile != "" {
		if _, err := loadKeyPair(t.CertFile, t.KeyFile); err != nil {
			v.errorf(v.m.line(&t.CertFile, t), "redis.tls.cert_file/key_file: %v", err)
		}
	}
}

func (v *validator) activities(c *Config) {
	ids := make(map[string]int) // id → line of first use
	for i := range c.Activities {
		a := &c.Activities[i]
		if v.m.failed(a) {
			continue // not a mapping: already reported, nothing to check
		}
		name := fmt.Sprintf("activity #%d", i+1)
		if a.ID != "" {
			name = fmt.Sprintf("activity %q", a.ID)
		}
		at := func(p any) int { return v.m.line(p, a) }

		switch {
		case !v.m.has(&a.ID) || a.ID == "":
			v.errorf(at(&a.ID), "%s: id is required", name)
		case !idPattern.MatchString(a.ID):
			v.errorf(at(&a.ID), "%s: id must match [A-Za-z0-9_-]{1,64}", name)
		default:
			if first, dup := ids[a.ID]; dup {
				v.errorf(v.dupLine(at(&a.ID), first, a), "%s: id is already used at line %d", name, first)
			} else {
				ids[a.ID] = at(&a.ID)
			}
		}

		v.route(a, name)
		v.bundleRoute(a, name)
		v.window(a, name)
		v.fairStart(a, name)
		v.skus(a, name)

		if v.ok(&a.PerUserLimit) && a.PerUserLimit < 1 {
			v.errorf(at(&a.PerUserLimit), "%s: per_user_limit must be at least 1, got %d", name, a.PerUserLimit)
		} else if v.ok(&a.PerUserLimit) && v.ok(&a.MaxQty) && (a.MaxQty < 1 || a.MaxQty > a.PerUserLimit) {
			v.errorf(at(&a.MaxQty), "%s: max_qty must be between 1 and per_user_limit (%d), got %d", name, a.PerUserLimit, a.MaxQty)
		}
		if v.ok(&a.Shards) && (a.Shards < 1 || a.Shards > 1024) {
			v.errorf(at(&a.Shards), "%s: shards must be between 1 and 1024, got %d", name, a.Shards)
		}
		v.rate(&a.AdmissionRate, name+": admission_rate", a)
		if v.ok(&a.Mode) && a.Mode != ModeSync && a.Mode != ModeQueue && a.Mode != ModeShadow {
			v.errorf(at(&a.Mode), "%s: mode must be %q, %q or %q, got %q", name, ModeSync, ModeQueue, ModeShadow, a.Mode)
		}
		if v.ok(&a.ShadowHeaders) && v.ok(&a.Mode) && a.ShadowHeaders && a.Mode != ModeShadow {
			v.errorf(at(&a.ShadowHeaders), "%s: shadow_headers applies only to mode: shadow (mode is %q)", name, a.Mode)
		}
		if v.ok(&a.Queue.Workers) && (a.Queue.Workers < 1 || a.Queue.Workers > MaxQueueWorkers) {
			v.errorf(v.m.line(&a.Queue.Workers, &a.Queue, a), "%s: queue.workers must be at least 1 and at most %d (each is a goroutine and a connection to the shop), got %d", name, MaxQueueWorkers, a.Queue.Workers)
		}
		if v.ok(&a.Queue.Rate) {
			v.rateValue(a.Queue.Rate, name+": queue.rate", &a.Queue.Rate, &a.Queue, a)
		}
		if v.ok(&a.Queue.MaxBacklog) && a.Queue.MaxBacklog <= 0 {
			v.errorf(v.m.line(&a.Queue.MaxBacklog, &a.Queue, a), "%s: queue.max_backlog must be positive, got %d", name, a.Queue.MaxBacklog)
		} else if v.ok(&a.Queue.MaxBacklog) && a.Queue.MaxBacklog > MaxQueueBacklog {
			v.errorf(v.m.line(&a.Queue.MaxBacklog, &a.Queue, a), "%s: queue.max_backlog must be at most %d, got %d", name, MaxQueueBacklog, a.Queue.MaxBacklog)
		}
		if v.ok(&a.Queue.MaxRequestBytes) && (a.Queue.MaxRequestBytes < 1024 || a.Queue.MaxRequestBytes > 1<<20) {
			v.errorf(v.m.line(&a.Queue.MaxRequestBytes, &a.Queue, a), "%s: queue.max_request_bytes must be 1024 to 1048576, got %d", name, a.Queue.MaxRequestBytes)
		}
		if v.ok(&a.PendingTimeout) && a.PendingTimeout <= 0 {
			v.errorf(at(&a.PendingTimeout), "%s: pending_timeout must be positive, got %s", name, a.PendingTimeout)
		} else if least := MinPendingTimeout(c.Upstream); v.ok(&a.PendingTimeout) && v.ok(&c.Upstream.Timeout) && v.ok(&c.Upstream.OverflowWait) && a.PendingTimeout < least {
			if slotWait(c.Upstream) > 0 {
				v.errorf(at(&a.PendingTimeout), "%s: pending_timeout must be at least 2 × upstream.timeout + upstream.overflow_wait + %s = %s, got %s: the reconciler must never release a reservation the shop may still answer for, or a winner still waiting for a slot to be sent",
					name, PendingMargin, least, a.PendingTimeout)
			} else {
				v.errorf(at(&a.PendingTimeout), "%s: pending_timeout must be at least 2 × upstream.timeout + %s = %s, got %s: the reconciler must never release a reservation the shop may still answer for",
					name, PendingMargin, least, a.PendingTimeout)
			}
		}
		if v.ok(&a.KeyTTLAfterEnd) && a.KeyTTLAfterEnd <= 0 {
			v.errorf(at(&a.KeyTTLAfterEnd), "%s: key_ttl_after_end must be positive, got %s", name, a.KeyTTLAfterEnd)
		}
		v.keyTTL(c, a, name)
		// Explicitly 0 would preheat at start: buyers of the first moment
		// would be answered NOT_READY, which is what scheduling avoids.
		if v.m.has(&a.PreheatAt) && v.ok(&a.PreheatAt) && a.PreheatAt >= 0 {
			v.errorf(at(&a.PreheatAt), "%s: preheat_at must be negative (a time before start, e.g. -5m), got %s", name, a.PreheatAt)
		}
		if a.Verify.URL != "" {
			if msg := httpURL(a.Verify.URL); msg != "" {
				v.errorf(v.m.line(&a.Verify.URL, &a.Verify, a), "%s: verify.url %s", name, msg)
			} else if !strings.Contains(a.Verify.URL, "{token}") {
				v.errorf(v.m.line(&a.Verify.URL, &a.Verify, a), "%s: verify.url must contain {token}, or the shop cannot tell which order is asked for", name)
			}
		}
		if a.Verify.CountURL != "" {
			if msg := httpURL(a.Verify.CountURL); msg != "" {
				v.errorf(v.m.line(&a.Verify.CountURL, &a.Verify, a), "%s: verify.count_url %s", name, msg)
			} else if !strings.Contains(a.Verify.CountURL, "{sku}") {
				v.errorf(v.m.line(&a.Verify.CountURL, &a.Verify, a), "%s: verify.count_url must contain {sku}, or the shop cannot tell which SKU is counted", name)
			}
		}
		v.signature(a, name)
		if v.ok(&a.OrderIDFrom) {
			if msg := orderIDFrom(a.OrderIDFrom); msg != "" {
				v.errorf(at(&a.OrderIDFrom), "%s: order_id_from %s", name, msg)
			}
		}
	}
}

func (v *validator) route(a *Activity, name string) {
	r := &a.Route
	at := func(p any) int { return v.m.line(p, r, a) }
	if v.ok(&r.Method) && !slices.Contains(routeMethods, r.Method) {
		v.errorf(at(&r.Method), "%s: route.method must be one of %s, got %q", name, strings.Join(routeMethods, " "), r.Method)
	}
	if v.ok(&r.Path) {
		if msg := routePath(r.Path); msg != "" {
			v.errorf(at(&r.Path), "%s: route.path %s", name, msg)
		} else if r.SkuFrom == "path" && !HasSegment(r.Path, "{sku}") {
			v.errorf(at(&r.Path), "%s: route.path must contain a {sku} segment when sku_from is path", name)
		} else if v.ok(&r.SkuFrom) && r.SkuFrom != "path" && HasSegment(r.Path, "{sku}") {
			// Two SKUs in one request: the proxy would reserve sku_from's
			// while the shop sells the path's.
			v.errorf(at(&r.Path), "%s: route.path captures {sku} but sku_from is %q: the proxy would reserve the SKU named there while the shop reads the path's; drop {sku} from the path, or set sku_from: path", name, r.SkuFrom)
		}
	}
	if v.ok(&r.FieldCookies) && r.FieldCookies != "" && r.FieldCookies != FieldCookiesRefuse && r.FieldCookies != FieldCookiesAllow {
		v.errorf(at(&r.FieldCookies), "%s: route.field_cookies must be %s or %s, got %q", name, FieldCookiesRefuse, FieldCookiesAllow, r.FieldCookies)
	}
	seen := map[string]bool{}
	for i, m := range r.PassMethods {
		at := func() int { return v.m.line(&r.PassMethods[i], &r.PassMethods, r, a) }
		switch {
		case !v.ok(&r.PassMethods[i]):
		case !slices.Contains(passMethods, m):
			v.errorf(at(), "%s: route.pass_methods: %q is not one of %s", name, m, strings.Join(passMethods, " "))
		case m == r.Method:
			v.errorf(at(), "%s: route.pass_methods: %s is the route's own method; a buy is never passed through", name, m)
		case m == "HEAD" && r.Method == "GET":
			// Most frameworks (Express, Rails, Spring) run the GET handler
			// for HEAD: that would be a buy without admission.
			v.errorf(at(), "%s: route.pass_methods: HEAD runs a GET route's handler in most shops; a buy is never passed through", name)
		case seen[m]:
			v.errorf(at(), "%s: route.pass_methods lists %s twice", name, m)
		}
		seen[m] = true
	}
	if v.ok(&r.SkuFrom) {
		if msg := valueFrom(r.SkuFrom, true); msg != "" {
			v.errorf(at(&r.SkuFrom), "%s: route.sku_from %s", name, msg)
		}
	}
	if v.ok(&r.QtyFrom) && r.QtyFrom != "" {
		if msg := valueFrom(r.QtyFrom, false); msg != "" {
			v.errorf(at(&r.QtyFrom), "%s: route.qty_from %s", name, msg)
		}
	}
}

func (v *validator) window(a *Activity, name string) {
	startOK, endOK := v.m.has(&a.Start), v.m.has(&a.End)
	if !startOK {
		v.errorf(v.m.line(a), "%s: start is required", name)
	}
	if !endOK {
		v.errorf(v.m.line(a), "%s: end is required", name)
	}
	if startOK && endOK && v.ok(&a.Start) && v.ok(&a.End) && !a.End.After(a.Start) {
		v.errorf(v.m.line(&a.End), "%s: end (%s) must be after start (%s)", name, a.End.Format(time.RFC3339), a.Start.Format(time.RFC3339))
	}
}

// fairStart checks fair_start and fair_start_spread (README: "Fair start").
func (v *validator) fairStart(a *Activity, name string) {
	at := func(p any) int { return v.m.line(p, a) }
	if !v.ok(&a.FairStart) || !v.ok(&a.FairStartSpread) {
		return
	}
	switch {
	case a.FairStart < 0 || a.FairStart > MaxFairStart:
		v.errorf(at(&a.FairStart), "%s: fair_start must be between 0 (off) and %s, got %s", name, MaxFairStart, a.FairStart)
	case a.FairStart == 0 && v.m.has(&a.FairStartSpread):
		v.errorf(at(&a.FairStartSpread), "%s: fair_start_spread needs fair_start (a positive window)", name)
	case a.FairStart > 0 && (a.FairStartSpread < MinFairStartSpread || a.FairStartSpread > MaxFairStart):
		v.errorf(at(&a.FairStartSpread), "%s: fair_start_spread must be between %s and %s, got %s", name, MinFairStartSpread, MaxFairStart, a.FairStartSpread)
	case a.FairStart > 0 && v.ok(&a.Start) && v.ok(&a.End) && a.End.After(a.Start) && !a.End.After(a.FairStartEnd().Add(a.FairStartSpread)):
		v.errorf(at(&a.FairStart), "%s: fair_start + fair_start_spread (%s) must end before the activity ends (%s after start)", name, a.FairStart+a.FairStartSpread, a.End.Sub(a.Start))
	}
}

func (v *validator) skus(a *Activity, name string) {
	if v.ok(&a.SKUs) && len(a.SKUs) == 0 {
		v.errorf(v.m.line(&a.SKUs, a), "%s: skus needs at least one sku", name)
	}
	ids := make(map[string]int)
	for i := range a.SKUs {
		s := &a.SKUs[i]
		if v.m.failed(s) {
			continue
		}
		at := func(p any) int { return v.m.line(p, s, &a.SKUs, a) }
		switch {
		case s.ID == "":
			v.errorf(at(&s.ID), "%s: sku id is required", name)
		case !idPattern.MatchString(s.ID):
			v.errorf(at(&s.ID), "%s: sku id %q must match [A-Za-z0-9_-]{1,64}", name, s.ID)
		default:
			if first, dup := ids[s.ID]; dup {
				v.errorf(v.dupLine(at(&s.ID), first, s), "%s: sku %q is already listed at line %d", name, s.ID, first)
			} else {
				ids[s.ID] = at(&s.ID)
			}
		}
		if !v.m.has(&s.Stock) {
			v.errorf(at(&s.Stock), "%s: sku %q: stock is required", name, s.ID)
		} else if v.ok(&s.Stock) && (s.Stock < 0 || s.Stock > maxStock) {
			v.errorf(at(&s.Stock), "%s: sku %q: stock must be between 0 and %d, got %d", name, s.ID, maxStock, s.Stock)
		}
	}
}

// Bounds of every rate (tokens per second: limits, admission_rate,
// queue.rate) and burst. Token buckets keep nanosecond times in int64:
// below MinRate one token's interval, and a burst of them, leave that
// range (1e-12 per second wrapped to one token per nanosecond: no limit
// at all); above MaxRate a token is shorter than the clock's resolution.
// No SKU holds more than maxStock units, so a larger burst lets nothing
// more through.
const (
	MinRate  = 0.001
	MaxRate  = 1e9
	MaxBurst = maxStock
)

// rate checks a token bucket; parents are the fallbacks for the line.
func (v *validator) rate(r *Rate, name string, parents ...any) {
	if v.ok(&r.Rate) {
		v.rateValue(r.Rate, name+".rate", append([]any{&r.Rate, r}, parents...)...)
	}
	if v.ok(&r.Burst) && r.Burst < 1 {
		v.errorf(v.m.line(append([]any{&r.Burst, r}, parents...)...), "%s.burst must be at least 1, got %d", name, r.Burst)
	} else if v.ok(&r.Burst) && r.Burst > MaxBurst {
		v.errorf(v.m.line(append([]any{&r.Burst, r}, parents...)...), "%s.burst must be at most %d, got %d", name, MaxBurst, r.Burst)
	}
}

// rateValue checks a rate in tokens per second; at are the line's
// candidates.
func (v *validator) rateValue(rate float64, name string, at ...any) {
	switch {
	case rate <= 0:
		v.errorf(v.m.line(at...), "%s must be positive, got %g", name, rate)
	case rate < MinRate || rate > MaxRate:
		v.errorf(v.m.line(at...), "%s must be between %g and %g per second, got %g", name, MinRate, MaxRate, rate)
	}
}

// source checks that exactly one place is named for an identity, since
// reading two and picking one would let a client choose who it is. Only
// identity.user may be a JWT claim.
func (v *validator) source(s *Source, name string, optional bool, parent any) {
	if !v.ok(s) {
		return
	}
	line := v.m.line(s, parent)
	set := 0
	for _, f := range []struct{ kind, val string }{{"header", s.Header}, {"cookie", s.Cookie}, {"query", s.Query}} {
		if f.val == "" {
			continue
		}
		set++
		if f.kind != "query" && !tokenPattern.MatchString(f.val) {
			v.errorf(line, "%s: %q is not a valid %s name", name, f.val, f.kind)
		}
	}
	if v.m.has(&s.Session) {
		set++
		v.session(&s.Session, name, s, parent)
	}
	kinds := "header, cookie or query"
	if name == "identity.user" {
		kinds = "header, cookie, query, session or jwt"
		if v.m.has(&s.JWT) {
			set++
			v.jwt(&s.JWT, s)
		}
	} else if v.m.has(&s.JWT) {
		v.errorf(v.m.line(&s.JWT, s, parent), "%s: jwt is only for identity.user", name)
	}
	switch {
	case set > 1:
		v.errorf(line, "%s: set exactly one of %s", name, kinds)
	case set == 0 && !optional:
		v.errorf(line, "%s: set one of %s", name, kinds)
	case set == 0 && (s.CaseFold || s.Numeric):
		v.errorf(line, "%s: case_fold and numeric need one of %s", name, kinds)
	}
	// Digits have no case: both together is a misunderstanding of one of
	// them, better said than silently accepted.
	if s.CaseFold && s.Numeric {
		v.errorf(v.m.line(&s.Numeric, s, parent), "%s: numeric ids have no case; set case_fold or numeric, not both", name)
	}
}

// jwtAlgorithms are the "alg" values identity.user.jwt accepts.
var jwtAlgorithms = map[string]bool{
	"HS256": true, "HS384": true, "HS512": true,
	"RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true,
	"ES256": true, "ES384": true, "ES512": true,
	"EdDSA": true,
}

// AsymmetricJWTAlgorithms is the default algorithms list with JWKS keys.
func AsymmetricJWTAlgorithms() []string {
	return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
}

// maxJWTLeeway bounds leeway: more would keep expired tokens alive.
const maxJWTLeeway = 5 * time.Minute

// jwt checks identity.user.jwt. HS algorithms are allowed only with an HMAC
// secret and never next to JWKS keys: a verifier holding both could be fed
// an HS256 token "signed" with a public key's bytes (algorithm confusion).
func (v *validator) jwt(j *JWT, parent any) {
	at := func(p any) int { return v.m.line(p, j, parent) }
	const name = "identity.user.jwt"
	switch {
	case j.Header != "" && j.Cookie != "":
		v.errorf(at(&j.Cookie), "%s: set one of header or cookie", name)
	case j.Header != "" && !tokenPattern.MatchString(j.Header):
		v.errorf(at(&j.Header), "%s: %q is not a valid header name", name, j.Header)
	case j.Cookie != "" && !tokenPattern.MatchString(j.Cookie):
		v.errorf(at(&j.Cookie), "%s: %q is not a valid cookie name", name, j.Cookie)
	}
	keys := 0
	for _, k := range []string{j.JWKSFile, j.JWKSURL, j.HMACSecretEnv} {
		if k != "" {
			keys++
		}
	}
	if keys != 1 {
		v.errorf(at(j), "%s: set exactly one of jwks_file, jwks_url or hmac_secret_env", name)
	}
	if j.JWKSFile != "" && v.ok(&j.JWKSFile) {
		// Loaded now, as redis.tls files are: serve would start with no key
		// and refuse every buyer's token.
		if err := checkJWKSFile(j.JWKSFile); err != nil {
			v.errorf(at(&j.JWKSFile), "%s.jwks_file: %v", name, err)
		}
	}
	if j.JWKSURL != "" {
		if msg := httpURL(j.JWKSURL); msg != "" {
			v.errorf(at(&j.JWKSURL), "%s.jwks_url %s", name, msg)
		}
	}
	if j.HMACSecretEnv != "" {
		v.envName(&j.HMACSecretEnv, name+".hmac_secret_env", j.HMACSecretEnv, j)
	}
	if v.ok(&j.Issuer) && j.Issuer == "" {
		v.errorf(at(&j.Issuer), "%s: issuer is required (the token's iss must match it)", name)
	}
	if v.ok(&j.Audience) && j.Audience == "" {
		v.errorf(at(&j.Audience), "%s: audience is required (else a token minted for another service of the issuer is accepted)", name)
	}
	if v.ok(&j.Claim) {
		switch {
		case j.Claim == "":
			v.errorf(at(&j.Claim), "%s: claim must name a claim or be a JSON pointer", name)
		case strings.HasPrefix(j.Claim, "/"):
			if msg := jsonPointer(j.Claim); msg != "" {
				v.errorf(at(&j.Claim), "%s.claim: %s", name, msg)
			}
		}
	}
	if v.ok(&j.Leeway) && (j.Leeway < 0 || j.Leeway > maxJWTLeeway) {
		v.errorf(at(&j.Leeway), "%s: leeway must be between 0s and %s, got %s", name, maxJWTLeeway, j.Leeway)
	}
	if !v.ok(&j.Algorithms) {
		return
	}
	if len(j.Algorithms) == 0 {
		v.errorf(at(&j.Algorithms), "%s: algorithms needs at least one algorithm", name)
	}
	for i, alg := range j.Algorithms {
		line := v.m.line(&j.Algorithms[i], &j.Algorithms, j, parent)
		hs := strings.HasPrefix(alg, "HS")
		switch {
		case !v.ok(&j.Algorithms[i]):
		case strings.EqualFold(alg, "none"):
			v.errorf(line, "%s: algorithm %q is refused: an unsigned token proves nothing", name, alg)
		case !jwtAlgorithms[alg]:
			v.errorf(line, "%s: unknown algorithm %q (known: HS256/384/512, RS256/384/512, PS256/384/512, ES256/384/512, EdDSA)", name, alg)
		case hs && j.HMACSecretEnv == "":
			v.errorf(line, "%s: %s needs hmac_secret_env and cannot be used with JWKS keys (algorithm confusion)", name, alg)
		case !hs && j.HMACSecretEnv != "":
			v.errorf(line, "%s: %s needs jwks_file or jwks_url; with hmac_secret_env only HS256/384/512", name, alg)
		}
	}
}

func (v *validator) hostPort(p *string, name, s string, parents ...any) {
	v.hostPortFrom(p, name, s, 1, parents...)
}

// listenAddr is hostPort for an address to listen on: port 0 (any free
// one) is allowed there.
func (v *validator) listenAddr(p *string, name, s string, parents ...any) {
	v.hostPortFrom(p, name, s, 0, parents...)
}

// hostPortFrom checks host:port with a numeric port from least to 65535:
// "127.0.0.1:99999" or ":abc" would pass net.SplitHostPort and fail only
// when serve or a command dials or listens, without a line.
func (v *validator) hostPortFrom(p *string, name, s string, least int, parents ...any) {
	if !v.ok(p) {
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		v.errorf(v.m.line(append([]any{p}, parents...)...), "%s: want host:port, got %q", name, s)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < least || n > 65535 {
		v.errorf(v.m.line(append([]any{p}, parents...)...), "%s: the port must be a number from %d to 65535, got %q", name, least, s)
	}
}

// envName checks a *_env field. Only the name is checked: secrets are
// commonly injected after validation (CI validates without them).
// signingKeys checks signing_secret_env or signing_keys: one of them, ids
// the shop can tell apart, each secret in its own variable.
func (v *validator) signingKeys(u *Upstream) {
	if !v.m.has(&u.SigningKeys) {
		v.envName(&u.SigningSecretEnv, "upstream.signing_secret_env", u.SigningSecretEnv, u)
		return
	}
	if v.m.has(&u.SigningSecretEnv) {
		v.errorf(v.m.line(&u.SigningSecretEnv), "upstream.signing_secret_env and upstream.signing_keys are exclusive: list that secret as a key of signing_keys")
	}
	if !v.ok(&u.SigningKeys) {
		return
	}
	if len(u.SigningKeys) == 0 {
		v.errorf(v.m.line(&u.SigningKeys, u), "upstream.signing_keys needs at least one key (the first signs)")
	}
	ids, envs := map[string]int{}, map[string]int{}
	for i := range u.SigningKeys {
		k := &u.SigningKeys[i]
		if v.m.failed(k) {
			continue
		}
		at := func(p any) int { return v.m.line(p, k, &u.SigningKeys, u) }
		switch {
		case !v.m.has(&k.ID):
			v.errorf(at(&k.ID), "upstream.signing_keys: key id is required")
		case !keyIDPattern.MatchString(k.ID):
			v.errorf(at(&k.ID), "upstream.signing_keys: key id %q must match [A-Za-z0-9._-]{1,32}", k.ID)
		default:
			if first, dup := ids[k.ID]; dup {
				v.errorf(v.dupLine(at(&k.ID), first, k), "upstream.signing_keys: key id %q is already listed at line %d", k.ID, first)
			} else {
				ids[k.ID] = at(&k.ID)
			}
		}
		switch {
		case !v.m.has(&k.SecretEnv):
			v.errorf(at(&k.SecretEnv), "upstream.signing_keys: key %q: secret_env is required", k.ID)
		case !envPattern.MatchString(k.SecretEnv):
			v.errorf(at(&k.SecretEnv), "upstream.signing_keys: key %q: secret_env %q is not a valid environment variable name", k.ID, k.SecretEnv)
		default:
			if first, dup := envs[k.SecretEnv]; dup {
				v.errorf(v.dupLine(at(&k.SecretEnv), first, k), "upstream.signing_keys: key %q: secret_env %s is already used at line %d (each key needs its own secret)", k.ID, k.SecretEnv, first)
			} else {
				envs[k.SecretEnv] = at(&k.SecretEnv)
			}
		}
	}
}

func (v *validator) envName(p *string, name, s string, parent any) {
	if v.ok(p) && !envPattern.MatchString(s) {
		v.errorf(v.m.line(p, parent), "%s: %q is not a valid environment variable name", name, s)
	}
}

// httpURL returns why s is not an absolute http(s) URL with a host, or "".
func httpURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("is not a URL: %q", redactUserinfo(s))
	}
	shown := u.Redacted() // messages are printed and logged: no password
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("must start with http:// or https://, got %q", shown)
	case u.Host == "":
		return fmt.Sprintf("needs a host, got %q", shown)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("has a port that is not a number from 1 to 65535: %q", shown)
		}
	}
	return ""
}

// redactUserinfo hides what stands between "//" and the last "@" of the
// authority of a URL url.Parse refused (it cannot redact what it did not
// parse).
func redactUserinfo(s string) string {
	i := strings.Index(s, "//")
	if i < 0 {
		return s
	}
	auth := s[i+2:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return s
	}
	return s[:i+2] + "xxxxx" + s[i+2+at:]
}

// baseURL returns why the http(s) URL s cannot be the shop's base
// (http(s)://host:port[/base]), or "". Requests are sent to it with their
// own path appended: sync mode keeps only its path (a query, fragment or
// user info was silently dropped) while queue mode appended to the text
// as written, so "http://shop/base?x=1" sent queued buys to /base with
// the buy's path in the query, and a "#" cut the buy's path off.
func baseURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return ""
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(s, "#"):
		return fmt.Sprintf("must be http(s)://host:port[/base], without a query or fragment (each request's own path and query are appended), got %q", s)
	case u.User != nil:
		// Redacted: the message is printed and logged.
		return fmt.Sprintf("must not hold user info (user:password@): sync mode dropped it and queue mode sent it as Basic auth; got %q", u.Redacted())
	case u.RawPath != "" || u.EscapedPath() != u.Path:
		return fmt.Sprintf("base path %q must be written as sent, with no characters to escape", u.Path)
	}
	return ""
}

// routeKey is a route path as the proxy's matcher compares it (proxy/route.go
// matchPath): case folded, no trailing "/"; base is the same with a last
// literal segment cut at its first "." (that literal's base matches it too:
// a literal matches itself followed by any ".ext"), or key itself.
func routeKey(p string) (key, base string) {
	key = strings.TrimSuffix(strings.ToLower(p), "/")
	base = key
	if i := strings.LastIndexByte(key, '/'); i >= 0 && !strings.HasPrefix(key[i+1:], "{") {
		if j := strings.IndexByte(key[i+1:], '.'); j >= 0 {
			base = key[:i+1+j]
		}
	}
	return key, base
}

// sameListen reports whether two listen addresses are one port (an empty
// host or 0.0.0.0 / :: takes every address; port 0 is any free one).
func sameListen(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	// localhost is 127.0.0.1 to the listener (Go resolves it to IPv4
	// first): "localhost:9090" beside "127.0.0.1:9090" validated and
	// serve failed to bind the second, with no line.
	v4 := func(h string) string {
		if strings.EqualFold(h, "localhost") {
			return "127.0.0.1"
		}
		return h
	}
	return strings.EqualFold(ha, hb) || v4(ha) == v4(hb) || any(ha) || any(hb)
}

// routePath returns why p is not a usable route pattern, or "".
func routePath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return fmt.Sprintf("must start with \"/\", got %q", p)
	}
	if strings.ContainsAny(p, "?#") {
		return fmt.Sprintf("must be a path without query or fragment, got %q", p)
	}
	seen := make(map[string]bool)
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		// Literals are matched against canonical request paths, so they
		// must be canonical themselves or they could never match.
		switch {
		case seg == "" && i < len(segs)-1:
			return fmt.Sprintf("must not have empty segments (\"//\"), got %q", p)
		case seg == "." || seg == "..":
			return fmt.Sprintf("must not have %q segments, got %q", seg, p)
		case strings.ContainsAny(seg, "{}"):
		case strings.IndexFunc(seg, notPathChar) >= 0:
			return fmt.Sprintf("literal %q may only use letters, digits and -._~!$&'()*+,=:@ (no ';', '%%' or '\\')", seg)
		}
		if !strings.ContainsAny(seg, "{}") {
			continue
		}
		if seg != "{activity}" && seg != "{sku}" {
			return fmt.Sprintf("may only use {activity} and {sku} as whole segments, got %q", seg)
		}
		if seen[seg] {
			return fmt.Sprintf("uses %s twice", seg)
		}
		seen[seg] = true
	}
	return ""
}

// notPathChar reports a rune a canonical literal path segment cannot hold:
// anything but RFC 3986 unreserved characters, sub-delims other than ';',
// ':' and '@'.
func notPathChar(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("-._~!$&'()*+,=:@", r)
}

// HasSegment reports whether route path p has the segment seg (a capture
// such as "{activity}", or a literal).
func HasSegment(p, seg string) bool {
	return slices.Contains(strings.Split(p, "/"), seg)
}

// valueFrom returns why s is not a valid sku_from/qty_from, or "".
func valueFrom(s string, allowPath bool) string {
	if s == "path" {
		if allowPath {
			return ""
		}
		return "cannot be path; use query:NAME, form:NAME or json:/pointer"
	}
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "query", "form":
		if arg == "" {
			return fmt.Sprintf("needs a name after %q", kind+":")
		}
		return ""
	case "json":
		return jsonPointer(arg)
	}
	if allowPath {
		return fmt.Sprintf("must be path, query:NAME, form:NAME or json:/pointer, got %q", s)
	}
	return fmt.Sprintf("must be empty, query:NAME, form:NAME or json:/pointer, got %q", s)
}

// orderIDFrom returns why s is not a valid order_id_from, or "".
func orderIDFrom(s string) string {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "json":
		return jsonPointer(arg)
	case "header":
		if !tokenPattern.MatchString(arg) {
			return fmt.Sprintf("needs a header name after \"header:\", got %q", s)
		}
		return ""
	}
	return fmt.Sprintf("must be json:/pointer or header:NAME, got %q", s)
}

// jsonPointer returns why p is not an RFC 6901 pointer to a member, or "".
func jsonPointer(p string) string {
	if !strings.HasPrefix(p, "/") {
		return fmt.Sprintf("needs a JSON pointer starting with \"/\" after \"json:\", got %q", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Sprintf("JSON pointer %q has \"~\" not followed by 0 or 1", p)
		}
	}
	return ""
}

// signature checks an activity's optional request signature block.
func (v *validator) signature(a *Activity, name string) {
	sg := &a.Signature
	if !v.m.has(sg) {
		return
	}
	at := func(p any) int { return v.m.line(p, sg, a) }
	if v.m.has(sg) && v.ok(sg) && v.ok(&sg.Keys) && len(sg.Keys) == 0 {
		v.errorf(at(&sg.Keys), "%s: signature.keys needs at least one key id: ENV_NAME entry (or remove signature)", name)
	}
	for id, env := range sg.Keys {
		line := v.m.line(mapEntry{&sg.Keys, id}, &sg.Keys, sg, a)
		if !idPattern.MatchString(id) {
			v.errorf(line, "%s: signature.keys: key id %q must match [A-Za-z0-9_-]{1,64}", name, id)
		}
		if !envPattern.MatchString(env) {
			v.errorf(line, "%s: signature.keys: %q is not a valid environment variable name", name, env)
		}
	}
	if v.ok(&sg.Window) && (sg.Window <= 0 || sg.Window > time.Hour) {
		v.errorf(at(&sg.Window), "%s: signature.window must be between 1ms and 1h, got %s", name, sg.Window)
	}
	for _, h := range []*string{&sg.KeyIDHeader, &sg.TimestampHeader, &sg.NonceHeader, &sg.SignatureHeader} {
		if v.ok(h) && !tokenPattern.MatchString(*h) {
			v.errorf(at(h), "%s: signature: %q is not a valid header name", name, *h)
		}
	}
}
