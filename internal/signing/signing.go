// Package signing computes and checks X-Seckill-Signature (SPEC §5, issue
// 9 §6): the shop verifies that a buy came through the proxy, recently, and
// with which of the shop's keys.
//
// The header is "t=<unix ms>,k=<key id>,v1=<hex>,v2=<hex>", fields read by
// name (their order carries no meaning, unknown fields are ignored):
//
//	v1 = HMAC-SHA256(secret, "<t>.<token>.<activity>.<sku>.<qty>.<user>")
//	v2 = HMAC-SHA256(secret, "v2\n<t>\n<k>\n<METHOD>\n<target>\n<token>\n<activity>\n<sku>\n<qty>\n<user>")
//
// both lower-case hex, keyed with the secret of key k. A bundle (issue 13
// §3) also carries X-Seckill-Items ("a:1,b:2"); then, and only then, both
// messages end with it: v1 with ".<items>", v2 with "\n<items>" (a buy
// without items signs exactly the bytes it always did). target is the
// request-target of the request line the shop receives: the path as sent
// and, when there is a query, "?" and the query as sent. v2's fields are
// joined with "\n", which no field can hold (HTTP forbids it in request
// lines and header values), so no two field lists sign the same bytes; v1
// is kept unchanged so shops that verify it keep working.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Verification failures; Verify wraps nothing else, so callers may count
// by these.
var (
	// ErrMalformed: the header is missing a field, has one twice, or a
	// field does not parse.
	ErrMalformed = errors.New("signing: malformed X-Seckill-Signature")
	// ErrStale: t is further from now than the freshness window allows.
	ErrStale = errors.New("signing: X-Seckill-Signature outside the freshness window")
	// ErrUnknownKey: k names a key the verifier does not know.
	ErrUnknownKey = errors.New("signing: X-Seckill-Signature signed with an unknown key")
	// ErrMismatch: the HMAC does not match the request's values.
	ErrMismatch = errors.New("signing: X-Seckill-Signature does not match")
)

// Key is one signing key: its id, sent as k=, and its HMAC secret.
type Key struct {
	ID     string
	Secret []byte
}

// Keyring is a list of keys, current first. The proxy signs with the first;
// a shop verifies with the key the header's k names, so while a rotation is
// under way it lists both the old key and the new one.
type Keyring []Key

// Request is what a signature covers: the X-Seckill-* values (v1 and v2)
// and, for v2 only, the method and request-target the shop receives.
type Request struct {
	Token, Activity, SKU, Qty, User string
	// Method is the request line's method, e.g. "POST".
	Method string
	// Target is the request line's target: path, plus "?query" when there
	// is one, byte for byte as sent (not decoded).
	Target string
	// Items is a bundle's X-Seckill-Items ("" for a single buy: not signed).
	Items string
}

// Sign returns the X-Seckill-Signature value for r at nowMs, signed with the
// keyring's first key. An empty keyring signs with an empty key and no k.
func (kr Keyring) Sign(nowMs int64, r Request) string {
	var key Key
	if len(kr) > 0 {
		key = kr[0]
	}
	t := strconv.FormatInt(nowMs, 10)
	m := hmac.New(sha256.New, key.Secret)
	b := make([]byte, 0, 16+len(key.ID)+2*(64+4))
	b = append(b, "t="...)
	b = append(b, t...)
	if key.ID != "" {
		b = append(b, ",k="...)
		b = append(b, key.ID...)
	}
	b = append(b, ",v1="...)
	b = hex.AppendEncode(b, macV1(m, t, r))
	b = append(b, ",v2="...)
	b = hex.AppendEncode(b, macV2(m, t, key.ID, r))
	return string(b)
}

// Verify checks header's v2 (which also covers r.Method and r.Target) with
// the key its k names, and that t is at most maxAge away from now. It
// returns the id of the key that verified. A header without k (a proxy from
// before key ids) is tried with every key.
func (kr Keyring) Verify(header string, r Request, now time.Time, maxAge time.Duration) (keyID string, err error) {
	return kr.verify(header, r, now, maxAge, true)
}

// VerifyV1 checks header's v1 only, which covers neither method nor path:
// for shops that cannot see the request line as the proxy sent it. Prefer
// Verify: a v1 signature of a buy stays valid on any path of the shop.
func (kr Keyring) VerifyV1(header string, r Request, now time.Time, maxAge time.Duration) (keyID string, err error) {
	return kr.verify(header, r, now, maxAge, false)
}

func (kr Keyring) verify(header string, r Request, now time.Time, maxAge time.Duration, v2 bool) (string, error) {
	f, err := parse(header)
	if err != nil {
		return "", err
	}
	sig := f.v1
	if v2 {
		sig = f.v2
	}
	if sig == nil {
		return "", ErrMalformed
	}
	if d := now.Sub(time.UnixMilli(f.ms)); d > maxAge || d < -maxAge {
		return "", ErrStale
	}
	found := false
	for _, key := range kr {
		if f.hasK && key.ID != f.k {
			continue
		}
		found = true
		m := hmac.New(sha256.New, key.Secret)
		var want []byte
		if v2 {
			want = macV2(m, f.t, f.k, r)
		} else {
			want = macV1(m, f.t, r)
		}
		if hmac.Equal(want, sig) {
			return key.ID, nil
		}
	}
	if !found {
		return "", ErrUnknownKey
	}
	return "", ErrMismatch
}

// fields is a parsed header.
type fields struct {
	t      string
	ms     int64
	k      string
	hasK   bool
	v1, v2 []byte // decoded; nil when absent
}

