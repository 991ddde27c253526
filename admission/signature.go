package admission

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// sigKeys are one activity's app keys for request signatures.
type sigKeys struct {
	keys   map[string][]byte // key id -> HMAC key (from the environment)
	window time.Duration
}

// Signature outcomes, named as in metrics (layer "signature").
const (
	sigOK = iota
	sigMalformed
	sigUnknownKey
	sigStale
	sigBad
)

// Sign computes the request signature the shop's app sends:
// hex(HMAC-SHA256(key, METHOD "\n" PATH "\n" USER "\n" TIMESTAMP "\n" NONCE)),
// TIMESTAMP in Unix milliseconds. Exported for apps, tests and the bench.
func Sign(key []byte, method, path, user, timestamp, nonce string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(method))
	m.Write([]byte{'\n'})
	m.Write([]byte(path))
	m.Write([]byte{'\n'})
	m.Write([]byte(user))
	m.Write([]byte{'\n'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'\n'})
	m.Write([]byte(nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// check verifies r's signature at now. Malformed or missing fields are the
// client's mistake (400); a wrong, unknown-key or stale signature is refused (403).
func (k *sigKeys) check(r *Request, now time.Time) int {
	if r.SigKeyID == "" || r.SigTimestamp == "" || !validNonce(r.SigNonce) || len(r.Signature) != 64 {
		return sigMalformed
	}
	ts, err := strconv.ParseInt(r.SigTimestamp, 10, 64)
	if err != nil || ts <= 0 {
		return sigMalformed
	}
	var got [32]byte
	if _, err := hex.Decode(got[:], []byte(r.Signature)); err != nil {
		return sigMalformed
	}
	key, ok := k.keys[r.SigKeyID]
	if !ok {
		return sigUnknownKey
	}
	if d := now.UnixMilli() - ts; d > k.window.Milliseconds() || -d > k.window.Milliseconds() {
		return sigStale
	}
	want, _ := hex.DecodeString(Sign(key, r.Method, r.Path, r.User, r.SigTimestamp, r.SigNonce))
	if !hmac.Equal(got[:], want) {
		return sigBad
	}
	return sigOK
}

// validNonce accepts 8..64 characters of [A-Za-z0-9_-]: enough entropy to be
// unique per request, and safe inside a Redis key.
func validNonce(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
