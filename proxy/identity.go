package proxy

import (
	"bytes"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/internal/jsonptr"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// jwtUser is stage 1's identity when identity.user.jwt is configured: it
// refuses a buy whose bearer token is missing or does not verify (401
// UNAUTHENTICATED), or, with no keys loaded at all, 503 AUTH_UNAVAILABLE.
// Cost: a cached token is two hashes and one cache read (no allocation);
// a token seen first is one signature check.
type jwtUser struct {
	v        *identity.JWT
	cfg      config.JWT
	canon    identity.Canon // the user source's case_fold / numeric
	failures [identity.NumReasons]prometheus.Counter
	// authorization: the token is read from the Authorization header
	// itself (headerOnce already refuses a second line of it).
	authorization bool
}

// userCheck vets a user id that a verified source (a JWT claim, the
// shop's whoami) names: canonicalised like every identity source (trim,
// NFC, the source's case_fold / numeric), then the proxy's id rules. Both
// stages run it once per credential, before caching the answer.
func userCheck(canon identity.Canon) func(string) (string, bool) {
	return func(u string) (string, bool) {
		if len(u) > 4*maxIDLen {
			return "", false // folding cost grows with the input
		}
		u, ok := identity.CanonicalString(u, canon)
		return u, ok && validID([]byte(u))
	}
}

func newJWTUser(v *identity.JWT, c config.JWT, m *metrics.Metrics) *jwtUser {
	j := &jwtUser{v: v, cfg: c, authorization: c.Cookie == "" && strings.EqualFold(c.Header, fasthttp.HeaderAuthorization)}
	for r := identity.Reason(1); r < identity.NumReasons; r++ {
		j.failures[r] = m.AuthFailures.WithLabelValues(r.String())
	}
	return j
}

var bearer = []byte("Bearer ")

// token returns the raw token (aliasing ctx's buffers), or nil with
// Missing when none was sent, or Malformed for an Authorization-style
// header that is not "Bearer <token>".
func (j *jwtUser) token(ctx *fasthttp.RequestCtx) ([]byte, identity.Reason) {
	// A credential sent twice is refused, not one of them picked: the shop
	// gets every copy and may read the other (errTwice).
	if j.cfg.Cookie != "" {
		t, err := cookieOnce(&ctx.Request.Header, j.cfg.Cookie)
		if err != nil {
			return nil, identity.Malformed
		}
		if len(t) == 0 {
			return nil, identity.Missing
		}
		if otherBearer(&ctx.Request.Header, t) {
			return nil, identity.Malformed
		}
		return t, identity.OK
	}
	h, err := headerOnce(&ctx.Request.Header, j.cfg.Header, 0) // 0: no facts, every spelling looked for
	if err != nil {
		return nil, identity.Malformed
	}
	if len(h) == 0 {
		return nil, identity.Missing
	}
	if len(h) < len(bearer) || !bytes.EqualFold(h[:len(bearer)], bearer) {
		return nil, identity.Malformed
	}
	t := bytes.TrimSpace(h[len(bearer):])
	if !j.authorization && otherBearer(&ctx.Request.Header, t) {
		return nil, identity.Malformed
	}
	return t, identity.OK
}

// otherBearer reports whether an Authorization line may carry another
// bearer token than tok, the one the proxy verified from its configured
// place (a cookie, another header). Shops that take a JWT from a cookie
// commonly look in Authorization first (tymon/jwt-auth, Flask-JWT-Extended
// with headers listed first), and tymon's parser takes whatever follows
// the last "bearer" anywhere in the line (red team rtd: a throw-away
// account's cookie beside the main account's header was judged as the
// throw-away and booked for the main). So a line naming "bearer" in any
// case anywhere may hold no JWT-shaped run (base64url and '.') but tok;
// other schemes (Basic), and a value no parser takes for a JWT ("Bearer
// null", as scripts send it), pass.
func otherBearer(h *fasthttp.RequestHeader, tok []byte) bool {
	for _, v := range h.PeekAll(fasthttp.HeaderAuthorization) {
		if containsFold(v, bearerWord) && otherJWTRun(v, tok) {
			return true
		}
	}
	return false
}

// otherJWTRun reports whether b holds a JWT-shaped run of bytes (base64url
// and '.', three segments) other than tok.
func otherJWTRun(b, tok []byte) bool {
	for len(b) > 0 {
		i := 0
		for i < len(b) && !jwtByte(b[i]) {
			i++
		}
		e := i
		for e < len(b) && jwtByte(b[e]) {
			e++
		}
		if e > i && otherJWT(b[i:e], tok) {
			return true
		}
		b = b[e:]
	}
	return false
}

var bearerWord = []byte("bearer")

// tokenFieldNames are the fields shops' JWT parsers take a token from
// besides headers and cookies: tymon/jwt-auth's "token" (the query, then
// the input: form or JSON), RFC 6750's "access_token" (form, query; also
// Flask-JWT-Extended's JSON key), Flask-JWT-Extended's "jwt" (query).
var tokenFieldNames = [...]string{"token", "access_token", "jwt"}

// tokenField reports whether the query, an urlencoded body or a JSON
// body's top level holds, under a token field's name (in any letter case
// or PHP spelling), a JWT other than tok, the verified one: tymon/jwt-auth
// reads the query's and the input's "token" before its cookie, and
// Flask-JWT-Extended reads its locations in the configured order, the
// query's "jwt" or the JSON's "access_token" before the header when listed
// so (red team rtd). A field with anything but a JWT (a captcha's token)
// is not judged; a multipart part of the name beside another JWT anywhere
// in the body (parts are not decoded here), a JSON key of the name held twice (PHP takes the last
// copy) or a JSON body the proxy cannot decode that holds another JWT is.
// No cost to a buy whose query and body are empty.
func tokenField(ctx *fasthttp.RequestCtx, body *buyInput, tok []byte) bool {
	q, f := queryString(ctx), formBody(ctx)
	raw := ctx.Request.Body()
	ct := ctx.Request.Header.ContentType()
	js := len(raw) > 0 && jsonContentType(ct)
	if len(q) == 0 && len(f) == 0 && !js && (len(raw) == 0 || len(ct) < len(multipartForm)) {
		return false
	}
	for _, name := range tokenFieldNames {
		if otherJWTArg(q, name, tok) || otherJWTArg(f, name, tok) ||
			multipartHas(ctx, name) && otherJWTRun(raw, tok) {
			return true
		}
		if !js || !body.done && cannotName(raw, name) {
			continue
		}
		v, err := body.get(ctx)
		if err != nil {
			if otherJWTRun(raw, tok) {
				return true
			}
			continue
		}
		m, _ := v.(map[string]any)
		for k, x := range m {
			if !strings.EqualFold(k, name) {
				continue
			}
			switch x := x.(type) {
			case string:
				if otherJWT([]byte(x), tok) {
					return true
				}
			case jsonptr.Twice:
				return true
			}
		}
	}
	return false
}

// otherJWTArg reports whether a field of the urlencoded raw named name
// (argKeyIs, folded; PHP's spellings) holds a JWT other than tok.
func otherJWTArg(raw []byte, name string, tok []byte) bool {
	var scratch [64]byte
	for rest := raw; len(rest) > 0; {
		var k, v []byte
		k, v, rest = nextArg(rest, "&;")
		if len(v) == 0 || !argKeyIs(k, name, true, scratch[:0]) && !argNameCopy(k, name, []byte(name), true, scratch[:0]) {
			continue
		}
		if bytes.IndexByte(v, '%') >= 0 || bytes.IndexByte(v, '+') >= 0 {
			v = fasthttp.AppendUnquotedArg(nil, v)
		}
		if otherJWT(v, tok) {
			return true
		}
	}
	return false
}

// otherJWT reports whether v looks like a JWT (three base64url segments,
// as a parser would try it) and is not tok.
func otherJWT(v, tok []byte) bool {
	v = bytes.TrimSpace(v)
	if bytes.Equal(v, tok) || bytes.Count(v, []byte(".")) != 2 || v[0] == '.' {
		return false
	}
	for _, c := range v {
		if !jwtByte(c) {
			return false
		}
	}
	return true
}

// jwtByte reports whether c may be in a JWT's compact form (base64url,
// padding a lenient decoder takes, the dots).
func jwtByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '='
}

