package config

import (
	"strings"
	"time"
)

// Bounds of identity.user.session. A look-up holds a buy while the shop
// answers, so its timeout stays well under a buyer's patience; the cache
// and in-flight bounds keep a flood of made-up cookies from growing memory
// or the shop's load without end.
const (
	maxSessionTimeout     = 10 * time.Second
	maxSessionTTL         = 24 * time.Hour
	maxSessionInFlight    = 100_000
	maxSessionCacheSize   = 10_000_000
	maxSessionNegativeTTL = time.Hour
)

// session checks identity.user.session; name is the source's name.
func (v *validator) session(s *Session, name string, src *Source, parent any) {
	if !v.ok(s) {
		return
	}
	at := func(p any) int { return v.m.line(p, s, src, parent) }
	name += ".session"
	if name != "identity.user.session" {
		v.errorf(at(s), "%s: a session look-up names the buyer only (identity.user)", name)
		return
	}
	switch {
	case s.Cookie != "" && s.Header != "":
		v.errorf(at(s), "%s: set exactly one of cookie or header", name)
	case s.Cookie == "" && s.Header == "":
		v.errorf(at(s), "%s: set cookie or header: where the shop's session credential is", name)
	case s.Cookie != "" && !tokenPattern.MatchString(s.Cookie):
		v.errorf(at(&s.Cookie), "%s: %q is not a valid cookie name", name, s.Cookie)
	case s.Header != "" && !tokenPattern.MatchString(s.Header):
		v.errorf(at(&s.Header), "%s: %q is not a valid header name", name, s.Header)
	}
	switch {
	case !v.m.has(&s.URL):
		v.errorf(at(s), "%s.url is required: the shop's whoami endpoint", name)
	case v.ok(&s.URL):
		if msg := httpURL(s.URL); msg != "" {
			v.errorf(at(&s.URL), "%s.url %s", name, msg)
		}
	}
	if v.ok(&s.UserFrom) {
		if msg := orderIDFrom(s.UserFrom); msg != "" {
			v.errorf(at(&s.UserFrom), "%s.user_from %s", name, strings.Replace(msg, "order_id_from", "user_from", 1))
		}
	}
	for _, d := range []struct {
		p        *time.Duration
		key      string
		min, max time.Duration
	}{
		{&s.TTL, "ttl", time.Millisecond, maxSessionTTL},
		{&s.NegativeTTL, "negative_ttl", time.Millisecond, maxSessionNegativeTTL},
		{&s.Timeout, "timeout", time.Millisecond, maxSessionTimeout},
	} {
		if v.ok(d.p) && (*d.p < d.min || *d.p > d.max) {
			v.errorf(at(d.p), "%s.%s must be between %s and %s, got %s", name, d.key, d.min, d.max, *d.p)
		}
	}
	if v.ok(&s.MaxInFlight) && (s.MaxInFlight < 1 || s.MaxInFlight > maxSessionInFlight) {
		v.errorf(at(&s.MaxInFlight), "%s.max_in_flight must be between 1 and %d, got %d", name, maxSessionInFlight, s.MaxInFlight)
	}
	if v.ok(&s.CacheSize) && (s.CacheSize < 1 || s.CacheSize > maxSessionCacheSize) {
		v.errorf(at(&s.CacheSize), "%s.cache_size must be between 1 and %d, got %d", name, maxSessionCacheSize, s.CacheSize)
	}
}
