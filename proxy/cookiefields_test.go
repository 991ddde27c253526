package proxy

import (
	"slices"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/valyala/fasthttp"
)

// TestCookieFields: the names a cookie may stand in for are the buy's
// query, form and path fields, identity sources included, in PHP's
// spelling; a bundle route has the identity fields and its own captures.
func TestCookieFields(t *testing.T) {
	st := &state{
		user:   newSourceExtractor(config.Source{Query: "uid"}),
		device: newSourceExtractor(config.Source{Header: "X-Device-Id"}),
		reqID:  newSourceExtractor(config.Source{Query: "req.id"}),
	}
	a := &config.Activity{Route: config.Route{Path: "/buy/{activity}", SkuFrom: "form:item", QtyFrom: "json:/qty"},
		BundleRoute: config.BundleRoute{Path: "/bundle"}}
	f := st.cookieFieldsOf(a)
	names := func(l [][]byte) (s []string) {
		for _, n := range l {
			s = append(s, string(n))
		}
		return s
	}
	if got, want := names(f.buy), []string{"uid", "req_id", "item", "activity"}; !slices.Equal(got, want) {
		t.Errorf("buy names %q, want %q", got, want)
	}
	if got, want := names(f.bundle), []string{"uid", "req_id"}; !slices.Equal(got, want) {
		t.Errorf("bundle names %q, want %q", got, want)
	}
	for _, tt := range []struct {
		cookie string
		bundle bool
		want   bool
	}{
		{"uid=bob", false, true},
		{"uid=bob", true, true},
		{"item=x", true, false},
		{"sid=1; req id=7", false, true}, // PHP: req_id
		{"req[id]=7", false, false},      // an array named req
		{"UID=bob", false, false},
		{"u%69d=bob", false, true},
		{"x=1; activity", false, true},
		{"item_id=1; items=2", false, false},
	} {
		var h fasthttp.RequestHeader
		if err := h.Read(bufioReader("POST /buy/x HTTP/1.1\r\nHost: h\r\nCookie: " + tt.cookie + "\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if got := f.copied(&h, tt.bundle); got != tt.want {
			t.Errorf("Cookie %q (bundle %v): copied %v, want %v", tt.cookie, tt.bundle, got, tt.want)
		}
	}
	// Nothing from the query, form or path: nothing to check.
	st.user, st.reqID = newSourceExtractor(config.Source{Header: "X-User-Id"}), newSourceExtractor(config.Source{})
	if f := st.cookieFieldsOf(&config.Activity{Route: config.Route{Path: "/buy", SkuFrom: "json:/sku"}}); f != nil {
		t.Errorf("no merged field, got %+v", f)
	}
	// A plain buy with cookies checks them without allocating.
	var h fasthttp.RequestHeader
	if err := h.Read(bufioReader("POST /buy/x HTTP/1.1\r\nHost: h\r\nCookie: sid=abc; theme=dark; last=1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	f = &cookieFields{buy: [][]byte{[]byte("sku"), []byte("activity")}}
	if n := testing.AllocsPerRun(100, func() { f.copied(&h, false) }); n != 0 {
		t.Errorf("%v allocations per check", n)
	}
}
