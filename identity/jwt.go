// Package identity verifies who is buying, at the edge: a signed token's
// claim (JWT, keys from a JWKS file or URL, or an HMAC secret). It knows no
// HTTP server types: the proxy hands it the raw token bytes and gets back the
// user id, or the reason the token was refused.
package identity

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	jwt "github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
)

// Reason is why a token was refused; OK means verified. Every reason but
// NoKeys is the buyer's (401 UNAUTHENTICATED); NoKeys is the proxy's: it
// holds no keys at all yet (503 AUTH_UNAVAILABLE).
type Reason uint8

// Reasons, named as in metrics (seckill_auth_failures_total{reason}).
const (
	OK           Reason = iota
	Missing             // no token sent
	Malformed           // not three base64url JSON parts, or too long
	Expired             // exp (plus leeway) passed
	NotYetValid         // nbf or iat (minus leeway) in the future
	Issuer              // iss is not the configured issuer
	Audience            // aud does not name the configured audience
	MissingClaim        // exp, iss or aud absent
	Algorithm           // alg not accepted, "none", or not the key's family (confusion)
	UnknownKey          // kid not in the key set, even after a refresh
	BadSignature        // the signature does not verify
	Claim               // the user claim is absent or not a usable id
	NoKeys              // no key set loaded (fetch failing since start)
	NumReasons
)

var reasonNames = [NumReasons]string{
	OK: "ok", Missing: "missing", Malformed: "malformed", Expired: "expired", NotYetValid: "not_yet_valid",
	Issuer: "issuer", Audience: "audience", MissingClaim: "missing_claim", Algorithm: "algorithm",
	UnknownKey: "unknown_kid", BadSignature: "bad_signature", Claim: "claim", NoKeys: "no_keys",
}

// String is the metric label of r.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Defaults of the key refresh (see README "Identity").
const (
	// DefaultKidRefreshEvery bounds refreshes caused by an unknown kid: a
	// flood of made-up kids costs the JWKS server one fetch per period.
	DefaultKidRefreshEvery = 10 * time.Second
	// MinRefresh and MaxRefresh bound Cache-Control max-age.
	MinRefresh = time.Minute
	MaxRefresh = 24 * time.Hour
	// DefaultRefresh is used when the JWKS answer has no max-age.
	DefaultRefresh = 5 * time.Minute
	// DefaultCacheBytes bounds the verified-token cache (ristretto cost).
	DefaultCacheBytes = 64 << 20
	// maxTokenLen refuses absurd tokens before any work.
	maxTokenLen = 8 << 10
	// maxEntryTTL bounds how long a verified token is believed without
	// checking its signature again, whatever its exp says.
	maxEntryTTL  = 10 * time.Minute
	fetchTimeout = 5 * time.Second
	filePoll     = time.Second
)

// Options tune a JWT verifier; zero values take the defaults.
type Options struct {
	Log             *zap.Logger
	Client          *http.Client     // for jwks_url
	Now             func() time.Time // the clock for exp/nbf
	KidRefreshEvery time.Duration
	CacheBytes      int64
	// Check, when set, vets a claim value as a user id and may
	// canonicalise it (the proxy's id rules); a refused one is Claim. It
	// runs once per token, before the verified user is cached.
	Check func(user string) (string, bool)
}

// JWT verifies bearer tokens and caches verified ones. Safe for concurrent use.
type JWT struct {
	cfg     config.JWT
	opt     Options
	log     *zap.Logger
	parser  *jwt.Parser
	algs    map[string]bool
	pointer []string // claim as a JSON pointer, nil for a member name
	hmac    []byte

	keys atomic.Pointer[keySet]

	// The cache maps a keyed hash of the raw token to its user; a second,
	// independently keyed hash in the entry must match too, so a forged
	// token would need a 128-bit collision under secret seeds.
	cache       *ristretto.Cache[uint64, entry]
	seed, check maphash.Seed
	mu          sync.Mutex
	flight      chan struct{} // closed when the refresh in flight ends
	lastKid     time.Time     // last refresh caused by an unknown kid
	fileStamp   string
	// keyGen counts key withdrawals; cacheMu orders a first sight's
	// caching with the clear a withdrawal does (read-held to cache).
	keyGen       atomic.Uint64
	cacheMu      sync.RWMutex
	cancel       context.CancelFunc
	done         chan struct{}
	fetchFailing atomic.Bool
}

