package e2e_test

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestJD13RailsParamsWrapperQty: sku from the path, qty_from
// json:/order/qty (a Rails OrdersController reading
// params.require(:order).permit(:qty)). The body {"qty":5} has no "order"
// key: the proxy finds no /order/qty and takes qty 1. Rails' ParamsWrapper
// (on for JSON by default: wrap_parameters format: [:json], Rails 7's
// wrap_parameters_by_default) copies a JSON body's top-level keys under
// the controller's key when the body has none: params[:order][:qty] is 5.
// The shop orders 5 units against a reservation of 1 (README: a field the
// shop could read differently is 400; Rails' merge of the query is
// already refused). Want 400 when a json: pointer's first name is absent
// and its last name is a top-level key.
func TestJD13RailsParamsWrapperQty(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "jd13w", QtyFrom: "json:/order/qty", Stock: 50, Shards: 1, PerUserLimit: 5}}}.Config(t))
	p.Preheat(t, "jd13w")
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/jd13w/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", "jd13-wrap"}, {"Content-Type", "application/json"}}, Body: []byte(`{"qty":5}`)})
	if got.Code != "BAD_REQUEST" {
		t.Errorf(`{"qty":5} on qty_from json:/order/qty: %d %s (X-Seckill-Qty %q at the shop); a Rails shop reads params[:order][:qty] = 5; want 400`,
			got.Status, got.Code, lastQty(shop))
	}
	// Legit: the nested qty wins.
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/jd13w/" + e2e.SKU + "/buy",
		Header: [][2]string{{"X-User-Id", "jd13-wrap-ok"}, {"Content-Type", "application/json"}}, Body: []byte(`{"order":{"qty":2}}`)})
	if got.Code != "WIN" {
		t.Errorf("FALSE POSITIVE nested qty: %d %s %s", got.Status, got.Code, got.Body)
	}
}

func lastQty(s *e2e.Shop) string {
	reqs := s.Requests()
	if len(reqs) == 0 {
		return ""
	}
	return reqs[len(reqs)-1].Header.Get("X-Seckill-Qty")
}
