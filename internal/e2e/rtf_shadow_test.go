package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// TestRTFShadowBundlePathUnderAnotherSalesBundleRoute: activity "live"
// (enforcing) sells bundles on /api/seckill/{activity}/bundle; activity
// "sh" runs in shadow mode in front of a shop that sells sh's bundles on
// the same path shape (shadow takes no bundle_route: the shop's bundles
// are its own). A buyer of sh's bundle was answered 404 UNKNOWN_ITEM by
// the proxy (the captured id names no activity of that route), so a shadow
// run changed what sh's buyers see. The shop must answer it, as it
// answers every other buy of a shadow activity; live's bundles, and an id
// no activity has, are judged as before.
func TestRTFShadowBundlePathUnderAnotherSalesBundleRoute(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "live", SKUs: []config.SKU{{ID: "a", Stock: 5}, {ID: "b", Stock: 5}}, PerUserLimit: 2,
			BundleRoute: `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`},
		{ID: "sh", Mode: config.ModeShadow, NoVerify: true, SKUs: []config.SKU{{ID: "a", Stock: 5}}},
	}}.Config(t))
	p.Preheat(t, "live")
	p.Preheat(t, "sh")
	body := []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`)
	bundle := func(act, user string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/" + act + "/bundle", Body: body,
			Header: [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}}})
	}
	for _, uri := range []string{"sh", "SH"} {
		got := bundle(uri, "s1")
		if uri == "sh" && (got.Err != nil || got.Header["X-Shop"] != "pass") {
			t.Errorf("sh's bundle (shadow mode): %d %s (err %v), want the shop's own answer", got.Status, got.Body, got.Err)
		}
		if uri == "SH" && got.Code != "UNKNOWN_ITEM" {
			t.Errorf("bundle of activity SH (none: ids match exactly): %d %s, want 404 UNKNOWN_ITEM", got.Status, got.Body)
		}
	}
	if got := bundle("live", "l1"); got.Code != "WIN" {
		t.Errorf("live's bundle: %d %s, want a winner", got.Status, got.Body)
	}
	if got := bundle("nosuch", "n1"); got.Code != "UNKNOWN_ITEM" {
		t.Errorf("bundle of an activity no route knows: %d %s, want 404 UNKNOWN_ITEM", got.Status, got.Body)
	}
}

// TestRTFBundleSameSKUInOtherSpellings: a bundle naming one SKU twice, in
// spellings a shop's JSON decoder reads as the same key or value (a \u
// escape, a qty as a string, a key in another case, the key held twice in
// one item, the items array held twice in another case), is refused before
// Redis and reserves nothing; a SKU in another case is no SKU of the sale.
func TestRTFBundleSameSKUInOtherSpellings(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "bs", SKUs: []config.SKU{{ID: "a", Stock: 3}, {ID: "b", Stock: 3}}, PerUserLimit: 3, Shards: 1,
			BundleRoute: `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`},
	}}.Config(t))
	p.Preheat(t, "bs")
	for i, tc := range []struct{ body, want string }{
		{`{"items":[{"sku":"a","qty":1},{"sku":"\u0061","qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1},{"sku":"a","qty":"1"}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1},{"SKU":"a","qty":1}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"b","sku":"a","qty":1},{"sku":"a"}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a"}],"Items":[{"sku":"a"},{"sku":"a"}]}`, "BAD_REQUEST"},
		{`{"items":[{"sku":"a","qty":1},{"sku":"A","qty":1}]}`, "UNKNOWN_ITEM"},
		{`{"items":[{"sku":"a","qty":1},{"sku":"a ","qty":1}]}`, "UNKNOWN_ITEM"},
	} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/bs/bundle", Body: []byte(tc.body),
			Header: [][2]string{{"X-User-Id", "u" + string(rune('0'+i))}, {"Content-Type", "application/json"}}})
		if got.Code != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.body, got.Status, got.Body, tc.want)
		}
	}
	for _, k := range p.Status(t, "bs").SKUs {
		if k.Remaining != 3 || k.Pending != 0 || k.Confirmed != 0 {
			t.Errorf("sku %s: %+v, want untouched", k.ID, k)
		}
	}
}

// TestRTFGoingLiveMidDayPreheatSeesTheShadowRunsSales: activity "mid" ran
// in shadow mode since its start and the shop sold 3 units of sku a to
// shadowed buyers (no token: the shop took them itself). The operator
// switches it to mode: sync by a reload, and preheats: the lost-sale check
// (verify.count_url counts *tokened* orders, none) let the full configured
// stock load, and the shop would sell those 3 units again. The preheat
// must refuse, saying what the shadow run sold (--force loads anyway).
func TestRTFGoingLiveMidDayPreheatSeesTheShadowRunsSales(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "mid", Mode: config.ModeShadow, NoVerify: true, SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}},
	}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "mid") // the shadow copy
	for i := 0; i < 3; i++ {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/mid/a/buy", Header: [][2]string{{"X-User-Id", "m" + string(rune('0'+i))}}})
		if got.Status != 200 {
			t.Fatalf("shadowed buy: %d %s", got.Status, got.Body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Server.WaitShadow(ctx); err != nil {
		t.Fatal(err)
	}

	opts.Activities[0].Mode = config.ModeSync
	next := opts.Config(t)
	next.Listen, next.Admin.Listen = p.Cfg.Listen, p.Cfg.Admin.Listen
	if err := p.Server.Apply(next); err != nil {
		t.Fatalf("reload to sync: %v", err)
	}
	p.Pipeline.Apply(next)
	live := next.Activity("mid")
	why, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).PreheatRefusal(ctx, live, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "3 unit(s) of sku a") {
		t.Errorf("preheat of mid, live after a shadow run whose shop sold 3 units of a: refusal %q, want one naming them", why)
	}
	if why, _ := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).PreheatRefusal(ctx, live, live.Start.Add(-time.Second)); why != "" {
		t.Errorf("before the window: refusal %q", why)
	}
}

// TestRTFShadowCopyNotAddressable: a client naming the shadow copy's id
// (`sh~shadow`, plain or percent-encoded) on the buy route does not get the
// copy's enforcing decision, a token or a forwarded winner: it is no
// activity of the config (404), and the copy's stock is untouched.
func TestRTFShadowCopyNotAddressable(t *testing.T) {
	shop, p := rmShadowFixture(t, "", func(a *e2e.Activity) { a.SKUs = []config.SKU{{ID: "a", Stock: 5}} })
	for _, uri := range []string{"/api/seckill/sh~shadow/a/buy", "/api/seckill/sh%7Eshadow/a/buy", "/api/seckill/sh%7eshadow/a/buy"} {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: uri, Header: [][2]string{{"X-User-Id", "c1"}}})
		if got.Code != "UNKNOWN_ITEM" || got.Token() != "" {
			t.Errorf("%s: %d %s (token %q), want 404 UNKNOWN_ITEM", uri, got.Status, got.Body, got.Token())
		}
	}
	if shop.SeenBuy("c1") {
		t.Errorf("the shop got a buy naming the shadow copy")
	}
	for _, k := range p.Status(t, "sh").SKUs {
		if k.Remaining != 5 || k.Pending != 0 || k.Confirmed != 0 {
			t.Errorf("shadow copy's sku %s: %+v, want untouched", k.ID, k)
		}
	}
}