// Test hooks (nil outside tests): testHookJWKSRead runs after jwks_file
// is read, testHookBeforeCache after a first sight verified, before it is
// cached.
var testHookJWKSRead, testHookBeforeCache func()

type entry struct {
	check uint64
	user  string
	until int64 // unix ns: exp + leeway, at most maxEntryTTL after caching
}

// NewJWT builds a verifier for c (validated config). It loads the keys once
// before returning (a failing URL only logs: the background refresh keeps
// trying) and starts the background refresh; Close stops it.
func NewJWT(c config.JWT, o Options) (*JWT, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: fetchTimeout}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.KidRefreshEvery <= 0 {
		o.KidRefreshEvery = DefaultKidRefreshEvery
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	v := &JWT{cfg: c, opt: o, log: o.Log, algs: map[string]bool{}, seed: maphash.MakeSeed(), check: maphash.MakeSeed()}
	for _, a := range c.Algorithms {
		if algFamily(a) == "" {
			return nil, fmt.Errorf("jwt: algorithm %q not supported", a)
		}
		v.algs[a] = true
	}
	if strings.HasPrefix(c.Claim, "/") {
		v.pointer = jsonptr.Split(c.Claim)
	}
	// WithValidMethods repeats what keyFor enforces, so an accepted alg
	// is checked twice; "none" is never in the list (config refuses it).
	v.parser = jwt.NewParser(jwt.WithValidMethods(c.Algorithms), jwt.WithIssuer(c.Issuer), jwt.WithAudience(c.Audience),
		jwt.WithLeeway(c.Leeway), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithJSONNumber(),
		jwt.WithTimeFunc(o.Now))
	// Costs are what an entry takes on the heap (entryCost), so MaxCost
	// bounds the memory; ristretto's counters (10 per entry the bound
	// holds, as it advises, about 2 bytes each) come on top.
	cache, err := ristretto.NewCache(&ristretto.Config[uint64, entry]{
		NumCounters: max(10*o.CacheBytes/entryOverhead, 1<<12), MaxCost: o.CacheBytes, BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("jwt: token cache: %w", err)
	}
	v.cache = cache
	if c.HMACSecretEnv != "" {
		if s := c.HMACSecret(); s != "" {
			v.hmac = []byte(s)
		} else {
			v.log.Warn("jwt: $" + c.HMACSecretEnv + " is empty: every buy is refused 503 AUTH_UNAVAILABLE")
		}
	} else {
		v.load()
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel, v.done = cancel, make(chan struct{})
	go v.run(ctx)
	return v, nil
}

// Close stops the background refresh and frees the cache.
func (v *JWT) Close() {
	v.cancel()
	<-v.done
	v.cache.Close()
}

// Ready reports whether the verifier holds keys.
func (v *JWT) Ready() bool { return v.hmac != nil || v.keys.Load() != nil }

// Reload re-reads jwks_file or re-fetches jwks_url now (SIGHUP).
func (v *JWT) Reload() {
	if v.cfg.HMACSecretEnv == "" {
		v.refresh(false)
	}
}

// Verify returns the user id of a bearer token (raw may alias a request
// buffer: nothing of it is kept). After the first sight of a token, until
// its exp, this is two hashes and one cache read, without allocation.
func (v *JWT) Verify(raw []byte) (string, Reason) {
	if len(raw) == 0 {
		return "", Missing
	}
	if len(raw) > maxTokenLen {
		return "", Malformed
	}
	h := maphash.Bytes(v.seed, raw)
	if e, ok := v.cache.Get(h); ok && e.check == maphash.Bytes(v.check, raw) && v.opt.Now().UnixNano() < e.until {
		return e.user, OK
	}
	return v.verify(string(raw), h, raw)
}

// Cached reports whether raw was verified before and is still valid, and
// its user: what Verify answers without a signature check. The proxy asks
// first so that a first sight can be gated (on the buyer's per-IP budget:
// a flood of made-up tokens from one address then costs at most its rate
// in signature checks; an RS256 check is ~30 µs, ES256 ~80).
func (v *JWT) Cached(raw []byte) (string, bool) {
	if len(raw) == 0 || len(raw) > maxTokenLen {
		return "", false
	}
	if e, ok := v.cache.Get(maphash.Bytes(v.seed, raw)); ok && e.check == maphash.Bytes(v.check, raw) && v.opt.Now().UnixNano() < e.until {
		return e.user, true
	}
	return "", false
}

// Checks is how many signature checks verifying raw can cost: one for a
// token naming a kid (or of an HMAC alg, or one the parser refuses before
// any check), the number of keys of its alg's family for a kid-less one
// (keyFor tries them all). The proxy spends a per-IP token per check (red
// team rte: a made-up kid-less token bought as many RSA checks as the
// issuer's set has keys, for one token). It decodes the header only.
func (v *JWT) Checks(raw []byte) int {
	dot := bytes.IndexByte(raw, '.')
	if dot <= 0 {
		return 1
	}
	seg, err := v.parser.DecodeSegment(string(raw[:dot]))
	if err != nil {
		return 1
	}
	var hdr map[string]any
	if json.Unmarshal(seg, &hdr) != nil {
		return 1
	}
	if kid, _ := hdr["kid"].(string); kid != "" {
		return 1
	}
	alg, _ := hdr["alg"].(string)
	fam := algFamily(alg)
	ks := v.keys.Load()
	if !v.algs[alg] || fam == "" || fam == famHMAC || ks == nil {
		return 1
	}
	n := 0
	for _, k := range ks.all {
		if k.family == fam && (k.alg == "" || k.alg == alg) {
			n++
		}
	}
	return max(n, 1)
}

func (v *JWT) verify(s string, h uint64, raw []byte) (string, Reason) {
	if !v.Ready() {
		// Maybe the keys came back since the last background try.
		v.refresh(true)
		if !v.Ready() {
			return "", NoKeys
		}
	}
	gen := v.keyGen.Load() // before keyFor reads the key set
	claims := jwt.MapClaims{}
	if tok, err := v.parser.ParseWithClaims(s, claims, v.keyFor); err != nil {
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) && tok != nil && tok.Method != nil && !v.algs[tok.Method.Alg()] {
			return "", Algorithm // refused by WithValidMethods before keyFor
		}
		return "", classify(err)
	}
	var user string
	var ok bool
	if v.pointer != nil {
		user, ok = jsonptr.Lookup(map[string]any(claims), v.pointer)
	} else {
		user, ok = jsonptr.Lookup(map[string]any(claims), []string{v.cfg.Claim})
	}
	if !ok || user == "" {
		return "", Claim
	}
	if v.opt.Check != nil {
		if user, ok = v.opt.Check(user); !ok {
			return "", Claim
		}
	}
	now := v.opt.Now()
	until := now.Add(maxEntryTTL)
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		if e := exp.Add(v.cfg.Leeway); e.Before(until) {
			until = e
		}
	}
	if testHookBeforeCache != nil {
		testHookBeforeCache()
	}
	if ttl := until.Sub(now); ttl > 0 {
		// Not cached when a key was withdrawn since the check began: its
		// key may be the one withdrawn, and the clear is already done (red
		// team chaos3: such a token was cached after the clear and went on
		// verifying for its life). The answer to this request stands: it
		// is concurrent with the withdrawal.
		v.cacheMu.RLock()
		if v.keyGen.Load() == gen {
			v.cache.SetWithTTL(h, entry{check: maphash.Bytes(v.check, raw), user: user, until: until.UnixNano()}, int64(len(user))+entryOverhead, ttl)
		}
		v.cacheMu.RUnlock()
	}
	return user, OK
}

