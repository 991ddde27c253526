package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestPX12ArgCopies: a field name PHP cuts at a NUL, or one in another
// letter case (ASP.NET), is a second copy of the name; a name alone in
// another case is refused as FoldedOnly refuses {"QTY":3}.
func TestPX12ArgCopies(t *testing.T) {
	for _, c := range []struct{ raw, name string }{
		{"sku=cheap&sku%00=rare", "sku"}, {"qty=1&qty%00x=3", "qty"}, {"qty%00=3", "qty"},
		{"sku=cheap&QTY=3", "qty"}, {"SKU=rare&sku=cheap", "sku"}, {"Qty=3", "qty"},
		{"sku=a&%C5%BFku=b", "sku"}, {"qty=1&QTY[]=3", "qty"}, {"qty=1;qTy=3", "qty"},
	} {
		if v, err := rawArgOnce([]byte(c.raw), c.name); err == nil {
			t.Errorf("%q: %s = %q, want errTwice", c.raw, c.name, v)
		}
		rawArgsAgree(t, c.raw, c.name)
	}
	for _, c := range []struct{ raw, name, want string }{
		{"sku=a&%00sku=b", "sku", "a"}, {"sku=a&skus=b&xsku=c", "sku", "a"}, {"qty=2&qty_max=9", "qty", "2"},
	} {
		if v, err := rawArgOnce([]byte(c.raw), c.name); err != nil || string(v) != c.want {
			t.Errorf("%q: %s = %q %v, want %q", c.raw, c.name, v, err, c.want)
		}
	}
}

// TestPX12CookieOnce: a cookie PHP files under the name (its mangled
// name, or its url-decoded one before PHP 7.4.11), or one in another
// letter case, counts as a second copy; other cookies do not.
func TestPX12CookieOnce(t *testing.T) {
	twice := []string{
		"sess_id=a; sess_id=b", "sess.id=a; sess_id=b", "sess id=a; sess_id=b", "sess_id[x]=a; sess_id=b",
		"SESS_ID=a; sess_id=b", "sess%5Fid=a; sess_id=b", "sess_id; sess_id=b", "sess.id=a", "sess_id%00=a; sess_id=b",
		"sess[id=a; sess_id=b",
	}
	for _, c := range twice {
		var h fasthttp.RequestHeader
		h.Set("Cookie", c)
		if v, err := cookieOnce(&h, "sess_id"); err == nil {
			t.Errorf("%q: %q, want errTwice", c, v)
		}
	}
	for _, c := range []struct{ cookie, want string }{
		{"sess_id=b", "b"}, {"sess_idx=a; sess_id=b; xsess_id=c; sess_i=d", "b"}, {"a=1", ""}, {"sess.idx=a; sess_id=b", "b"},
	} {
		var h fasthttp.RequestHeader
		h.Set("Cookie", c.cookie)
		if v, err := cookieOnce(&h, "sess_id"); err != nil || string(v) != c.want {
			t.Errorf("%q: %q %v, want %q", c.cookie, v, err, c.want)
		}
	}
}

func TestPX12EncodedBody(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  bool
	}{
		{nil, false}, {[]string{"identity"}, false}, {[]string{"Identity, identity"}, false}, {[]string{""}, false},
		{[]string{"gzip"}, true}, {[]string{"identity", "br"}, true}, {[]string{"identity, deflate"}, true}, {[]string{"x-gzip"}, true},
	} {
		var h fasthttp.RequestHeader
		for _, l := range c.lines {
			h.Add("Content-Encoding", l)
		}
		if got := encodedBody(&h); got != c.want {
			t.Errorf("%q: %v, want %v", c.lines, got, c.want)
		}
	}
	for ct, want := range map[string]bool{"application/json": true, "application/vnd.api+JSON; charset=utf-8": true,
		"text/x-json": true, "application/x-www-form-urlencoded": false, "": false, "jso": false} {
		if jsonContentType([]byte(ct)) != want {
			t.Errorf("jsonContentType(%q) != %v", ct, want)
		}
	}
}

// TestPX12ExtractorCopies: query:/form: names against a JSON body's keys,
// json: pointers against the query, and a JSON value that is there but no
// string or number.
func TestPX12ExtractorCopies(t *testing.T) {
	req := func(uri, ct, body string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.SetMethod("POST")
		if ct != "" {
			ctx.Request.Header.SetContentType(ct)
		}
		ctx.Request.SetBodyString(body)
		return &ctx
	}
	for _, c := range []struct {
		from, uri, ct, body string
		ok                  bool
		want                string
	}{
		{"query:qty", "/b?qty=1", "application/json", `{"qty":3}`, false, ""},
		{"query:qty", "/b?qty=1", "application/json", `{"QTY":3}`, false, ""},
		{"query:qty", "/b?qty=1", "application/json", `{"note":1}`, true, "1"},
		{"query:qty", "/b?qty=1", "application/json", ``, true, "1"},
		{"query:qty", "/b?qty=1", "text/plain", `{"qty":3}`, true, "1"},
		{"query:qty", "/b?qty=1", "application/json", `{"qty":3`, false, ""},
		{"form:qty", "/b", "application/json", `{"qty":3}`, false, ""},
		{"json:/qty", "/b?qty=3", "application/json", `{"qty":1}`, false, ""},
		{"json:/qty", "/b?Qty=3", "application/json", `{"qty":1}`, false, ""},
		{"json:/order/qty", "/b?order[qty]=3", "application/json", `{"order":{"qty":1}}`, false, ""},
		{"json:/qty", "/b?qtyx=3", "application/json", `{"qty":1}`, true, "1"},
		{"json:/qty", "/b", "application/json", `{"qty":[3]}`, false, ""},
		{"json:/qty", "/b", "application/json", `{"qty":null}`, false, ""},
		{"json:/qty", "/b", "application/json", `{"qty":false}`, false, ""},
		{"json:/qty", "/b", "application/json", `{"qty":{}}`, false, ""},
		{"json:/qty", "/b", "application/json", `{"n":1}`, true, ""},
	} {
		x := newFromExtractor(c.from)
		v, err := x.get(req(c.uri, c.ct, c.body), nil, &buyInput{})
		if c.ok && (err != nil || string(v) != c.want) || !c.ok && err == nil {
			t.Errorf("%s %s %s: %q %v, want ok %v %q", c.from, c.uri, c.body, v, err, c.ok, c.want)
		}
	}
}

// TestPX12NoAllocs: the readers of a plain buy's fields allocate nothing.
func TestPX12NoAllocs(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/buy?sku=cheap&qty=2&ref=mail")
	ctx.Request.Header.Set("Cookie", "a=1; sess_id=s1; b=2")
	qx, sx := newFromExtractor("query:qty"), newFromExtractor("query:sku")
	var body buyInput
	allocs := testing.AllocsPerRun(200, func() {
		if v, err := qx.get(&ctx, nil, &body); err != nil || string(v) != "2" {
			t.Fatalf("qty %q %v", v, err)
		}
		if v, err := sx.get(&ctx, nil, &body); err != nil || string(v) != "cheap" {
			t.Fatalf("sku %q %v", v, err)
		}
		if v, err := cookieOnce(&ctx.Request.Header, "sess_id"); err != nil || string(v) != "s1" {
			t.Fatalf("cookie %q %v", v, err)
		}
		if encodedBody(&ctx.Request.Header) {
			t.Fatal("encoded")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per plain buy's fields, want 0", allocs)
	}
}
