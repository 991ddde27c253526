// Package identity tells who is buying when the client's word is not
// enough: a session credential looked up at the shop (session.go). It knows
// no fasthttp: callers hand it copied strings.
package identity

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

var (
	// ErrSessionRefused means the buyer is not signed in: no credential,
	// the shop's whoami answered 401 or 403, or its 200 named no usable
	// user id. The proxy answers 401 UNAUTHENTICATED.
	ErrSessionRefused = errors.New("identity: session not signed in")
	// ErrSessionUnavailable means the look-up could not answer: the shop
	// was unreachable, slow (session timeout), answered another status, or
	// max_in_flight look-ups were already under way. The proxy answers 503
	// AUTH_UNAVAILABLE; nothing is cached, the next buy asks again.
	ErrSessionUnavailable = errors.New("identity: session look-up unavailable")
)

// maxWhoamiBody bounds the whoami answer read for the user id.
const maxWhoamiBody = 64 << 10

// SessionOptions are a Session's collaborators.
type SessionOptions struct {
	// Check vets a user id the shop named, and may canonicalise it; false
	// refuses it (ErrSessionRefused). Default: validUser.
	Check   func(user string) (string, bool)
	Metrics *metrics.Metrics
	Log     *zap.Logger
	// Transport replaces the HTTP transport to the shop (tests).
	Transport http.RoundTripper
}

// Session resolves session credentials to user ids through the shop's
// whoami endpoint, nginx auth_request style. Answers are cached by a hash
// of the credential (never the credential itself): signed-in ones for ttl,
// refusals for negative_ttl, in a bounded ristretto cache. Concurrent
// look-ups of one credential are one call (singleflight); at most
// max_in_flight calls are under way at once.
type Session struct {
	cfg      config.Session
	client   *http.Client
	check    func(string) (string, bool)
	userHdr  string   // user_from header:NAME
	userPtr  []string // user_from json:/pointer
	slots    chan struct{}
	flights  singleflight.Group
	cache    *ristretto.Cache[string, sessionAnswer]
	log      *zap.Logger
	latency  prometheus.Observer
	outcomes [numOutcomes]prometheus.Counter
	hit      prometheus.Counter
	negHit   prometheus.Counter
	miss     prometheus.Counter
}

// sessionAnswer is one cached answer: a user id, or a refusal.
type sessionAnswer struct {
	user    string
	refused bool
}

type outcome uint8

const (
	outOK outcome = iota
	outRefused
	outNoUser
	outError
	outTimeout
	outOverloaded
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "refused", "no_user", "error", "timeout", "overloaded"}