// containsFold reports whether b contains the lower-case ASCII word w in
// any letter case.
func containsFold(b, w []byte) bool {
	for i := 0; i+len(w) <= len(b); i++ {
		if b[i]|0x20 == w[0] && bytes.EqualFold(b[i:i+len(w)], w) {
			return true
		}
	}
	return false
}

// identify returns the verified user id, or the refusal's code. A token
// not verified before takes the request's per_ip token first (il, when
// set; RATE_LIMITED with the wait when there is none), one per signature
// check it can cost, as a session look-up takes one, so one address cannot
// buy signature checks faster than its rate; spent says so, and the buy's per-IP stage then takes no second.
func (j *jwtUser) identify(ctx *fasthttp.RequestCtx, body *buyInput, il IPLimiter, ip netip.Addr, shadow bool) (user string, code admission.Code, wait time.Duration, spent bool) {
	raw, r := j.token(ctx)
	if r == identity.OK && tokenField(ctx, body, raw) {
		r = identity.Malformed
	}
	if r == identity.OK {
		var hit bool
		if user, hit = j.v.Cached(raw); hit {
			return user, admission.Admitted, 0, false
		}
		if il != nil {
			ok, wait := il.AllowIP(ip, time.Now().UnixNano(), shadow, 1)
			if !ok {
				return "", admission.RateLimited, wait, false
			}
			spent = true
			// One token more per further signature check the token can
			// cost: a kid-less one is tried against every key of its
			// family (red team rte). Its header is read only once the
			// first token is paid.
			if n := j.v.Checks(raw); n > 1 {
				if ok, wait := il.AllowIP(ip, time.Now().UnixNano(), shadow, n-1); !ok {
					return "", admission.RateLimited, wait, true
				}
			}
		}
		user, r = j.v.Verify(raw)
	}
	switch r {
	case identity.OK:
		return user, admission.Admitted, 0, spent
	case identity.NoKeys:
		j.failures[r].Inc()
		return "", admission.AuthUnavailable, 0, false
	default:
		j.failures[r].Inc()
		return "", admission.Unauthenticated, 0, false
	}
}

// challenge is the WWW-Authenticate value for a 401 (RFC 6750 §3: no
// error code when the request carried no token at all).
func (j *jwtUser) challenge(ctx *fasthttp.RequestCtx) string {
	if _, r := j.token(ctx); r == identity.Missing {
		return "Bearer"
	}
	return `Bearer error="invalid_token"`
}

// authRetryAfter is what a buyer refused AUTH_UNAVAILABLE is told to wait.
const authRetryAfter = time.Second

// closeJWTLater stops a replaced verifier once requests that loaded the
// old state are done with it.
func closeJWTLater(j *jwtUser) {
	time.AfterFunc(10*time.Second, j.v.Close)
}
