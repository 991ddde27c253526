package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestSkuAndQtySources buys through each sku_from / qty_from form and checks
// what the shop was told.
func TestSkuAndQtySources(t *testing.T) {
	f := newFixture(t)
	form := [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}
	tests := []struct {
		name, act, user string
		give            e2e.Req
		wantQty         string
	}{
		{"path", actOpen, "u-path", e2e.Req{URI: "/api/seckill/open/sku1/buy"}, "1"},
		{"query", actQuery, "u-query", e2e.Req{URI: "/q/buy?sku=sku1&qty=2"}, "2"},
		{"query without qty", actQuery, "u-query1", e2e.Req{URI: "/q/buy?sku=sku1"}, "1"},
		{"form", actForm, "u-form", e2e.Req{URI: "/f/buy", Header: form, Body: []byte("sku=sku1&qty=3")}, "3"},
		{"json", actJSON, "u-json", e2e.Req{URI: "/j/buy", Body: []byte(`{"item":{"sku":"sku1"},"qty":2}`)}, "2"},
		{"json qty as string", actJSON, "u-json2", e2e.Req{URI: "/j/buy", Body: []byte(`{"qty":"1","item":{"sku":"sku1"}}`)}, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.Header = append(tt.give.Header, [2]string{"X-User-Id", tt.user})
			r := f.do(tt.give)
			wantWin(t, r)
			o, ok := f.shop.Orders()[r.Token()]
			if !ok || !o.SigOK || o.User != tt.user || o.Activity != tt.act || o.SKU != e2e.SKU || o.Qty != tt.wantQty {
				t.Errorf("order = %+v (found %v), want %s/%s/%s qty %s, signed", o, ok, tt.act, e2e.SKU, tt.user, tt.wantQty)
			}
		})
	}
	// qty 2 and 3 leave 8 and 7 of 10; the shop's body arrived intact.
	if k := f.p.Status(t, actForm).SKUs[0]; k.Remaining != 7 || k.Confirmed != 3 || !k.OK {
		t.Errorf("form status %+v", k)
	}
	for _, rq := range f.shop.Requests() {
		if rq.Path == "/f/buy" && string(rq.Body) != "sku=sku1&qty=3" {
			t.Errorf("shop got body %q", rq.Body)
		}
	}
}

func TestUserFromCookie(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.User = "{ cookie: uid }" })
	r := f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"Cookie", "theme=dark; uid=alice"}}})
	wantWin(t, r)
	if o := f.shop.Orders()[r.Token()]; o.User != "alice" {
		t.Errorf("shop was told user %q", o.User)
	}
	wantCode(t, f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"X-User-Id", "bob"}}}), "BAD_REQUEST", 400)
}

func TestUserFromQuery(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.User = "{ query: uid }" })
	r := f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy?uid=bob"})
	wantWin(t, r)
	if o := f.shop.Orders()[r.Token()]; o.User != "bob" {
		t.Errorf("shop was told user %q", o.User)
	}
	for _, q := range []string{"", "?uid=", "?uid=b%01ob", "?uid=b%7Cob", "?uid=b%FFob", "?uid=b%0Aob"} {
		wantCode(t, f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy" + q}), "BAD_REQUEST", 400)
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}
