package config

import (
	"strings"
	"testing"
)

// A URL with a password that fails validation is quoted in the message,
// which is printed and logged: never with the password (verify.url,
// count_url, jwks_url and session.url share httpURL with upstream.url).
func TestHTTPURLMessagesHidePasswords(t *testing.T) {
	for _, s := range []string{
		"ftp://user:s3cr3t@shop:8080/x",
		"http://user:s3cr3t@shop:99999/x",
		"http://user:s3cr3t@/x",
		"http://user:s3cr3t@shop:80/%zz",
		"http://user:s3cr3t@[::1/x",
	} {
		msg := httpURL(s)
		if msg == "" {
			t.Errorf("%q: accepted", s)
			continue
		}
		if strings.Contains(msg, "s3cr3t") {
			t.Errorf("%q: message shows the password: %s", s, msg)
		}
	}
}
