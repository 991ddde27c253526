package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/store"

	jwt "github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// Red team chaos3 (2026-12-07, docs/decisions.md §57): what §53 left out
// of TestChaos's mix, as two more bits of chaosMixFor (and, on the
// cluster, restarts from AOF: redistest.StartClusterWith):
//
//   - session (32 with 128): as jwt below, but the buyer is who the shop's
//     whoami says their session cookie belongs to (identity.user.session;
//     the chaos shop's /internal/whoami, answering 503, 502, slowly or
//     with a reset in its bad moods: AUTH_UNAVAILABLE, asked again); bad
//     sessions (never signed in, signed out) are 401;
//   - jwt (32): buyers are known by a verified token (identity.user.jwt,
//     keys from a JWKS file, case_fold). Every click is a new device (its
//     own token, X-Device-Id, a spoofed X-User-Id the proxy must ignore)
//     and spells the user id its own way (u7, U7, " U7 "): one verified
//     user. Some clicks first send a bad token (expired, forged, another
//     audience, alg none, a key never published): 401, nothing held, no
//     token. Mid-sale the operator rotates the key as README says (publish
//     k2 beside k1, sign with k2 once every instance has it, then withdraw
//     k1): a valid token is never refused for its key, a k1 token is
//     refused once the withdrawal is read (the file is polled every
//     second). Checked: every record and every shop order under a
//     canonical verified id, the shop's X-Seckill-User is the claim of the
//     token that bought, nobody above the limit per verified user, nothing
//     held by a refused token, no forged user anywhere.
//   - reckill (64): serve's background reconciler (backgroundReconciler:
//     a repairing pass on a ticker, skipped when another instance holds
//     the lease) runs in every instance, every 200 ms, with a lease TTL of
//     1 s (Reconciler.WithLeaseTTL; serve's is 2 minutes), and the
//     instance holding the lease is killed mid-pass (its lease left in
//     Redis, nothing released). Checked: the lease was still the dead
//     holder's after the kill; another instance took it over with a
//     greater fencing token, no earlier than the dead lease expired and
//     within a few seconds of it; and every invariant of the run (stock
//     adds up after the final repair, which waits for the lease as the
//     CLI does).

const (
	chaosJWTIss = "https://auth.chaos"
	chaosJWTAud = "shop"
	// chaosLeaseTTL is the background reconcilers' lease TTL in the
	// reckill mix; chaosRecEvery their pass interval.
	chaosLeaseTTL = time.Second
	chaosRecEvery = 200 * time.Millisecond
)

// chaosIdent is the jwt mix's identity provider: the keys, the JWKS file
// the instances read, and every token it made (for the checker).
type chaosIdent struct {
	t       *testing.T
	session bool // the session mix: the shop's whoami names the buyer
	file    string
	k1      *jwttest.Key
	k2      *jwttest.Key
	k3      *jwttest.Key // never published

	mu          sync.Mutex
	rng         *rand.Rand
	cur         *jwttest.Key // what new tokens are signed with
	k2Published time.Time    // k2 in the file from then
	withdrawn   time.Time    // k1 out of the file from then
	last        map[string]string

	smu      sync.Mutex
	sessions map[string]string // the session mix: sid -> the user as the shop spells it ("" signed out)
}

func newChaosIdent(t *testing.T, seed int64) *chaosIdent {
	id := &chaosIdent{t: t, file: filepath.Join(t.TempDir(), "jwks.json"),
		k1: jwttest.EC(t, "k1"), k2: jwttest.EC(t, "k2"), k3: jwttest.EC(t, "k3"),
		rng: rand.New(rand.NewSource(seed ^ 0x1d)), last: map[string]string{}, sessions: map[string]string{}}
	id.cur = id.k1
	id.publish(id.k1)
	return id
}

// userSource is identity.user for the harness config.
func (id *chaosIdent) userSource(shopURL string) string {
	if id.session {
		// timeout 300 ms (the default): the shop's slow mode is slower.
		return fmt.Sprintf("{ session: { cookie: sid, url: %q, user_from: \"json:/user_id\", ttl: 30s, negative_ttl: 2s }, case_fold: true }",
			strings.TrimSuffix(shopURL, "/")+"/internal/whoami")
	}
	return fmt.Sprintf("{ jwt: { jwks_file: %q, issuer: %q, audience: %q, algorithms: [ES256] }, case_fold: true }",
		id.file, chaosJWTIss, chaosJWTAud)
}