// entryOverhead is what one cached token costs on the heap besides its
// user id: ristretto's item, its map and expiry buckets, the entry (about
// 290 bytes measured with 150,000 tokens; the red team found 64 here, and
// a 64 MiB bound holding ~160 MiB).
const entryOverhead = 320

// Sentinel errors of keyFor, told apart by classify.
var (
	errAlg        = errors.New("alg not accepted for this key")
	errUnknownKid = errors.New("kid not in the key set")
	errNoKeys     = errors.New("no keys loaded")
)

// keyFor picks the key a token is checked with. The alg must be accepted
// and of the key's family, so an HS256 token is never checked with an RSA
// key's bytes (algorithm confusion), and a kid-less token is tried only
// against keys of its alg's family.
func (v *JWT) keyFor(t *jwt.Token) (any, error) {
	alg, _ := t.Header["alg"].(string)
	fam := algFamily(alg)
	if !v.algs[alg] || fam == "" {
		return nil, errAlg
	}
	if fam == famHMAC {
		if v.hmac == nil {
			return nil, errAlg
		}
		return v.hmac, nil
	}
	ks := v.keys.Load()
	if ks == nil {
		return nil, errNoKeys
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		var set jwt.VerificationKeySet
		for _, k := range ks.all {
			if k.family == fam && (k.alg == "" || k.alg == alg) {
				set.Keys = append(set.Keys, k.key)
			}
		}
		if len(set.Keys) == 0 {
			return nil, errUnknownKid
		}
		return set, nil
	}
	k := ks.byKid[kid]
	if k == nil {
		// Key rotation: the issuer may sign with a key published after
		// our last fetch. Refresh (bounded) and look again.
		v.refresh(true)
		if ks = v.keys.Load(); ks != nil {
			k = ks.byKid[kid]
		}
		if k == nil {
			return nil, errUnknownKid
		}
	}
	if k.family != fam || (k.alg != "" && k.alg != alg) {
		return nil, errAlg
	}
	return k.key, nil
}

