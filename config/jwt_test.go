package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// testJWKSFile writes a JWKS of one P-256 key and returns its path:
// validation loads jwks_file.
func testJWKSFile(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.PublicKey.Bytes() // 0x04 || x || y
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	path := filepath.Join(t.TempDir(), "jwks.json")
	doc := fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":%q,"y":%q}]}`, enc(b[1:33]), enc(b[33:]))
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwtUser is identity.user.jwt in block style, starting on line 8 of okAct.
const jwtUser = okAct + "identity:\n  user:\n    jwt:\n"

func TestJWTDefaults(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(jwtUser+"      jwks_url: https://auth.example/jwks.json\n      issuer: https://auth.example\n      audience: shop\n"))
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.Identity.User.JWT
	if !j.Enabled() || j.Header != "Authorization" || j.Cookie != "" || j.Claim != "sub" || j.Leeway != 30*time.Second ||
		!reflect.DeepEqual(j.Algorithms, AsymmetricJWTAlgorithms()) {
		t.Errorf("defaults = %+v", j)
	}
	if u := cfg.Identity.User; u.Header != "" || u.Cookie != "" || u.Query != "" {
		t.Errorf("jwt user also has a plain source: %+v", u)
	}
	cfg, err = Parse("t.yaml", []byte(jwtUser+"      cookie: tok\n      hmac_secret_env: JWT_KEY\n      issuer: i\n      audience: a\n      claim: /ext/uid\n"))
	if err != nil {
		t.Fatal(err)
	}
	if j := cfg.Identity.User.JWT; j.Header != "" || j.Cookie != "tok" || !reflect.DeepEqual(j.Algorithms, []string{"HS256"}) || j.Claim != "/ext/uid" {
		t.Errorf("hmac defaults = %+v", j)
	}
	// Without jwt nothing changes: the header stays the default source.
	cfg, err = Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Identity.User.JWT.Enabled() || cfg.Identity.User.Header != "X-User-Id" {
		t.Errorf("default identity = %+v", cfg.Identity.User)
	}
}

func TestJWTValidation(t *testing.T) {
	// A real file: validation loads jwks_file (a missing one is an error of its own).
	jwks := testJWKSFile(t)
	keys := "      jwks_file: " + jwks + "\n      issuer: i\n      audience: a\n"
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		{"no key source", jwtUser + "      issuer: i\n      audience: a\n", []wantErr{{10, "set exactly one of jwks_file, jwks_url or hmac_secret_env"}}},
		{"two key sources", jwtUser + keys + "      jwks_url: https://x/j\n", []wantErr{{10, "set exactly one of jwks_file, jwks_url or hmac_secret_env"}}},
		{"jwt and header", okAct + "identity:\n  user:\n    header: X-User-Id\n    jwt:\n" + keys, []wantErr{{9, "identity.user: set exactly one of header, cookie, query, session or jwt"}}},
		{"jwt on device", okAct + "identity:\n  device:\n    jwt:\n" + keys, []wantErr{{9, "identity.device: set one of header, cookie or query"}, {10, "identity.device: jwt is only for identity.user"}}},
		{"header and cookie", jwtUser + keys + "      header: Authorization\n      cookie: t\n", []wantErr{{15, "set one of header or cookie"}}},
		{"bad url", jwtUser + "      jwks_url: ftp://x/j\n      issuer: i\n      audience: a\n", []wantErr{{11, "jwks_url must start with http:// or https://"}}},
		{"bad env", jwtUser + "      hmac_secret_env: 1X\n      issuer: i\n      audience: a\n", []wantErr{{11, "not a valid environment variable name"}}},
		{"issuer required", jwtUser + "      jwks_file: " + jwks + "\n      audience: a\n", []wantErr{{10, "issuer is required"}}},
		{"audience required", jwtUser + "      jwks_file: " + jwks + "\n      issuer: i\n", []wantErr{{10, "audience is required"}}},
		{"bad pointer", jwtUser + keys + "      claim: \"/a~2\"\n", []wantErr{{14, `"~" not followed by 0 or 1`}}},
		{"leeway too long", jwtUser + keys + "      leeway: 1h\n", []wantErr{{14, "leeway must be between 0s and 5m0s"}}},
		{"alg none", jwtUser + keys + "      algorithms: [RS256, none]\n", []wantErr{{14, `algorithm "none" is refused`}}},
		{"alg unknown", jwtUser + keys + "      algorithms:\n        - RS256\n        - XS256\n", []wantErr{{16, `unknown algorithm "XS256"`}}},
		{"HS with JWKS", jwtUser + keys + "      algorithms: [RS256, HS256]\n", []wantErr{{14, "HS256 needs hmac_secret_env and cannot be used with JWKS keys"}}},
		{"RS with HMAC", jwtUser + "      hmac_secret_env: K\n      issuer: i\n      audience: a\n      algorithms: [HS256, RS256]\n", []wantErr{{14, "RS256 needs jwks_file or jwks_url"}}},
		{"empty algorithms", jwtUser + keys + "      algorithms: []\n", []wantErr{{14, "algorithms needs at least one"}}},
		{"unknown key", jwtUser + keys + "      jwks: x\n", []wantErr{{14, `unknown key "jwks" in identity.user.jwt`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.give, tt.want) })
	}
}