// publish writes the key set as an operator would: a new file renamed
// over the old one.
func (id *chaosIdent) publish(keys ...*jwttest.Key) {
	tmp := id.file + ".tmp"
	if err := os.WriteFile(tmp, jwttest.JWKS(keys...), 0o600); err != nil {
		id.t.Errorf("jwks: %v", err)
		return
	}
	if err := os.Rename(tmp, id.file); err != nil {
		id.t.Errorf("jwks: %v", err)
	}
}

// chaosCred is the credential of one request.
type chaosCred struct {
	tok, kid string
	sid      string // the session mix: the session cookie
	bad      string // "" a valid token; else what is wrong with it
	dev      string
	spoof    string // the X-User-Id sent beside it (ignored by the proxy)
}

func (id *chaosIdent) claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": chaosJWTIss, "aud": chaosJWTAud, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
		"jti": fmt.Sprintf("%x", id.rng.Int63())}
}

// spelling is one way a device writes user (u7): case and white space
// differ, case_fold and the trim make them one id.
func (id *chaosIdent) spelling(user string) string {
	switch id.rng.Intn(4) {
	case 1:
		return strings.ToUpper(user)
	case 2:
		return " " + strings.ToUpper(user[:1]) + user[1:] + " "
	}
	return user
}

// cred is a new device's valid token for user, or (one click in six) the
// token the user's previous device had (maybe signed by a key withdrawn
// since: refused, and the device signs in again).
func (id *chaosIdent) cred(user string, fresh bool) chaosCred {
	id.mu.Lock()
	defer id.mu.Unlock()
	c := chaosCred{dev: fmt.Sprintf("dev-%x", id.rng.Int63()), spoof: fmt.Sprintf("spoof-%d", id.rng.Intn(1000))}
	if id.session {
		// The user's device keeps its session; now and then (one click in
		// six) another device signs in: a session of its own, the shop's
		// whoami spelling the user its own way.
		if old, ok := id.last[user]; ok && id.rng.Intn(6) != 0 {
			c.sid = old
			return c
		}
		c.sid = fmt.Sprintf("s%x", id.rng.Int63())
		id.last[user] = c.sid
		id.smu.Lock()
		id.sessions[c.sid] = id.spelling(user)
		id.smu.Unlock()
		return c
	}
	if old, ok := id.last[user]; ok && !fresh && id.rng.Intn(6) == 0 {
		c.tok, c.kid = old, chaosKid(old)
		return c
	}
	c.tok = id.cur.Sign(id.t, "ES256", id.claims(id.spelling(user)))
	c.kid = id.cur.Kid
	id.last[user] = c.tok
	return c
}

// badCred is a token the proxy must refuse (401), or "" for none (three
// clicks in four).
func (id *chaosIdent) badCred(user string) chaosCred {
	id.mu.Lock()
	defer id.mu.Unlock()
	c := chaosCred{dev: fmt.Sprintf("dev-%x", id.rng.Int63()), spoof: user}
	if id.session {
		switch id.rng.Intn(20) {
		case 0, 1, 2:
			c.sid, c.bad = fmt.Sprintf("s%x", id.rng.Int63()), "unknown_session" // never signed in
		case 3, 4:
			c.sid, c.bad = fmt.Sprintf("s%x", id.rng.Int63()), "signed_out"
			id.smu.Lock()
			id.sessions[c.sid] = ""
			id.smu.Unlock()
		default:
			return chaosCred{}
		}
		return c
	}
	switch id.rng.Intn(20) {
	case 0, 1:
		cl := id.claims(id.spelling(user))
		cl["exp"], cl["iat"] = time.Now().Add(-10*time.Minute).Unix(), time.Now().Add(-time.Hour).Unix()
		c.tok, c.bad = id.cur.Sign(id.t, "ES256", cl), "expired"
	case 2, 3:
		c.tok, c.bad = jwttest.Tamper(id.cur.Sign(id.t, "ES256", id.claims(user))), "forged" // sub becomes mallory
	case 4:
		cl := id.claims(user)
		cl["aud"] = "another-shop"
		c.tok, c.bad = id.cur.Sign(id.t, "ES256", cl), "audience"
	case 5:
		c.tok, c.bad = jwttest.None(id.t, id.claims(user)), "none"
	case 6:
		c.tok, c.bad = id.k3.Sign(id.t, "ES256", id.claims(user)), "unknown_key"
	default:
		return chaosCred{}
	}
	c.kid = chaosKid(c.tok)
	return c
}

