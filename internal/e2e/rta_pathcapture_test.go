package e2e_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rtaCaptureReaders is what a shop reads for a route parameter name when
// the request also carries a field of that name, as frameworks that merge
// route parameters with request input do:
//   - a legacy PHP shop behind nginx's `rewrite ^/api/seckill/([^/]+)/([^/]+)/buy$
//     /buy.php?activity=$1&sku=$2` (nginx appends the client's query after
//     its own arguments; Apache's [QSA] does the same) reads $_REQUEST:
//     a POST body's field over the query's, and the query's last copy;
//   - ASP.NET Core MVC binds an action parameter from form values before
//     route values (the default value providers: form, route, query),
//     names in any letter case;
//   - Laravel's $request->sku reads the request's input (query, form or
//     JSON body) before the route parameter.
//
// It returns the value such a shop reads instead of the path's, or "".
func rtaCaptureReaders(t *testing.T, rq e2e.Request, name string) string {
	t.Helper()
	hr, err := http.NewRequest(rq.Method, "http://shop"+rq.URI, bytes.NewReader(rq.Body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header = rq.Header.Clone()
	if strings.Contains(strings.ToLower(hr.Header.Get("Content-Type")), "json") {
		var m map[string]any
		if json.Unmarshal(rq.Body, &m) == nil {
			for k, v := range m {
				if s, ok := v.(string); ok && strings.EqualFold(k, name) {
					return s
				}
			}
		}
	}
	_ = hr.ParseMultipartForm(1 << 20)
	_ = hr.ParseForm()
	for k, v := range hr.PostForm {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[len(v)-1]
		}
	}
	q, _ := url.ParseQuery(hr.URL.RawQuery)
	if v := q[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// TestRTAPathCaptureSecondCopy: with sku_from: path (the default route)
// the proxy judges the {sku} and {activity} path segments and forwards the
// winner with the client's query and body as sent. A query, form or JSON
// field named as the capture is a second copy of a field the proxy decides
// on (README "BAD_REQUEST": sent twice, the shop may read the other copy),
// and the shops rtaCaptureReaders describes read it over the path: a
// scalper buys /api/seckill/rtap/cheap/buy?sku=rare and the shop sells
// "rare" (stock 1, already sold) on a reservation of "cheap"; or
// ?activity=rtvip and the shop books the order in an invite-only sale the
// buyer is not on. Want 400 BAD_REQUEST, nothing reserved, nothing sent.
func TestRTAPathCaptureSecondCopy(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rtap", Shards: 1, SKUs: []config.SKU{{ID: "cheap", Stock: 50}, {ID: "rare", Stock: 1}}},
			{ID: "rtvip", Shards: 1, EligibleOnly: true, SKUs: []config.SKU{{ID: "cheap", Stock: 5}}},
		}}.Config(t))
	p.Preheat(t, "rtap")
	p.Preheat(t, "rtvip")
	const path = "/api/seckill/rtap/cheap/buy"
	form := "application/x-www-form-urlencoded"
	mpCT, mpBody := rt11fixMultipart(t, [][2]string{{"sku", "rare"}})

	// An honest buyer takes the only "rare" unit.
	wantWin(t, e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rtap/rare/buy", Header: [][2]string{{"X-User-Id", "rta-honest"}}}))

	attacks := []struct {
		user, uri, ct, body, name string
	}{
		{"rta-q", path + "?sku=rare", "", "", "sku"},
		{"rta-q2", path + "?ref=mail&sku=rare", "", "", "sku"},
		{"rta-f", path, form, "sku=rare", "sku"},
		{"rta-fcase", path, form, "SKU=rare", "sku"},
		{"rta-mp", path, mpCT, string(mpBody), "sku"},
		{"rta-j", path, "application/json", `{"sku":"rare"}`, "sku"},
		{"rta-qa", path + "?activity=rtvip", "", "", "activity"},
		{"rta-fa", path, form, "activity=rtvip", "activity"},
		{"rta-ja", path, "application/json", `{"activity":"rtvip"}`, "activity"},
	}
	for _, c := range attacks {
		h := [][2]string{{"X-User-Id", c.user}}
		if c.ct != "" {
			h = append(h, [2]string{"Content-Type", c.ct})
		}
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: h, Body: []byte(c.body)})
		if got.Status == 400 && got.Code == "BAD_REQUEST" {
			continue
		}
		if rq, ok := rkShopReq(shop, c.user); ok {
			adm := rq.Header.Get("X-Seckill-Sku")
			if c.name == "activity" {
				adm = rq.Header.Get("X-Seckill-Activity")
			}
			if v := rtaCaptureReaders(t, rq, c.name); v != "" && v != adm {
				t.Errorf("%s %s %q: admitted %s %q from the path, but the shop's request carries %s=%q, which a shop merging route parameters with the request's input reads instead (want 400)",
					c.user, c.uri, c.body, c.name, adm, c.name, v)
				continue
			}
		}
		t.Errorf("%s %s %q: %d %s, want 400 BAD_REQUEST", c.user, c.uri, c.body, got.Status, got.Body)
	}

	// Controls: other names (prefixes of the captures' included), and a
	// JSON body without them, still buy.
	controls := []struct{ user, uri, ct, body string }{
		{"rta-c1", path, "", ""},
		{"rta-c2", path + "?ref=mail&skus=2&activity_id=x&_=17", "", ""},
		{"rta-c3", path, "application/json", `{"note":"gift","items":{"sku":"x"}}`},
		{"rta-c4", path, form, "note=gift&sku_name=x"},
	}
	for _, c := range controls {
		h := [][2]string{{"X-User-Id", c.user}}
		if c.ct != "" {
			h = append(h, [2]string{"Content-Type", c.ct})
		}
		if got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: h, Body: []byte(c.body)}); got.Code != "WIN" {
			t.Errorf("FALSE POSITIVE %s %s %q: %d %s", c.user, c.uri, c.body, got.Status, got.Body)
		}
	}
	for _, k := range p.Status(t, "rtap").SKUs {
		want := map[string]int64{"cheap": 50 - int64(len(controls)), "rare": 0}[k.ID]
		if k.Remaining != want {
			t.Errorf("rtap %s: remaining %d, want %d (only the honest buyer and the controls reserve)", k.ID, k.Remaining, want)
		}
	}
	if n := len(shop.Buys()); n != 1+len(controls) {
		t.Errorf("the shop received %d buys, want %d", n, 1+len(controls))
	}
}
