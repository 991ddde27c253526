// Package signing computes and checks X-Seckill-Signature (SPEC §5): the
// shop verifies that a buy came through the proxy, and recently.
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Sign returns "t=<unix ms>,v1=<hex>" where v1 is HMAC-SHA256(secret,
// "<t>.<token>.<activity>.<sku>.<qty>.<user>").
func Sign(secret []byte, nowMs int64, token, act, sku, qty, user string) string {
	t := strconv.FormatInt(nowMs, 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(t + "." + token + "." + act + "." + sku + "." + qty + "." + user))
	return "t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against the request's values and
// returns its timestamp; ok is false for a malformed or wrong signature.
func Verify(secret []byte, header, token, act, sku, qty, user string) (tMs int64, ok bool) {
	var t, v string
	for _, part := range strings.Split(header, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			t = val
		case "v1":
			v = val
		}
	}
	ms, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v == "" {
		return 0, false
	}
	want := Sign(secret, ms, token, act, sku, qty, user)
	return ms, hmac.Equal([]byte(want[strings.Index(want, "v1=")+3:]), []byte(strings.ToLower(v)))
}
