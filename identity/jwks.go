package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// Key families: a token's alg must name the family of the key it is
// checked with, so an RSA key can never verify an HS256 or ES256 token.
const (
	famRSA  = "RSA"
	famP256 = "EC P-256"
	famP384 = "EC P-384"
	famP521 = "EC P-521"
	famEd   = "Ed25519"
	famHMAC = "HMAC"
)

// algFamily is the key family an alg needs ("" for algs this package never
// accepts, "none" included).
func algFamily(alg string) string {
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		return famRSA
	case "ES256":
		return famP256
	case "ES384":
		return famP384
	case "ES512":
		return famP521
	case "EdDSA":
		return famEd
	case "HS256", "HS384", "HS512":
		return famHMAC
	}
	return ""
}

// maxJWKSBytes and maxKeys bound what one JWKS may make the proxy hold.
const (
	maxJWKSBytes = 1 << 20
	maxKeys      = 100
	minRSABits   = 2048
)

// pubKey is one usable verification key of a JWKS.
type pubKey struct {
	kid    string
	alg    string // the JWK's "alg", "" when it names none
	family string
	key    crypto.PublicKey // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// keySet is one parsed JWKS, swapped whole.
type keySet struct {
	byKid map[string]*pubKey
	all   []*pubKey
}

// Errors of JWKS parsing.
var (
	// ErrNoUsableKeys means a JWKS parsed but held no signing key this
	// package can use; it is treated like a failed fetch (the last good
	// set stays).
	ErrNoUsableKeys = errors.New("jwks: no usable signing keys")
)

type jwkJSON struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads an RFC 7517 key set. Keys it cannot use are skipped
// (encryption keys, symmetric "oct" keys: a shared secret published in a
// JWKS is not a signing key we trust, and taking it would reopen algorithm
// confusion); skipped names why, for the log.
func parseJWKS(data []byte) (*keySet, []string, error) {
	if len(data) > maxJWKSBytes {
		return nil, nil, fmt.Errorf("jwks: larger than %d bytes", maxJWKSBytes)
	}
	var doc struct {
		Keys []jwkJSON `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("jwks: %w", err)
	}
	ks := &keySet{byKid: make(map[string]*pubKey)}
	var skipped []string
	for i, j := range doc.Keys {
		if len(ks.all) == maxKeys {
			skipped = append(skipped, fmt.Sprintf("keys beyond the first %d", maxKeys))
			break
		}
		if j.Use != "" && j.Use != "sig" {
			continue
		}
		k, err := j.key()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, j.Kid, err))
			continue
		}
		if j.Alg != "" && algFamily(j.Alg) != k.family {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): alg %q does not fit a %s key", i, j.Kid, j.Alg, k.family))
			continue
		}
		if j.Kid != "" {
			if _, dup := ks.byKid[j.Kid]; dup {
				skipped = append(skipped, fmt.Sprintf("key %d: kid %q listed twice; the first is used", i, j.Kid))
				continue
			}
			ks.byKid[j.Kid] = k
		}
		ks.all = append(ks.all, k)
	}
	if len(ks.all) == 0 {
		return nil, skipped, ErrNoUsableKeys
	}
	return ks, skipped, nil
}

func (j *jwkJSON) key() (*pubKey, error) {
	k := &pubKey{kid: j.Kid, alg: j.Alg}
	switch j.Kty {
	case "RSA":
		n, err1 := b64(j.N)
		e, err2 := b64(j.E)
		if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA n or e")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < minRSABits || pub.E < 3 || pub.E%2 == 0 {
			return nil, fmt.Errorf("RSA key of %d bits or exponent %d refused (want >= %d bits, odd e)", pub.N.BitLen(), pub.E, minRSABits)
		}
		k.family, k.key = famRSA, pub
	case "EC":
		var curve elliptic.Curve
		switch j.Crv {
		case "P-256":
			curve, k.family = elliptic.P256(), famP256
		case "P-384":
			curve, k.family = elliptic.P384(), famP384
		case "P-521":
			curve, k.family = elliptic.P521(), famP521
		default:
			return nil, fmt.Errorf("curve %q not supported", j.Crv)
		}
		x, err1 := b64(j.X)
		y, err2 := b64(j.Y)
		size := (curve.Params().BitSize + 7) / 8
		if err1 != nil || err2 != nil || len(x) != size || len(y) != size {
			return nil, errors.New("bad EC x or y")
		}
		// ParseUncompressedPublicKey checks the point is on the curve.
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("bad EC point: %w", err)
		}
		k.key = pub
	case "OKP":
		x, err := b64(j.X)
		if j.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("OKP key: want crv Ed25519 with a 32-byte x")
		}
		k.family, k.key = famEd, ed25519.PublicKey(x)
	default:
		return nil, fmt.Errorf("kty %q not used for signatures here", j.Kty)
	}
	return k, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
