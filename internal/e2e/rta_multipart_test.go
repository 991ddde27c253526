package e2e_test

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rtaMultipartRaw is a multipart/form-data body with one part per
// Content-Disposition parameter list given (the value of each part is
// "rare"), and its Content-Type.
func rtaMultipartRaw(dispositions ...string) (ct string, body []byte) {
	const boundary = "rtaBoundary7MA4YWxkTrZu0gW"
	var b bytes.Buffer
	for _, d := range dispositions {
		b.WriteString("--" + boundary + "\r\nContent-Disposition: form-data; " + d + "\r\n\r\nrare\r\n")
	}
	b.WriteString("--" + boundary + "--\r\n")
	return "multipart/form-data; boundary=" + boundary, b.Bytes()
}

// rtaMultipartNames is the field names of a multipart body as shops decode
// them: the Content-Disposition parsed as RFC 7578 / RFC 2231 allow (Go's
// mime.ParseMediaType and Django's parse_header_parameters decode
// `name*=UTF-8'en'…` and take white space around '='), then an RFC 2047
// encoded word decoded (ASP.NET Core's ContentDispositionHeaderValue.Name
// does, for the B encoding: TryDecodeMime).
func rtaMultipartNames(t *testing.T, ct string, body []byte) map[string]string {
	t.Helper()
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	out := map[string]string{}
	var wd mime.WordDecoder
	for {
		part, err := mr.NextRawPart()
		if err != nil {
			break
		}
		v, _ := io.ReadAll(part)
		_, dp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil {
			continue
		}
		name := dp["name"]
		if d, err := wd.DecodeHeader(name); err == nil {
			name = d
		}
		out[name] = string(v)
	}
	return out
}

// TestRTAMultipartNameSpellings: a query: route refuses a buy whose
// multipart body has a part a shop reads under the field's name (README
// "BAD_REQUEST"; decisions §35: PHP's $_REQUEST, Rails, Laravel and
// ASP.NET Core MVC read the body's copy over the query's). The proxy finds
// such parts by a `name=` in the raw body; a part named in a spelling that
// parsers decode — RFC 2231's `name*=UTF-8'en'sku` (Django, Go), an RFC 2047
// word `name="=?utf-8?B?c2t1?="` (ASP.NET Core), white space around the
// '=' (Django, ASP.NET Core and Go's mime accept it) — was no copy to the
// proxy: it admitted 1 × cheap from the query and the shop read "rare".
func TestRTAMultipartNameSpellings(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 50}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rtmp", Path: "/rtmp/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 3}}}.Config(t))
	p.Preheat(t, "rtmp")
	wantWin(t, e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtmp/buy?sku=rare", Header: [][2]string{{"X-User-Id", "rta-mp-honest"}}}))

	for i, d := range []string{
		`name*=UTF-8'en'sku`,
		`name*=utf-8''%73ku`,
		`name="=?utf-8?B?c2t1?="`,
		`name="=?UTF-8?Q?sku?="`,
		`name ="sku"`,
		`name= "sku"`,
	} {
		u := "rta-mp-" + string(rune('a'+i))
		ct, body := rtaMultipartRaw(d)
		if names := rtaMultipartNames(t, ct, body); names["sku"] != "rare" {
			t.Logf("model: %s is read as %v (no sku)", d, names)
		}
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtmp/buy?sku=cheap&qty=1", Header: [][2]string{{"X-User-Id", u}, {"Content-Type", ct}}, Body: body})
		if got.Status == 400 && got.Code == "BAD_REQUEST" {
			continue
		}
		if rq, ok := rkShopReq(shop, u); ok {
			names := rtaMultipartNames(t, rq.Header.Get("Content-Type"), rq.Body)
			q, _ := url.ParseQuery(rq.Query)
			t.Errorf("part %s: admitted %s × %s from the query %v; the shop decodes the part as %v, and reads sku %q from the body over the query's (want 400)",
				d, rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), q, names, names["sku"])
			continue
		}
		t.Errorf("part %s: %d %s, want 400 BAD_REQUEST", d, got.Status, got.Body)
	}
	// Control: a multipart body of other fields still buys.
	ct, body := rtaMultipartRaw(`name="note"`, `name="sku_name"`, `name="csrf"; filename="x.txt"`)
	if got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rtmp/buy?sku=cheap&qty=1", Header: [][2]string{{"X-User-Id", "rta-mp-ok"}, {"Content-Type", ct}}, Body: body}); got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE multipart of other fields: %d %s", got.Status, got.Body)
	}
	for _, k := range p.Status(t, "rtmp").SKUs {
		if k.ID == "rare" && (k.Remaining != 0 || k.Pending+k.Confirmed != 1) {
			t.Errorf("rare: %+v, want the honest buyer's unit only", k)
		}
	}
}
