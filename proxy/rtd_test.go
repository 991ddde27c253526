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
		{[]string{"Bearer"}, false},
		{[]string{"Bearer null"}, false},
		{[]string{"Bearer undefined", "Bearer aaa.bbb.ccc"}, false},
		{[]string{"Beareraaa.bbb.ccc"}, true},
		{[]string{"Bearer  xxx.yyy.zzz  "}, true},
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

// TestRTDTokenField: a JWT under a token field's name that is not the
// verified token is found in the query, a form body and a JSON body; other
// values are not judged; a buy whose query and JSON body name no token
// field allocates nothing for the check.
func TestRTDTokenField(t *testing.T) {
	tok := []byte("eyJa.eyJb.sig")
	other := "eyJx.eyJy.zzz"
	for _, tt := range []struct {
		uri, ctype, body string
		want             bool
	}{
		{"/buy", "", "", false},
		{"/buy?token=" + other, "", "", true},
		{"/buy?Access_Token=" + other, "", "", true},
		{"/buy?x=1;jwt=" + other, "", "", true},
		{"/buy?to%6Ben=" + other, "", "", true},
		{"/buy?token=%65yJx.eyJy.zzz", "", "", true},
		{"/buy?token=" + string(tok), "", "", false},
		{"/buy?token=captcha-123", "", "", false},
		{"/buy?token=a.b", "", "", false},
		{"/buy", "application/x-www-form-urlencoded", "sku=a&token=" + other, true},
		{"/buy", "application/x-www-form-urlencoded", "sku=a&token=x", false},
		{"/buy", "application/json", `{"sku":"a","token":"` + other + `"}`, true},
		{"/buy", "application/json", `{"sku":"a","Token":"` + other + `"}`, true},
		{"/buy", "application/json", `{"sku":"a","token":"` + string(tok) + `"}`, false},
		{"/buy", "application/json", `{"sku":"a","note":{"token":"` + other + `"}}`, false},
		{"/buy", "application/json", `{"sku":"a","token":"x","token":"y"}`, true},
		{"/buy", "multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\n" + other + "\r\n--XX--\r\n", true},
		{"/buy", "multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\n" + string(tok) + "\r\n--XX--\r\n", false},
		{"/buy", "multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n" + other + "\r\n--XX--\r\n", false},
		{"/buy", "application/json", `{"sku":"a","token":"` + other + `"} {}`, true},
		{"/buy", "application/json", `{"sku":"a","token":"` + string(tok) + `"} {}`, false},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(tt.uri)
		if tt.ctype != "" {
			ctx.Request.Header.SetContentType(tt.ctype)
			ctx.Request.SetBodyString(tt.body)
		}
		var body buyInput
		if got := tokenField(&ctx, &body, tok); got != tt.want {
			t.Errorf("%s %q: %v, want %v", tt.uri, tt.body, got, tt.want)
		}
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/api/seckill/act/sku1/buy?ref=mail&skus=2")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyString(`{"sku":"sku1","qty":1}`)
	if n := testing.AllocsPerRun(200, func() {
		var body buyInput
		if tokenField(&ctx, &body, tok) {
			t.Fatal("a plain buy judged")
		}
	}); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}
