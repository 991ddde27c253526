package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRTDCookieInsideAnotherCookie: a session cookie's name that a shop's
// parser reads inside another cookie — after white space (Python's
// SimpleCookie) or ',' (Tomcat's RFC 2109 reading after "$Version=1") —
// is a second copy; white space and commas that name no such cookie are
// not. Reading a header with both allocates nothing.
func TestRTDCookieInsideAnotherCookie(t *testing.T) {
	for _, c := range []string{
		"sess_id=a; x=b sess_id=c",
		"sess_id=a; x=b\tsess_id=c",
		"sess_id=a; x=b,sess_id=c",
		"$Version=1; x=b ,  sess_id = c; sess_id=a",
		"sess_id=a; x=b, SESS_ID=c",
		"sess_id=a; x=b sess.id=c",
		"x, sess_id=c; sess_id=a",
		"sess_id=a; x=b sess_id=",
		"$Version=1; sess_id=a, sess_id=c",
		"sess_id=a sess_id=c",
	} {
		var h fasthttp.RequestHeader
		h.Set("Cookie", c)
		if v, err := cookieOnce(&h, "sess_id"); err == nil {
			t.Errorf("%q: %q, want errTwice", c, v)
		}
	}
	for _, c := range []struct{ cookie, want string }{
		{"sess_id=a; pref=x y, z", "a"},
		{"$Version=1; sess_id=a", "a"},
		{"theme=dark, sess_idx=1; sess_id=a", "a"},
		{"sess_id=a; q=1 sess_id", "a"}, // no '=': a cookie without a value nowhere
		{"sess_id=a; x=b ,", "a"},
	} {
		var h fasthttp.RequestHeader
		h.Set("Cookie", c.cookie)
		if v, err := cookieOnce(&h, "sess_id"); err != nil || string(v) != c.want {
			t.Errorf("%q: %q %v, want %q", c.cookie, v, err, c.want)
		}
	}
	var h fasthttp.RequestHeader
	h.Set("Cookie", "sess_id=s1; pref=a b, c; theme=dark; _ga=GA1.2.3")
	allocs := testing.AllocsPerRun(200, func() {
		if v, err := cookieOnce(&h, "sess_id"); err != nil || string(v) != "s1" {
			t.Fatalf("cookie %q %v", v, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations, want 0", allocs)
	}
}

// TestRTDOtherBearer: beside a token read from a cookie (or another
// header), an Authorization line that a shop could read a bearer token
// from must carry exactly that token; other schemes pass, and the check
// allocates nothing.
func TestRTDOtherBearer(t *testing.T) {
	tok := []byte("aaa.bbb.ccc")
	for _, tt := range []struct {
		lines []string
		want  bool
	}{
		{nil, false},
		{[]string{"Bearer aaa.bbb.ccc"}, false},
		{[]string{"bearer \t aaa.bbb.ccc "}, false},
		{[]string{"Basic Zm9vOmJhcg=="}, false},
		{[]string{"Basic Zm9vOmJhcg==", "Bearer aaa.bbb.ccc"}, false},
		{[]string{"Bearer xxx.yyy.zzz"}, true},
		{[]string{"Bearer aaa.bbb.ccc", "Bearer xxx.yyy.zzz"}, true},
		{[]string{"Basic Zm9v, Bearer xxx.yyy.zzz"}, true}, // tymon: what follows the last "bearer"
		{[]string{"Bearer aaa.bbb.ccc, Bearer xxx.yyy.zzz"}, true},
		{[]string{"Token BEARERxxx.yyy.zzz"}, true},
		{[]string{"Bearer"}, true},
		{[]string{"Beareraaa.bbb.ccc"}, true},
	} {
		var h fasthttp.RequestHeader
		for _, l := range tt.lines {
			h.Add("Authorization", l)
		}
		if got := otherBearer(&h, tok); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.lines, got, tt.want)
		}
	}
	var h fasthttp.RequestHeader
	h.Set("Authorization", "Bearer aaa.bbb.ccc")
	if n := testing.AllocsPerRun(200, func() { otherBearer(&h, tok) }); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}
