package proxy

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"
)

// An identity header also sent with '_' for '-' is a second copy: PHP,
// Rack and WSGI file X_User_Id and X-User-Id under one name, and the shop
// could read the one the proxy did not judge (the px12 fixer's note).
func TestHD12HeaderOnceUnderscoreTwin(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string // value, or "twice"
	}{
		{"exact alone", "X-User-Id: alice\r\n", "alice"},
		{"underscore twin beside", "X-User-Id: alice\r\nX_User_Id: bob\r\n", "twice"},
		{"underscore twin alone", "X_User_Id: bob\r\n", "twice"},
		{"mixed spelling", "x-user_id: bob\r\nX-User-Id: alice\r\n", "twice"},
		{"another header with underscores", "X-User-Id: alice\r\nX_Other: 1\r\n", "alice"},
		{"absent", "X-Other: 1\r\n", ""},
		{"another case", "x-USER-id: alice\r\n", "alice"},
		{"two lines", "X-User-Id: alice\r\nX-User-Id: bob\r\n", "twice"},
		{"two lines, two cases", "X-User-Id: alice\r\nx-user-id: bob\r\n", "twice"},
		{"empty value", "X-User-Id: \r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			if err := h.Read(bufioReader("GET /buy HTTP/1.1\r\nHost: x\r\n" + tt.raw + "\r\n")); err != nil {
				t.Fatal(err)
			}
			// Without facts, and with those of handle's pass.
			for _, facts := range []headerFacts{0, stripSeckillHeaders(&h)} {
				v, err := headerOnce(&h, "X-User-Id", facts)
				got := string(v)
				if errors.As(err, new(errTwice)) {
					got = "twice"
				} else if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("headerOnce (facts %b) = %q, want %q", facts, got, tt.want)
				}
			}
		})
	}
}
