package config

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// maxJWKSFileBytes is the largest JWKS the proxy loads (identity's bound).
const maxJWKSFileBytes = 1 << 20

// checkJWKSFile reads a JWKS file and returns why the proxy could not verify
// tokens with it: unreadable, not an RFC 7517 key set, or no key of a kind
// identity.user.jwt verifies with (RSA of 2048 bits or more, EC P-256/384/521,
// Ed25519; signing use). The proxy's loader (identity/jwks.go) is the
// authority: it checks each key fully (an EC point on its curve) and logs
// the keys it skips; this catches a wrong, empty or missing file at its
// line, before serve starts with no key at all.
func checkJWKSFile(path string) error {
	data, err := ReadFileAtMost(path, maxJWKSFileBytes)
	if errors.Is(err, errTooLarge) {
		return fmt.Errorf("%s is larger than %d bytes", path, maxJWKSFileBytes)
	}
	if err != nil {
		return withPath(path, err)
	}
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s is not a JWKS ({\"keys\": [...]}): %v", path, err)
	}
	var why []string
	for i, k := range doc.Keys {
		err := jwkUsable(k)
		if err == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("key %d: %v", i, err))
	}
	if len(why) == 0 {
		return fmt.Errorf("%s holds no keys", path)
	}
	return fmt.Errorf("%s holds no key the proxy can verify tokens with (%s)", path, why[0])
}

// jwkUsable returns why JWK k is not a signing key identity accepts, or nil.
func jwkUsable(k map[string]any) error {
	str := func(name string) string { s, _ := k[name].(string); return s }
	b64 := func(name string) ([]byte, error) {
		b, err := base64.RawURLEncoding.DecodeString(str(name))
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%q is not base64url", name)
		}
		return b, nil
	}
	if use := str("use"); use != "" && use != "sig" {
		return fmt.Errorf("use %q is not sig", use)
	}
	switch kty := str("kty"); kty {
	case "RSA":
		n, err := b64("n")
		if err != nil {
			return err
		}
		if _, err := b64("e"); err != nil {
			return err
		}
		if bits := new(big.Int).SetBytes(n).BitLen(); bits < 2048 {
			return fmt.Errorf("RSA key of %d bits (want 2048 or more)", bits)
		}
	case "EC":
		size := map[string]int{"P-256": 32, "P-384": 48, "P-521": 66}[str("crv")]
		if size == 0 {
			return fmt.Errorf("curve %q not supported", str("crv"))
		}
		x, err1 := b64("x")
		y, err2 := b64("y")
		if err1 != nil || err2 != nil || len(x) != size || len(y) != size {
			return errors.New("bad EC x or y")
		}
	case "OKP":
		x, err := b64("x")
		if str("crv") != "Ed25519" || err != nil || len(x) != 32 {
			return errors.New("OKP key: want crv Ed25519 with a 32-byte x")
		}
	default:
		return fmt.Errorf("kty %q is not used for signatures here", kty)
	}
	return nil
}