// classify maps a jwt error to a Reason. Claims errors are joined, so the
// first matching check wins in this order.
func classify(err error) Reason {
	switch {
	case errors.Is(err, errNoKeys):
		return NoKeys
	case errors.Is(err, errUnknownKid):
		return UnknownKey
	case errors.Is(err, errAlg):
		return Algorithm
	case errors.Is(err, jwt.ErrTokenMalformed):
		return Malformed
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return Algorithm // alg unknown or absent
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return BadSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return Expired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return NotYetValid
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return MissingClaim
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return Issuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return Audience
	}
	return Malformed
}

// refresh loads the keys again. forKid marks a refresh asked for by a
// request (unknown kid, no keys): at most one per KidRefreshEvery. Callers
// arriving while a refresh is in flight wait for it instead of starting
// their own, so a burst of new-kid tokens costs one fetch. It returns
// load's answer, or -1 when it loaded nothing itself.
func (v *JWT) refresh(forKid bool) time.Duration {
	v.mu.Lock()
	if f := v.flight; f != nil {
		v.mu.Unlock()
		<-f
		return -1
	}
	now := time.Now()
	if forKid {
		if !v.lastKid.IsZero() && now.Sub(v.lastKid) < v.opt.KidRefreshEvery {
			v.mu.Unlock()
			return -1
		}
		v.lastKid = now
	}
	f := make(chan struct{})
	v.flight = f
	v.mu.Unlock()
	next := v.load()
	v.mu.Lock()
	v.flight = nil
	v.mu.Unlock()
	close(f)
	return next
}

// load reads the key set from its source once and returns when to look
// again (jwks_url: max-age within bounds; after a failure, sooner).
func (v *JWT) load() time.Duration {
	var data []byte
	next := DefaultRefresh
	var err error
	if v.cfg.JWKSFile != "" {
		// Bounded like a fetched set: a jwks_file replaced by something
		// huge is refused, the last good keys kept (config reads it so).
		// The stamp is taken before the read: a file replaced while it is
		// read then looks changed to the next poll, which reads it again.
		// Taken after, it was the new file's stamp beside the old file's
		// keys, and the poll never read the new one (red team chaos3: a
		// withdrawn key trusted until the next edit or SIGHUP).
		stamp := fileStamp(v.cfg.JWKSFile)
		data, err = config.ReadFileAtMost(v.cfg.JWKSFile, maxJWKSBytes)
		if testHookJWKSRead != nil {
			testHookJWKSRead()
		}
		if err == nil {
			v.mu.Lock()
			v.fileStamp = stamp
			v.mu.Unlock()
		}
	} else {
		data, next, err = v.fetch()
	}
	var ks *keySet
	if err == nil {
		var skipped []string
		ks, skipped, err = parseJWKS(data)
		for _, s := range skipped {
			v.log.Warn("jwks: key skipped", zap.String("why", s))
		}
	}
	if err != nil {
		// Keep the last good set: a JWKS outage must not refuse tokens
		// signed by keys we already trust.
		if !v.fetchFailing.Swap(true) {
			v.log.Error("jwks: load failed; keeping the last good key set", zap.Error(err))
		}
		return 0
	}
	if v.fetchFailing.Swap(false) {
		v.log.Info("jwks: loading again")
	}
	if old := v.keys.Swap(ks); old != nil && withdrawn(old, ks) {
		// A withdrawn key: tokens it signed must not live on in the
		// cache. Clear it; live tokens re-verify once. A first sight
		// checked against the old set and not cached yet must not be
		// cached after the clear: the generation tells it (verify).
		v.cacheMu.Lock()
		v.keyGen.Add(1)
		v.cache.Clear()
		v.cacheMu.Unlock()
	}
	return next
}