// whoami is the shop's session look-up (identity.user.session.url): the
// user a session belongs to, 401 for one unknown or signed out. In the
// shop's bad moods it answers as its buys do: 503, 502, slower than the
// proxy's look-up timeout, or a reset connection (each AUTH_UNAVAILABLE:
// nothing held, the buyer asks again).
func (id *chaosIdent) whoami(s *chaosShop, w http.ResponseWriter, r *http.Request) {
	switch s.mode.Load() {
	case shop503:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case shop502:
		w.WriteHeader(http.StatusBadGateway)
		return
	case shopSlow:
		time.Sleep(time.Duration(s.latency.Load()))
	case shopResetBefore, shopResetAfter:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	u := ""
	if ck, err := r.Cookie("sid"); err == nil {
		u = id.sessionUser(ck.Value)
	}
	if u == "" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"user_id": u})
}

// sessionUser is the user session sid belongs to, as the shop spells it
// ("" none).
func (id *chaosIdent) sessionUser(sid string) string {
	id.smu.Lock()
	defer id.smu.Unlock()
	return id.sessions[sid]
}

// wonWith is the session cookie of the buy that made reservation id of
// act for user: the one the first-sent answer carrying its token as the
// buy's own (WIN, QUEUED, UPSTREAM_*; not PENDING or ALREADY_PURCHASED,
// which name a reservation another click made, perhaps with another
// session of the user's) names; for one no answer names (a late reservation, its buyer told STORE_UNAVAILABLE or
// nothing), the cookie of the user's one such click in flight when the
// reservation was stamped (createdMs), if only one was. "" when unknown.
// A win sets that session's holder alias (decisions §62), so an instance
// that never looked it up still does not answer it SOLD_OUT beside the
// unit.
func (c *chaosEnv) wonWith(answers []chaosAnswer, act, user, id string, createdMs int64) string {
	if c.ident == nil || !c.ident.session {
		return ""
	}
	sid, n := "", 0
	var own *chaosAnswer
	for i, b := range answers {
		if b.act != act || b.user != user || b.sid == "" {
			continue
		}
		if b.token != "" && (b.win || b.code == "QUEUED" || strings.HasPrefix(b.code, "UPSTREAM_")) && (own == nil || b.sent.Before(own.sent)) {
			if tk, err := store.ParseToken(b.token); err == nil && tk.ID == id {
				own = &answers[i]
			}
		}
		if (b.err != nil || b.code == "STORE_UNAVAILABLE") && b.sent.UnixMilli() <= createdMs && createdMs <= b.got.UnixMilli()+5 && b.sid != sid {
			sid, n = b.sid, n+1
		}
	}
	switch {
	case own != nil:
		return own.sid
	case n == 1:
		return sid
	}
	return ""
}

// beforeLookup says whether a (a SOLD_OUT in the session mix) came from
// an instance that had not looked up its session: no answer of that
// instance (gen) for the session that only a looked-up buyer gets (WIN, a
// replay, QUEUED, PENDING, ALREADY_PURCHASED, UPSTREAM_*) came before it,
// within the session ttl (30 s). Such a buyer is not known on a sold-out
// SKU: the look-up is not spent on it (README, Session identity), and the
// holders check has no user (§57).
func (c *chaosEnv) beforeLookup(answers []chaosAnswer, a chaosAnswer) bool {
	if c.ident == nil || !c.ident.session || a.sid == "" {
		return false
	}
	for _, b := range answers {
		if b.sid != a.sid || b.gen != a.gen || !b.got.Before(a.sent) || a.sent.Sub(b.got) > 30*time.Second {
			continue
		}
		switch {
		case b.win, b.code == "QUEUED", b.code == "PENDING", b.code == "ALREADY_PURCHASED", strings.HasPrefix(b.code, "UPSTREAM_"):
			return false
		}
	}
	return true
}

// chaosKid is a token's kid header.
func chaosKid(tok string) string {
	h, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return ""
	}
	var hdr struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(raw, &hdr)
	return hdr.Kid
}

