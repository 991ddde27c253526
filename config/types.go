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
	Redis          Redis             `yaml:"redis"`
	TrustedProxies []string          `yaml:"trusted_proxies"`
	Identity       Identity          `yaml:"identity"`
	Limits         Limits            `yaml:"limits"`
	Messages       map[string]string `yaml:"messages"`
	Activities     []Activity        `yaml:"activities"`
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
	SigningSecretEnv string        `yaml:"signing_secret_env"` // default "SECKILL_SIGNING_SECRET"
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
}

// Source names where one value of a request comes from. Exactly one field is set.
type Source struct {
	Header string `yaml:"header"`
	Cookie string `yaml:"cookie"`
	Query  string `yaml:"query"`
}

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

// Limits are the local per-instance rate limits.
type Limits struct {
	PerIP     Rate `yaml:"per_ip"`
	PerDevice Rate `yaml:"per_device"`
	PerUser   Rate `yaml:"per_user"`
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
}

// SKU is one item on sale.
type SKU struct {
	ID    string `yaml:"id"`
	Stock int64  `yaml:"stock"`
}

// Queue tunes queue mode's forwarding.
type Queue struct {
	Workers int     `yaml:"workers"`
	Rate    float64 `yaml:"rate"`
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
	ID             string        `yaml:"id"`
	Route          Route         `yaml:"route"`
	Start          time.Time     `yaml:"start"`
	End            time.Time     `yaml:"end"`
	SKUs           []SKU         `yaml:"skus"`
	PerUserLimit   int64         `yaml:"per_user_limit"`
	MaxQty         int64         `yaml:"max_qty"` // largest qty in one request; default per_user_limit
	Shards         int           `yaml:"shards"`
	AdmissionRate  Rate          `yaml:"admission_rate"`
	Mode           string        `yaml:"mode"` // sync | queue
	Queue          Queue         `yaml:"queue"`
	PendingTimeout time.Duration `yaml:"pending_timeout"`
	Verify         Verify        `yaml:"verify"`
	OrderIDFrom    string        `yaml:"order_id_from"` // json:/pointer | header:NAME
	KeyTTLAfterEnd time.Duration `yaml:"key_ttl_after_end"`
	// Signature, when it names keys, requires every buy request to carry an
	// HMAC signature from the shop's app (see docs/traffic-control.md).
	Signature Signature `yaml:"signature"`
	// EligibleOnly lets only users on the activity's eligibility list (held
	// in Redis, changed by admin calls and `seckill-proxy eligible`) buy.
	EligibleOnly bool `yaml:"eligible_only"`
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
)
