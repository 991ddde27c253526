package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRTABuyChecksNoAllocs: the checks a plain buy now pays for (its path
// {sku} and {activity} have no second copy, its Content-Type declares no
// foreign charset, it carries no method override) allocate nothing. (A
// buy with a JSON body pays jsonptr.HasKey's look-up, as a query: route's
// buy already did.)
func TestRTABuyChecksNoAllocs(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/api/seckill/act/sku1/buy?ref=mail&skus=2")
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.Set("X-User-Id", "alice")
	ctx.Request.Header.Set("Content-Type", "text/plain; charset=UTF-8")
	px := newFromExtractor("path")
	var body buyInput
	ok := true
	allocs := testing.AllocsPerRun(200, func() {
		v, err := px.get(&ctx, []byte("sku1"), &body)
		ok = ok && err == nil && string(v) == "sku1" && captureCopy(&ctx, &body, "activity") == nil &&
			!foreignCharset(&ctx.Request.Header) && !overridesMethod(&ctx, "POST", stripSeckillHeaders(&ctx.Request.Header).may(factOverride))
	})
	if !ok {
		t.Fatal("a plain buy refused")
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per plain buy's checks, want 0", allocs)
	}
}

// TestRTAForeignCharset: charsets whose bytes below 0x80 are ASCII pass,
// any other (in any charset parameter of the Content-Type) is foreign.
func TestRTAForeignCharset(t *testing.T) {
	for _, tt := range []struct {
		ct   string
		want bool
	}{
		{"", false},
		{"application/json", false},
		{"application/x-www-form-urlencoded; charset=UTF-8", false},
		{`text/plain;charset="us-ascii"`, false},
		{"application/x-www-form-urlencoded;charset=ISO-8859-1", false},
		{"application/x-www-form-urlencoded; charset=", false},
		{"multipart/form-data; boundary=x-charset=utf-16", false},
		{"application/x-www-form-urlencoded; charset=utf-16le", true},
		{"text/plain; CHARSET = UTF-16", true},
		{`application/x-www-form-urlencoded; charset="utf-32"`, true},
		{"application/x-www-form-urlencoded; charset=utf-8; charset=ibm037", true},
		{"application/json; charset=utf-7", true},
	} {
		var h fasthttp.RequestHeader
		if tt.ct != "" {
			h.Set("Content-Type", tt.ct)
		}
		if got := foreignCharset(&h); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.ct, got, tt.want)
		}
	}
}

// TestCannotName: a JSON body is left undecoded for a key only when no
// parser could read that key from it.
func TestCannotName(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`{"qty":1,"address_id":12}`, true},
		{"{\n\t\"coupon\": \"X\"\r\n}", true},
		{`{"sku":"rare"}`, false},
		{`{"SkU":"rare"}`, false},
		{`{sku:'rare'}`, false},            // lenient parsers: unquoted keys
		{`{"\u0073ku":"rare"}`, false},     // an escape
		{`{"s\u006bu":"rare"}`, false},     // an escape
		{"{\"\u017fku\":\"rare\"}", false}, // ſ: encoding/json folds it to s
		{"{\x00\"\x00s\x00k\x00u", false},  // UTF-16
		{`{"a":"%73ku"}`, false},
		{`{"a":1}x`, true},     // malformed, but names nothing: the shop's to refuse
		{`{"desku":1}`, false}, // the letters in a row: decoded
	} {
		if got := cannotName([]byte(tt.body), "sku"); got != tt.want {
			t.Errorf("cannotName(%q, sku) = %v, want %v", tt.body, got, tt.want)
		}
	}
	body := []byte(`{"qty":1,"address_id":12,"coupon":"SKX"}`)
	if n := testing.AllocsPerRun(100, func() { cannotName(body, "activity") }); n != 0 {
		t.Errorf("cannotName allocates %v times", n)
	}
	if cannotName([]byte(`{"qty":1}`), "\u212aey") {
		t.Error("a non-ASCII name is never judged by the scan")
	}
}