// chaosClaim is the canonical user a token claims (sub, trimmed and case
// folded as case_fold does for these ASCII ids), unverified: for the shop
// to compare with X-Seckill-User.
func chaosClaim(authz string) string {
	tok := strings.TrimSpace(strings.TrimPrefix(authz, "Bearer "))
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Sub string `json:"sub"`
	}
	_ = json.Unmarshal(raw, &c)
	return strings.ToLower(strings.TrimSpace(c.Sub))
}

// rotate is the operator's key rotation as README says it: publish k2
// beside k1, sign with k2 once every instance has read it (the file is
// polled every second), later withdraw k1.
func (id *chaosIdent) rotate(c *chaosEnv, gap time.Duration) {
	id.publish(id.k1, id.k2)
	id.mu.Lock()
	id.k2Published = time.Now()
	id.mu.Unlock()
	c.logf("jwks: k2 published beside k1")
	time.Sleep(1500 * time.Millisecond)
	id.mu.Lock()
	id.cur = id.k2
	id.mu.Unlock()
	c.logf("jwks: new tokens signed with k2")
	time.Sleep(gap)
	id.publish(id.k2)
	id.mu.Lock()
	id.withdrawn = time.Now()
	id.mu.Unlock()
	c.logf("jwks: k1 withdrawn")
}

// identitySteps is the jwt mix's lane: one rotation.
func (c *chaosEnv) identitySteps(chaosFor time.Duration) []chaosStep {
	if c.ident == nil || c.ident.session {
		return nil
	}
	rng := rand.New(rand.NewSource(c.seed ^ 0x7e1))
	at := time.Duration(rng.Int63n(int64(chaosFor / 4)))
	gap := time.Duration(300+rng.Intn(1200)) * time.Millisecond
	return []chaosStep{{at, func() { c.ident.rotate(c, gap) }}}
}

var chaosCanonUser = regexp.MustCompile(`^u[0-9]+$`)

// chaosBeforeLookup are the answers a bad session may get besides 401: a
// failed look-up, and what admission answers from memory before looking
// the session up (SOLD_OUT, or STORE_UNAVAILABLE when units are in
// transit, §54).
var chaosBeforeLookup = map[string]int{"AUTH_UNAVAILABLE": 503, "SOLD_OUT": 410, "PAUSED": 503,
	"NOT_STARTED": 403, "NOT_READY": 503, "STORE_UNAVAILABLE": 503}

