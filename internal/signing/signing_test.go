package signing

import "testing"

func TestSignVerify(t *testing.T) {
	secret := []byte("s3cret")
	h := Sign(secret, 1700000000000, "tok", "act", "sku", "1", "u1")
	tests := []struct {
		name              string
		header, tok, user string
		secret            []byte
		wantOK            bool
	}{
		{"good", h, "tok", "u1", secret, true},
		{"other token", h, "tok2", "u1", secret, false},
		{"other user", h, "tok", "u2", secret, false},
		{"other secret", h, "tok", "u1", []byte("x"), false},
		{"malformed", "garbage", "tok", "u1", secret, false},
		{"no v1", "t=1700000000000", "tok", "u1", secret, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, ok := Verify(tt.secret, tt.header, tt.tok, "act", "sku", "1", tt.user)
			if ok != tt.wantOK {
				t.Fatalf("Verify ok=%v want %v", ok, tt.wantOK)
			}
			if ok && ms != 1700000000000 {
				t.Fatalf("t=%d", ms)
			}
		})
	}
}