func parse(header string) (fields, error) {
	var f fields
	seen := map[string]bool{}
	for part := range strings.SplitSeq(header, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch name {
		case "t", "k", "v1", "v2":
		default:
			continue // fields added later are ignored
		}
		if seen[name] {
			return fields{}, ErrMalformed // two values: which one was signed is unclear
		}
		seen[name] = true
		switch name {
		case "t":
			f.t = val
		case "k":
			f.k, f.hasK = val, true
		case "v1", "v2":
			b, err := hex.DecodeString(val)
			if err != nil || len(b) != sha256.Size {
				return fields{}, ErrMalformed
			}
			if name == "v1" {
				f.v1 = b
			} else {
				f.v2 = b
			}
		}
	}
	if len(f.t) == 0 || len(f.t) > 18 || strings.Trim(f.t, "0123456789") != "" {
		return fields{}, ErrMalformed
	}
	ms, err := strconv.ParseInt(f.t, 10, 64)
	if err != nil {
		return fields{}, ErrMalformed
	}
	f.ms = ms
	return f, nil
}

func macV1(m hash.Hash, t string, r Request) []byte {
	m.Reset()
	for i, s := range [...]string{t, r.Token, r.Activity, r.SKU, r.Qty, r.User} {
		if i > 0 {
			m.Write([]byte{'.'})
		}
		m.Write([]byte(s))
	}
	if r.Items != "" {
		m.Write([]byte{'.'})
		m.Write([]byte(r.Items))
	}
	return m.Sum(nil)
}

func macV2(m hash.Hash, t, k string, r Request) []byte {
	m.Reset()
	m.Write([]byte("v2"))
	for _, s := range [...]string{t, k, r.Method, r.Target, r.Token, r.Activity, r.SKU, r.Qty, r.User} {
		m.Write([]byte{'\n'})
		m.Write([]byte(s))
	}
	if r.Items != "" {
		m.Write([]byte{'\n'})
		m.Write([]byte(r.Items))
	}
	return m.Sum(nil)
}

// Sign returns today's v1-only form "t=<unix ms>,v1=<hex>" with one secret:
// what a proxy from before key ids sent. Kept for tests and tools that
// speak that form; the proxy signs with Keyring.Sign.
func Sign(secret []byte, nowMs int64, token, act, sku, qty, user string) string {
	t := strconv.FormatInt(nowMs, 10)
	mac := macV1(hmac.New(sha256.New, secret), t, Request{Token: token, Activity: act, SKU: sku, Qty: qty, User: user})
	return "t=" + t + ",v1=" + hex.EncodeToString(mac)
}

// Verify checks a header's v1 with one secret and returns its timestamp,
// leaving freshness to the caller; ok is false for a malformed or wrong
// signature. Keyring.Verify checks v2, key ids and freshness.
func Verify(secret []byte, header, token, act, sku, qty, user string) (tMs int64, ok bool) {
	f, err := parse(header)
	if err != nil || f.v1 == nil {
		return 0, false
	}
	want := macV1(hmac.New(sha256.New, secret), f.t, Request{Token: token, Activity: act, SKU: sku, Qty: qty, User: user})
	return f.ms, hmac.Equal(want, f.v1)
}

// Signer signs like Keyring.Sign with the keyring's first key, reusing
// HMAC states from a pool: the key's pads are hashed once per state, not
// once per winner, and each message is written in one piece (issue 10:
// signing was a tenth of the winner path's CPU). Safe for concurrent use.
type Signer struct {
	key  Key
	pool sync.Pool // *signState: an HMAC keyed with key.Secret and its buffers
}

// signState is what one Sign call needs besides its result, pooled: a
// message written through the hash.Hash interface escapes, so a buffer on
// the stack would be a heap allocation per winner.
type signState struct {
	mac      hash.Hash
	msg, out []byte
	sum      [sha256.Size]byte
}

// NewSigner returns a Signer for kr's first key (an empty key and no k
// for an empty keyring, as Keyring.Sign).
func NewSigner(kr Keyring) *Signer {
	s := &Signer{}
	if len(kr) > 0 {
		s.key = kr[0]
	}
	secret := s.key.Secret
	s.pool.New = func() any { return &signState{mac: hmac.New(sha256.New, secret)} }
	return s
}

// Sign returns the same header value as Keyring.Sign.
func (s *Signer) Sign(nowMs int64, r Request) string {
	st := s.pool.Get().(*signState)
	defer s.pool.Put(st)
	m := st.mac
	msg := strconv.AppendInt(st.msg[:0], nowMs, 10)
	tl := len(msg) // msg[:tl] is the time's text
	for _, f := range [...]string{r.Token, r.Activity, r.SKU, r.Qty, r.User} {
		msg = append(append(msg, '.'), f...)
	}
	if r.Items != "" {
		msg = append(append(msg, '.'), r.Items...)
	}
	b := append(st.out[:0], "t="...)
	b = append(b, msg[:tl]...)
	if s.key.ID != "" {
		b = append(append(b, ",k="...), s.key.ID...)
	}
	m.Reset()
	m.Write(msg)
	b = hex.AppendEncode(append(b, ",v1="...), m.Sum(st.sum[:0]))
	// v2's message: "v2", then each field after a newline, the time first.
	msg = append(append(append(msg[:0], "v2"...), '\n'), b[2:2+tl]...)
	for _, f := range [...]string{s.key.ID, r.Method, r.Target, r.Token, r.Activity, r.SKU, r.Qty, r.User} {
		msg = append(append(msg, '\n'), f...)
	}
	if r.Items != "" {
		msg = append(append(msg, '\n'), r.Items...)
	}
	m.Reset()
	m.Write(msg)
	b = hex.AppendEncode(append(b, ",v2="...), m.Sum(st.sum[:0]))
	if cap(msg) <= 4<<10 { // a huge target's buffer is not kept
		st.msg = msg
	}
	st.out = b
	return string(b)
}