// withdrawn reports whether a key of old is not in ks with the same kid,
// alg and key material. Judged by kid alone (red team rtd), a key without
// a kid and a kid published again over new material were never withdrawn,
// and tokens of the old key verified from the cache for up to 10 minutes.
func withdrawn(old, ks *keySet) bool {
	for _, o := range old.all {
		if !ks.holds(o) {
			return true
		}
	}
	return false
}

// holds reports whether ks has k: same kid, alg and public key.
func (ks *keySet) holds(k *pubKey) bool {
	if k.kid != "" {
		n := ks.byKid[k.kid]
		return n != nil && n.alg == k.alg && sameKey(n.key, k.key)
	}
	for _, n := range ks.all {
		if n.kid == "" && n.alg == k.alg && sameKey(n.key, k.key) {
			return true
		}
	}
	return false
}

// sameKey compares public keys (*rsa.PublicKey, *ecdsa.PublicKey and
// ed25519.PublicKey all have Equal).
func sameKey(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// fetch GETs jwks_url; next is the answer's max-age, bounded.
func (v *JWT) fetch() ([]byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := v.opt.Client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("jwks: %s answered %d", v.cfg.JWKSURL, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" && mt != "application/jwk-set+json" {
			return nil, 0, fmt.Errorf("jwks: content type %q", ct)
		}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("jwks: %w", err)
	}
	return data, maxAge(resp.Header.Get("Cache-Control")), nil
}

// maxAge reads max-age from Cache-Control, within [MinRefresh, MaxRefresh];
// DefaultRefresh when absent.
func maxAge(cc string) time.Duration {
	for _, d := range strings.Split(cc, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		if !strings.EqualFold(name, "max-age") {
			continue
		}
		secs, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
		if err != nil || secs < 0 {
			break
		}
		return min(max(time.Duration(min(secs, int64(MaxRefresh/time.Second)))*time.Second, MinRefresh), MaxRefresh)
	}
	return DefaultRefresh
}

// run refreshes in the background: jwks_url by its max-age (retrying a
// failure after 1 s, doubling to MinRefresh); jwks_file by polling its
// size and modification time (SIGHUP reloads through Reload too).
func (v *JWT) run(ctx context.Context) {
	defer close(v.done)
	if v.cfg.HMACSecretEnv != "" {
		return
	}
	wait, backoff := DefaultRefresh, time.Second
	if v.cfg.JWKSFile != "" {
		wait = filePoll
	} else if v.keys.Load() == nil {
		wait = backoff
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch {
		case v.cfg.JWKSFile != "":
			v.mu.Lock()
			seen := v.fileStamp
			v.mu.Unlock()
			if st := fileStamp(v.cfg.JWKSFile); st != "" && st != seen {
				v.refresh(false)
			}
			wait = filePoll
		default:
			next := v.refresh(false)
			if next < 0 {
				wait = time.Second // a request's refresh just ran
				break
			}
			if next == 0 {
				wait, backoff = backoff, min(2*backoff, MinRefresh)
			} else {
				wait, backoff = next, time.Second
			}
		}
		t.Reset(wait)
	}
}

func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return strconv.FormatInt(fi.Size(), 10) + "/" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
}