// checkIdentity is the jwt mix's part of check: answers to refused tokens,
// valid tokens never refused for their key, a withdrawn key refused, and
// every record and order under a canonical verified id.
func (c *chaosEnv) checkIdentity(answers []chaosAnswer, recs map[string]map[string]rtRecord) {
	t := c.t
	t.Helper()
	id := c.ident
	id.mu.Lock()
	published, withdrawn := id.k2Published, id.withdrawn
	id.mu.Unlock()
	refused := map[string]int{}
	withdrawnRefused, withdrawnAfter := 0, 0
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		switch {
		case a.bad != "":
			refused[a.bad+"/"+a.code]++
			if id.session && a.token == "" && chaosBeforeLookup[a.code] == a.status {
				// The look-up failed (the shop's bad mood), or admission
				// refused the buy from memory before any look-up (README,
				// Session identity: not started, paused, sold out...).
				// Nothing held, no token either way.
				continue
			}
			if a.code != "UNAUTHENTICATED" || a.status != 401 || a.token != "" {
				t.Errorf("%s: %s's %s token answered %d %s (token %q), want 401 UNAUTHENTICATED and nothing", a.act, a.user, a.bad, a.status, a.code, a.token)
			}
		case a.code == "UNAUTHENTICATED":
			if a.token != "" {
				t.Errorf("%s: %s: a 401 with a token %s", a.act, a.user, a.token)
			}
			if a.kid == "k1" && !withdrawn.IsZero() && !a.got.Before(withdrawn) {
				withdrawnRefused++
				continue
			}
			t.Errorf("%s: %s's valid token (kid %s, sent %s) refused: 401 (k2 published %s, k1 withdrawn %s)", a.act, a.user, a.kid,
				a.sent.Format("15:04:05.000"), published.Format("15:04:05.000"), withdrawn.Format("15:04:05.000"))
		case a.kid == "k1" && !withdrawn.IsZero() && a.sent.After(withdrawn.Add(3*time.Second)):
			// The file is polled every second; a withdrawn key clears the
			// token cache (README "Keys from a file").
			withdrawnAfter++
			t.Errorf("%s: %s's k1 token answered %d %s at %s, %v after k1 was withdrawn", a.act, a.user, a.status, a.code,
				a.got.Format("15:04:05.000"), a.sent.Sub(withdrawn).Round(time.Millisecond))
		case a.code == "AUTH_UNAVAILABLE" && id.session:
			refused["valid/AUTH_UNAVAILABLE"]++
			if a.status != 503 || a.token != "" {
				t.Errorf("%s: %s: AUTH_UNAVAILABLE %d with token %q", a.act, a.user, a.status, a.token)
			}
		case a.code == "AUTH_UNAVAILABLE":
			t.Errorf("%s: %s: 503 AUTH_UNAVAILABLE with a key file in place", a.act, a.user)
		}
	}
	if id.session {
		t.Logf("session: look-ups by answer %v", chaosSorted(refused))
	} else {
		t.Logf("jwt: k2 published %s, k1 withdrawn %s; bad tokens by answer %v; k1 tokens refused after the withdrawal %d",
			published.Format("15:04:05.000"), withdrawn.Format("15:04:05.000"), chaosSorted(refused), withdrawnRefused)
	}
	for act, rs := range recs {
		for field, r := range rs {
			if !chaosCanonUser.MatchString(r.User) {
				t.Errorf("%s: reservation %s is %q's: not a canonical verified id (spellings fold to u<n>; mallory is forged)", act, field, r.User)
			}
		}
	}
	for tok, s := range c.shop.sends() {
		if !chaosCanonUser.MatchString(s.user) {
			t.Errorf("token %s sent to the shop for user %q: not a canonical verified id", tok, s.user)
		}
		if s.claim != "" && s.claim != s.user {
			t.Errorf("token %s sent to the shop as %q with a bearer token claiming %q", tok, s.user, s.claim)
		}
	}
}

// chaosPass is one background reconcile pass.
type chaosPass struct {
	gen        int
	holder     string
	start, end time.Time
	fence      int64
	err        error
}

// leaseKill is the lease holder killed mid-pass.
type chaosLeaseKill struct {
	gen    int
	holder string
	at     time.Time
	fence  int64
	expiry time.Time // the dead lease's, no later than Redis's (its PTTL read after the kill)
}

// startRec runs serve's backgroundReconciler in instance in (the reckill
// mix): a repairing pass every chaosRecEvery over the activities the
// instance's config names, skipped while another holds the lease or the
// clock guard objects, its lease TTL chaosLeaseTTL. A kill cuts it with
// the instance (chaosInst.kill).
func (c *chaosEnv) startRec(in *chaosInst) {
	if !c.mix.reckill {
		return
	}
	rec := reservation.NewReconciler(in.Store, in.Metrics, zap.NewNop()).
		WithExceptionsMax(in.Cfg.Reconcile.ExceptionsMax).WithLeaseTTL(chaosLeaseTTL).WithClockCheck(in.Pipeline.ClockProblem)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	in.mu.Lock()
	in.rec, in.recStop, in.recDone, in.cur = rec, cancel, done, in.Cfg
	in.mu.Unlock()
	go func() {
		defer close(done)
		tk := time.NewTicker(chaosRecEvery)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			in.mu.Lock()
			cfg := in.cur
			in.mu.Unlock()
			acts := make([]*config.Activity, 0, len(cfg.Activities))
			for i := range cfg.Activities {
				acts = append(acts, cfg.Activities[i].ShadowOrSelf())
			}
			p := chaosPass{gen: in.gen, holder: rec.Holder(), start: time.Now()}
			in.inPass.Store(true)
			rep, err := rec.Run(ctx, acts, true, time.Now())
			in.inPass.Store(false)
			p.end, p.fence, p.err = time.Now(), rep.Fence, err
			if ctx.Err() == nil && err == nil {
				_, _ = rec.Dropped(ctx, acts, time.Now())
			}
			if ctx.Err() != nil && p.err == nil {
				p.err = ctx.Err()
			}
			c.mu.Lock()
			c.passes = append(c.passes, p)
			c.mu.Unlock()
		}
	}()
	c.t.Cleanup(in.stopRec)
}

