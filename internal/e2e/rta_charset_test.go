package e2e_test

import (
	"mime"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/unicode"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rtaUTF16 is s in UTF-16 of the byte order e, without a BOM.
func rtaUTF16(t *testing.T, e unicode.Endianness, s string) []byte {
	t.Helper()
	b, err := unicode.UTF16(e, unicode.IgnoreBOM).NewEncoder().Bytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rtaCharsetForm is the form a shop that honours the body's declared
// charset reads from rq: Django decodes request.body with the
// Content-Type's charset before parsing request.POST, ASP.NET Core's
// FormPipeReader splits and decodes with it (only UTF-7 is refused), and
// Tomcat decodes field names and values with it. nil when the body is not
// an urlencoded form in a charset the model knows.
func rtaCharsetForm(t *testing.T, rq e2e.Request) url.Values {
	t.Helper()
	mt, params, err := mime.ParseMediaType(rq.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return nil
	}
	var dec *encoding.Decoder
	switch strings.ToLower(params["charset"]) {
	case "utf-16le":
		dec = unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewDecoder()
	case "utf-16be":
		dec = unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM).NewDecoder()
	case "utf-16":
		dec = unicode.UTF16(unicode.BigEndian, unicode.ExpectBOM).NewDecoder()
	case "", "utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin1":
		v, _ := url.ParseQuery(string(rq.Body))
		return v
	default:
		return nil
	}
	s, err := dec.Bytes(rq.Body)
	if err != nil {
		t.Fatalf("decode %q: %v", rq.Body, err)
	}
	v, _ := url.ParseQuery(string(s))
	return v
}

// TestRTAFormBodyInAnotherCharset: README "BAD_REQUEST" promises that a
// field the proxy decides on is read as the shop reads it, or refused: a
// second copy in a form body refuses a query: route's buy, and a form:
// route reads its fields from that body. The proxy reads a form body's
// bytes as ASCII/UTF-8 whatever charset its Content-Type declares, and
// shops honour the declared charset (rtaCharsetForm). So
//   - on a query: route, a body "sku=rare&qty=3" in UTF-16 has no field
//     the proxy can see (its names are "s\0k\0u\0"…): 1 × cheap is admitted
//     from the query and an ASP.NET Core MVC shop (form values bind before
//     the query's) orders 3 × rare;
//   - on a form: route, a body whose UTF-16 reading is
//     "sku=rare&qty=3&x=…" and whose ASCII tail is "&sku=cheap&qty=1&" is
//     1 × cheap to the proxy and 3 × rare to the shop (the tail decodes to
//     CJK characters of x's value: no byte pair of two ASCII bytes is '&'
//     or '=').
//
// Either way the shop sells a SKU and a quantity no reservation covers
// ("rare" has one unit, sold to an honest buyer first). Want 400
// BAD_REQUEST for a form body in a charset whose ASCII bytes do not mean
// ASCII text; UTF-8, US-ASCII and ISO-8859-1 still buy.
func TestRTAFormBodyInAnotherCharset(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 50}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rtcq", Path: "/rtcq/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 3},
			{ID: "rtcf", Path: "/rtcf/buy", SkuFrom: "form:sku", QtyFrom: "form:qty", SKUs: skus, Shards: 1, PerUserLimit: 3},
		}}.Config(t))
	p.Preheat(t, "rtcq")
	p.Preheat(t, "rtcf")
	const form = "application/x-www-form-urlencoded"
	wantWin(t, e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtcq/buy?sku=rare", Header: [][2]string{{"X-User-Id", "rta-honest-q"}}}))
	wantWin(t, e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtcf/buy", Header: [][2]string{{"X-User-Id", "rta-honest-f"}, {"Content-Type", form}}, Body: []byte("sku=rare")}))

	// The form route's body: UTF-16 "sku=rare&qty=3&x=" then an ASCII
	// tail of even length.
	mixed := func(e unicode.Endianness) []byte {
		return append(rtaUTF16(t, e, "sku=rare&qty=3&x="), "&sku=cheap&qty=1&A"...)
	}
	attacks := []struct {
		user, uri, ct string
		body          []byte
		note          string // what the shop reads, where rtaCharsetForm cannot tell
	}{
		{"rta-cs-q16le", "/rtcq/buy?sku=cheap&qty=1", form + "; charset=utf-16le", rtaUTF16(t, unicode.LittleEndian, "sku=rare&qty=3"), ""},
		{"rta-cs-q16", "/rtcq/buy?sku=cheap&qty=1", form + "; charset=UTF-16", append([]byte{0xfe, 0xff}, rtaUTF16(t, unicode.BigEndian, "sku=rare&qty=3")...), ""},
		{"rta-cs-f16le", "/rtcf/buy", form + ";charset=utf-16le", mixed(unicode.LittleEndian), ""},
		{"rta-cs-f16be", "/rtcf/buy", form + `; charset="utf-16be"`, mixed(unicode.BigEndian), ""},
		// Django decodes request.GET with the Content-Type's charset too,
		// whatever the media type: an odd-length query does not decode
		// as UTF-16 and falls back to ISO-8859-1, then parse_qsl decodes
		// the escapes as UTF-16 — [('sku','cheap'), ('qty','1'),
		// ('sku','rare')] (CPython), and QueryDict.get reads the last.
		{"rta-cs-qdj", "/rtcq/buy?sku=cheap&qty=1&s%00k%00u%00=r%00a%00r%00e%00", "text/plain; charset=utf-16", nil,
			"Django's request.GET['sku'] is \"rare\""},
	}
	for _, c := range attacks {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: [][2]string{{"X-User-Id", c.user}, {"Content-Type", c.ct}}, Body: c.body})
		if got.Status == 400 && got.Code == "BAD_REQUEST" {
			continue
		}
		rq, ok := rkShopReq(shop, c.user)
		if !ok {
			t.Errorf("%s: %d %s, want 400 BAD_REQUEST", c.user, got.Status, got.Body)
			continue
		}
		adm := rq.Header.Get("X-Seckill-Qty") + " × " + rq.Header.Get("X-Seckill-Sku")
		if c.note != "" {
			t.Errorf("%s (%s): admitted %s; %s (want 400)", c.user, c.ct, adm, c.note)
			continue
		}
		f := rtaCharsetForm(t, rq)
		t.Errorf("%s (%s): admitted %s; a shop honouring the declared charset reads the form as %v: %s × %s (want 400)",
			c.user, c.ct, adm, f, f.Get("qty"), f.Get("sku"))
	}

	// Controls: the charsets that are ASCII where it matters still buy.
	for i, ct := range []string{form, form + "; charset=UTF-8", form + "; charset=utf8", form + ";charset=ISO-8859-1", form + `; charset="us-ascii"`} {
		u := "rta-cs-ok" + string(rune('a'+i))
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtcf/buy", Header: [][2]string{{"X-User-Id", u}, {"Content-Type", ct}}, Body: []byte("sku=cheap&qty=1")})
		if got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE %s: %d %s", ct, got.Status, got.Body)
			continue
		}
		if rq, ok := rkShopReq(shop, u); ok {
			if f := rtaCharsetForm(t, rq); f.Get("sku") != rq.Header.Get("X-Seckill-Sku") || f.Get("qty") != rq.Header.Get("X-Seckill-Qty") {
				t.Errorf("control %s: the shop's reading %v differs from the admission %s × %s", ct, f, rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"))
			}
		}
	}
	for _, act := range []string{"rtcq", "rtcf"} {
		for _, k := range p.Status(t, act).SKUs {
			if k.ID == "rare" && (k.Remaining != 0 || k.Pending+k.Confirmed != 1) {
				t.Errorf("%s rare: %+v, want the honest buyer's unit only", act, k)
			}
		}
	}
}