// NewSession builds a Session for c (a validated, defaulted config).
func NewSession(c config.Session, o SessionOptions) (*Session, error) {
	cache, err := ristretto.NewCache(&ristretto.Config[string, sessionAnswer]{
		NumCounters: 10 * int64(c.CacheSize), MaxCost: int64(c.CacheSize), BufferItems: 64,
		// One answer costs 1: the bound is in entries, not in ristretto's
		// guess of an item's size.
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("session cache: %w", err)
	}
	rt := o.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:               nil, // the shop is reached directly, never via HTTP_PROXY
			DialContext:         (&net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        c.MaxInFlight,
			MaxIdleConnsPerHost: c.MaxInFlight,
			MaxConnsPerHost:     c.MaxInFlight,
			IdleConnTimeout:     4 * time.Second, // below the usual 5 s keep-alive of shops
		}
	}
	s := &Session{
		cfg: c,
		client: &http.Client{
			Transport: rt,
			// A redirect (to a login page) is an answer in itself, not one
			// to follow: like nginx auth_request, only 2xx/401/403 count.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		check: o.Check,
		slots: make(chan struct{}, c.MaxInFlight),
		cache: cache,
		log:   o.Log,
	}
	if s.check == nil {
		s.check = validUser
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	kind, arg, _ := strings.Cut(c.UserFrom, ":")
	if kind == "header" {
		s.userHdr = arg
	} else {
		s.userPtr = jsonptr.Split(arg)
	}
	m := o.Metrics
	if m == nil {
		m = metrics.New()
	}
	for i := range s.outcomes {
		s.outcomes[i] = m.SessionLookups.WithLabelValues(outcomeNames[i])
	}
	s.hit = m.SessionCache.WithLabelValues("hit")
	s.negHit = m.SessionCache.WithLabelValues("negative_hit")
	s.miss = m.SessionCache.WithLabelValues("miss")
	s.latency = m.SessionLatency
	return s, nil
}

// Config is the configuration s was built with (a reload with the same one
// keeps s and its cache).
func (s *Session) Config() config.Session { return s.cfg }

// Close stops the cache's goroutines and idle connections. Look-ups after
// Close miss the cache and still work.
func (s *Session) Close() {
	s.cache.Close()
	s.client.CloseIdleConnections()
}

// Cached answers from memory only: ok is false when a look-up is needed.
func (s *Session) Cached(credential string) (user string, err error, ok bool) {
	if credential == "" {
		return "", ErrSessionRefused, true
	}
	a, ok := s.cache.Get(cacheKey(credential))
	if !ok {
		return "", nil, false
	}
	if a.refused {
		s.negHit.Inc()
		return "", ErrSessionRefused, true
	}
	s.hit.Inc()
	return a.user, nil, true
}

// Identify returns the user id the shop's whoami names for credential,
// from the cache or by one call shared by every concurrent caller with the
// same credential. ctx only bounds the wait: the call itself runs under
// the session timeout, detached, so one impatient caller does not fail
// the others sharing it.
func (s *Session) Identify(ctx context.Context, credential string) (string, error) {
	if u, err, ok := s.Cached(credential); ok {
		return u, err
	}
	s.miss.Inc()
	key := cacheKey(credential)
	ch := s.flights.DoChan(key, func() (any, error) {
		// A flight that just ended may have cached the answer between
		// this caller's miss and its joining: take it rather than ask.
		if a, ok := s.cache.Get(key); ok {
			return a, nil
		}
		return s.lookup(key, credential)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		a := r.Val.(sessionAnswer)
		if a.refused {
			return "", ErrSessionRefused
		}
		return a.user, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%w: %w", ErrSessionUnavailable, ctx.Err())
	}
}

// lookup asks the shop, within a free slot, and caches a definite answer
// before returning it, so callers arriving after the flight find it.
func (s *Session) lookup(key, credential string) (sessionAnswer, error) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.outcomes[outOverloaded].Inc()
		return sessionAnswer{}, ErrSessionUnavailable
	}
	t0 := time.Now()
	a, out, err := s.call(credential)
	s.latency.Observe(time.Since(t0).Seconds())
	s.outcomes[out].Inc()
	if err != nil {
		// Counted above; the detail is for whoever debugs the shop's side.
		s.log.Debug("session look-up failed", zap.Error(err))
		return sessionAnswer{}, err
	}
	ttl := s.cfg.TTL
	if a.refused {
		ttl = s.cfg.NegativeTTL
	}
	// Set is buffered; Wait makes the answer visible before the flight
	// ends. The call it follows took milliseconds, this takes microseconds.
	if s.cache.SetWithTTL(key, a, 1, ttl) {
		s.cache.Wait()
	}
	return a, nil
}

// call makes one whoami request. A 2xx with a usable user id signs the
// buyer in; 401 and 403 (and a 2xx without a user id) refuse; anything
// else, or no answer within the timeout, is unavailable.
func (s *Session) call(credential string) (sessionAnswer, outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return sessionAnswer{}, outError, fmt.Errorf("%w: %w", ErrSessionUnavailable, err)
	}
	if s.cfg.Cookie != "" {
		// As the buyer sent it: the value is the shop's own cookie value.
		req.Header.Set("Cookie", s.cfg.Cookie+"="+credential)
	} else {
		req.Header.Set(s.cfg.Header, credential)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return sessionAnswer{}, outTimeout, fmt.Errorf("%w: %w", ErrSessionUnavailable, err)
		}
		return sessionAnswer{}, outError, fmt.Errorf("%w: %w", ErrSessionUnavailable, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWhoamiBody))
		return sessionAnswer{refused: true}, outRefused, nil
	case resp.StatusCode/100 != 2:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWhoamiBody))
		return sessionAnswer{}, outError, fmt.Errorf("%w: whoami answered %d", ErrSessionUnavailable, resp.StatusCode)
	}
	var user string
	if s.userHdr != "" {
		user = resp.Header.Get(s.userHdr)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWhoamiBody))
	} else {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxWhoamiBody))
		if err != nil {
			out := outError
			if errors.Is(err, context.DeadlineExceeded) {
				out = outTimeout
			}
			return sessionAnswer{}, out, fmt.Errorf("%w: read whoami: %w", ErrSessionUnavailable, err)
		}
		if v, err := jsonptr.Decode(body); err == nil {
			user, _ = jsonptr.Lookup(v, s.userPtr)
		}
	}
	u, ok := s.check(user)
	if !ok {
		return sessionAnswer{refused: true}, outNoUser, nil
	}
	return sessionAnswer{user: u}, outOK, nil
}

// cacheKey is the cache's (and the flights') key for a credential: its
// SHA-256, so the cache holds no usable session secret and a key's size
// does not depend on what a client sends.
func cacheKey(credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return string(sum[:])
}

// validUser is the default user id check, the proxy's own rule for ids:
// 1..128 bytes of valid UTF-8, no control characters, no '|' (the
// separator of reservation records).
func validUser(u string) (string, bool) {
	if len(u) == 0 || len(u) > 128 || !utf8.ValidString(u) {
		return "", false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c < 0x20 || c == 0x7f || c == '|' {
			return "", false
		}
	}
	return u, true
}