// stopRec stops in's background reconciler and waits for it.
func (in *chaosInst) stopRec() {
	in.mu.Lock()
	stop, done := in.recStop, in.recDone
	in.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// setCur is the config a reload gave in (its background reconciler reads
// its activities from it, as serve's reads current()).
func (in *chaosInst) setCur(cfg *config.Config) {
	in.mu.Lock()
	in.cur = cfg
	in.mu.Unlock()
}

func (c *chaosEnv) leaseKey() string {
	return c.cfg0.Redis.KeyPrefix + ":{lease}:" + reservation.LeaseName
}

// leaseNow is the lease's holder and fence as Redis has them, and when it
// expires: no earlier than its PTTL after the moment before the reads.
func (c *chaosEnv) leaseNow() (holder string, fence int64, expiry time.Time, ok bool) {
	before := time.Now()
	v, err := c.do()("GET", c.leaseKey())
	if err != nil || v == "" {
		return "", 0, time.Time{}, false
	}
	i := strings.LastIndexByte(v, '|')
	if i < 0 {
		return "", 0, time.Time{}, false
	}
	_, _ = fmt.Sscan(v[i+1:], &fence)
	ms, err := c.do()("PTTL", c.leaseKey())
	var n int64
	if err == nil {
		_, _ = fmt.Sscan(ms, &n)
	}
	if n <= 0 {
		return "", 0, time.Time{}, false // gone between the two reads (or unreadable)
	}
	return v[:i], fence, before.Add(time.Duration(n) * time.Millisecond), true
}

// leaseKillSteps is the reckill mix's lane: once, the instance holding the
// reconciler lease is killed while its pass runs (tried for up to 3 s,
// polling every millisecond), and replaced as a kill's is.
func (c *chaosEnv) leaseKillSteps(chaosFor time.Duration) []chaosStep {
	if !c.mix.reckill {
		return nil
	}
	rng := rand.New(rand.NewSource(c.seed ^ 0x1ea5e))
	at := 600*time.Millisecond + time.Duration(rng.Int63n(int64(chaosFor/2)))
	gap := time.Duration(100+rng.Intn(700)) * time.Millisecond
	return []chaosStep{{at, func() { c.killLeaseHolder(gap) }}}
}

func (c *chaosEnv) killLeaseHolder(gap time.Duration) {
	deadline := time.Now().Add(3 * time.Second)
	tries := 0
poll:
	for time.Now().Before(deadline) {
		holder, fence, _, ok := c.leaseNow()
		if ok {
			for slot := 0; slot < 2; slot++ {
				in := c.inst(slot)
				if _, dead := in.killedAt(); dead || !in.inPass.Load() {
					continue
				}
				in.mu.Lock()
				rec := in.rec
				in.mu.Unlock()
				if rec == nil || rec.Holder() != holder {
					continue
				}
				c.bg.Add(1)
				done := make(chan struct{})
				go func() { defer c.bg.Done(); c.killAndReplaceThen(slot, gap, func() { close(done) }) }()
				<-done // killed (its successor comes gap later)
				at, _ := in.killedAt()
				h2, f2, expiry, still := c.leaseNow()
				k := chaosLeaseKill{gen: in.gen, holder: holder, at: at, fence: fence}
				switch {
				case still && h2 == holder && f2 == fence:
					k.expiry = expiry
					c.logf("killed instance %d mid-pass holding the reconciler lease (fence %d, until %s)", in.gen, fence, expiry.Format("15:04:05.000"))
				default:
					// Its pass ended (and let go) between the read and
					// the kill: a kill all the same, not the one asked for.
					c.logf("killed instance %d, but its lease was gone already (now %q %d)", in.gen, h2, f2)
					c.mu.Lock()
					c.leaseMisses++
					c.mu.Unlock()
					if tries++; tries == 3 {
						return
					}
					time.Sleep(gap + 200*time.Millisecond)
					continue poll
				}
				c.mu.Lock()
				c.leaseKills = append(c.leaseKills, k)
				c.mu.Unlock()
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	c.logf("no reconcile pass caught holding the lease in 3 s")
}

// checkLeaseKills waits for the background reconcilers to take over from
// each lease holder killed mid-pass, and checks when and with which fence.
func (c *chaosEnv) checkLeaseKills() {
	t := c.t
	t.Helper()
	c.mu.Lock()
	kills := append([]chaosLeaseKill(nil), c.leaseKills...)
	c.mu.Unlock()
	takeover := func(k chaosLeaseKill) (chaosPass, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.passes {
			if p.err == nil && p.holder != k.holder && p.fence > k.fence && p.end.After(k.at) {
				return p, true
			}
		}
		return chaosPass{}, false
	}
	for _, k := range kills {
		var p chaosPass
		ok := false
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if p, ok = takeover(k); ok {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ok {
			t.Errorf("reconciler lease of killed instance %d (fence %d, expiring %s): no other instance's background pass took over",
				k.gen, k.fence, k.expiry.Format("15:04:05.000"))
			continue
		}
		t.Logf("reconciler lease of killed instance %d (fence %d, killed %s, expiring %s): taken over by instance %d (fence %d), pass %s..%s",
			k.gen, k.fence, k.at.Format("15:04:05.000"), k.expiry.Format("15:04:05.000"), p.gen, p.fence,
			p.start.Format("15:04:05.000"), p.end.Format("15:04:05.000"))
		if p.end.Before(k.expiry) { // it took the lease before the end of its pass
			if at, ok := c.mon.leaseLetGo(k.holder, k.at); ok && c.relayless() {
				// The killed instance's let-go reached Redis after its
				// kill: on a cluster the client dials the nodes past any
				// relay and a redial may outlive the kill's Closes (§53:
				// the cluster kill is not airtight). Not what a SIGKILL
				// does; nothing of the product's.
				t.Logf("reconciler lease of killed instance %d released by its own let-go at %s, after its kill (the cluster kill is not airtight, §53): taken over at once",
					k.gen, at.Format("15:04:05.000000"))
				continue
			}
			t.Errorf("reconciler lease of killed instance %d taken over by instance %d before it expired (pass done %s, lease until %s)",
				k.gen, p.gen, p.end.Format("15:04:05.000"), k.expiry.Format("15:04:05.000"))
		}
		if late := p.end.Sub(k.expiry) - c.failoverOverlap(k.expiry, p.end); late > 6*time.Second {
			t.Errorf("reconciler lease of killed instance %d taken over %v after it expired", k.gen, late.Round(time.Millisecond))
		}
	}
	c.mu.Lock()
	byFence := map[int64]chaosPass{}
	errs := map[string]int{}
	n := 0
	for _, p := range c.passes {
		switch {
		case p.err == nil:
			n++
			// Not even across a failover that lost the lease counter's
			// last increment: a token is never below Redis' clock in ms
			// (lease.lua, §60).
			if h, ok := byFence[p.fence]; ok && h.holder != p.holder {
				t.Errorf("fence %d held by two reconcilers: %s (pass %s..%s) and %s (pass %s..%s)", p.fence, h.holder, h.start.Format("15:04:05.000"), h.end.Format("15:04:05.000"),
					p.holder, p.start.Format("15:04:05.000"), p.end.Format("15:04:05.000"))
			}
			byFence[p.fence] = p
		default:
			e := p.err.Error()
			if len(e) > 60 {
				e = e[:60]
			}
			errs[e]++
		}
	}
	c.mu.Unlock()
	t.Logf("background reconcile passes: %d repaired, %d fences; others %v; lease holders killed mid-pass %d (kills that found the lease let go already %d)",
		n, len(byFence), chaosSorted(errs), len(kills), c.leaseMisses)
}

// leaseLetGo is when Redis ran a release of the reconciler lease by holder
// (ReleaseLease's compare-and-delete names it) after after, if it did.
func (m *chaosMonitor) leaseLetGo(holder string, after time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.lease {
		if l.at.After(after) && strings.Contains(l.line, "DEL") && strings.Contains(l.line, "\""+holder+"\"") {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// stopRecs stops every live instance's background reconciler (before the
// final repair, which runs as the operator's CLI).
func (c *chaosEnv) stopRecs() {
	c.pmu.Lock()
	insts := append([]*chaosInst(nil), c.all...)
	c.pmu.Unlock()
	for _, in := range insts {
		in.stopRec()
	}
}
