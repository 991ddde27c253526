package identity

import (
	"testing"
	"time"
)

func TestMaxAgeBounds(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{
		{"", DefaultRefresh},
		{"no-cache", DefaultRefresh},
		{"public, max-age=600", 10 * time.Minute},
		{"max-age=5", MinRefresh},
		{"MAX-AGE=99999999999", MaxRefresh},
		{"max-age=-1", DefaultRefresh},
		{"max-age=\"120\"", 2 * time.Minute},
	}
	for _, tt := range tests {
		if got := maxAge(tt.give); got != tt.want {
			t.Errorf("maxAge(%q) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestParseJWKSSkipsWhatItCannotUse(t *testing.T) {
	_, skipped, err := parseJWKS([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"},{"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"},{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"small"}]}`))
	if err != ErrNoUsableKeys || len(skipped) != 2 {
		t.Fatalf("err %v, skipped %q", err, skipped)
	}
	if _, _, err := parseJWKS([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}]}`)); err != ErrNoUsableKeys {
		t.Fatalf("bad EC point accepted: %v", err)
	}
}
