package e2e_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rb12ShopBuy is the shop's record of the buy of user (a request carrying
// the proxy's token), or false when the shop never saw one.
func rb12ShopBuy(shop *e2e.Shop, user string) (e2e.Request, bool) {
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-User") == user && r.Header.Get("X-Seckill-Token") != "" {
			return r, true
		}
	}
	return e2e.Request{}, false
}

// rb12Want400 fails t unless got is the SPEC's 400 BAD_REQUEST (the fix:
// refused before anything is reserved, not merely kept from the shop).
func rb12Want400(t *testing.T, what string, got e2e.Resp) {
	t.Helper()
	if got.Status != 400 || got.Code != "BAD_REQUEST" {
		t.Errorf("%s: %d %s, want 400 BAD_REQUEST", what, got.Status, got.Body)
	}
}

// rb12JSNumber is JavaScript's Number(v) for a value JSON.parse gave
// (Express' body-parser, then `Number(req.body.qty)` / `+req.body.qty` /
// `parseInt(req.body.qty, 10)` in a Node shop): an array of one element is
// that element's number ([3] → 3, ["3"] → 3), true is 1, null is 0; an
// object is NaN (-1 here).
func rb12JSNumber(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		var f float64
		if err := json.Unmarshal([]byte(strings.TrimSpace(x)), &f); err != nil {
			return -1
		}
		return f
	case bool:
		if x {
			return 1
		}
		return 0
	case nil:
		return 0
	case []any:
		switch len(x) {
		case 0:
			return 0
		case 1:
			if _, nested := x[0].([]any); !nested {
				return rb12JSNumber(x[0])
			}
		}
	}
	return -1
}

// TestRB12JSONQtyArrayAdmittedAsOne: with qty_from json:/qty, a qty that
// is not a JSON string or number ({"qty":[3]}, {"qty":true},
// {"qty":null}) is taken by the proxy as *absent*, i.e. qty 1
// (proxy/request.go extractor.get: jsonptr.Lookup returns "", false for
// anything but a string or a number, and get returns nil, nil; parseWait
// then leaves req.Qty = 1). The body goes to the shop unchanged. A Node
// shop (body-parser + Number(req.body.qty), +qty, parseInt) reads [3] as
// 3, ["3"] as 3: one reserved unit, three ordered — past max_qty and
// per_user_limit 1. The bundle parser already refuses such a qty
// (proxy/bundle.go parseItems: "default: BadRequest"), and SPEC says qty
// out of range / malformed body is 400. Want: 400 BAD_REQUEST for a qty
// that is present but not a string or number.
func TestRB12JSONQtyArrayAdmittedAsOne(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rb12jq", Path: "/rb12jq/buy", SkuFrom: "json:/sku", QtyFrom: "json:/qty",
			Stock: 10, Shards: 1, PerUserLimit: 1}}}.Config(t))
	p.Preheat(t, "rb12jq")

	// Control: a plain qty above max_qty is refused.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12jq/buy", Header: [][2]string{{"X-User-Id", "rb12-ctl"}, {"Content-Type", "application/json"}},
		Body: []byte(`{"sku":"sku1","qty":3}`)})
	if got.Status != 400 {
		t.Fatalf("control {qty:3} with max_qty 1: %d %s, want 400", got.Status, got.Body)
	}

	bad := 0
	for i, body := range []string{`{"sku":"sku1","qty":[3]}`, `{"sku":"sku1","qty":["5"]}`, `{"sku":"sku1","qty":{"n":7}}`,
		`{"sku":"sku1","qty":true}`, `{"sku":"sku1","qty":null}`, `{"sku":["sku1"],"qty":1}`, `{"sku":null}`} {
		user := "rb12-jq" + string(rune('a'+i))
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12jq/buy", Header: [][2]string{{"X-User-Id", user}, {"Content-Type", "application/json"}},
			Body: []byte(body)})
		rq, sent := rb12ShopBuy(shop, user)
		if !sent {
			rb12Want400(t, body, got)
			continue
		}
		var m map[string]any
		_ = json.Unmarshal(rq.Body, &m)
		js := rb12JSNumber(m["qty"])
		t.Logf("%s: answer %d %s; shop got X-Seckill-Qty %s, body %s, Number(body.qty) = %v",
			body, got.Status, got.Code, rq.Header.Get("X-Seckill-Qty"), rq.Body, js)
		bad++
		if js > 1 {
			t.Errorf("BUG: body %s admitted as qty %s (per_user_limit 1, max_qty 1) and forwarded unchanged: a Node shop's Number(req.body.qty) orders %v units",
				body, rq.Header.Get("X-Seckill-Qty"), js)
		} else {
			t.Errorf("BUG: body %s (qty present, not a number or string) admitted as qty %s instead of 400",
				body, rq.Header.Get("X-Seckill-Qty"))
		}
	}
	if bad > 0 {
		t.Logf("status: %+v", p.SKUStatus(t, "rb12jq"))
	}
}

// rb12PHPArgs is PHP's $_GET / $_POST for an urlencoded string
// (main/php_variables.c php_default_treat_data + php_register_variable_ex):
// fields split on '&', name and value url-decoded, then the *name* is a C
// string — var_len = strlen(var_name) — so it ends at the first NUL byte;
// leading spaces dropped; ' ' and '.' become '_'; "name[...]" is an array
// named name. The last field of a name wins.
func rb12PHPArgs(raw string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		dv, _ := url.QueryUnescape(v)
		if i := strings.IndexByte(dk, 0); i >= 0 {
			dk = dk[:i] // strlen
		}
		dk = strings.TrimLeft(dk, " ")
		var b strings.Builder
		for _, c := range []byte(dk) {
			if c == '[' {
				break
			}
			if c == ' ' || c == '.' {
				c = '_'
			}
			b.WriteByte(c)
		}
		if b.Len() > 0 {
			out[b.String()] = dv
		}
	}
	return out
}

// TestRB12PHPNulTruncatedName: the proxy refuses a field a PHP shop could
// read as a second copy of sku/qty (proxy/args.go argCopies/phpArgName:
// "sku.id", " sku", "sku[]"), but PHP also ends a field's *name* at its
// first NUL byte (php_register_variable_ex: var_len = strlen(var_name),
// after the in-place url-decode), and phpArgName does not. So
// ?sku=cheap&qty=1&sku%00=rare&qty%00=3 is admitted as 1 × cheap (the
// proxy's fasthttp reading sees "sku\x00" and "qty\x00" as other names)
// and forwarded as is; PHP's $_GET says sku=rare, qty=3 (the last copy
// wins). One unit of the cheap SKU reserved, three rare ones ordered.
// Same for form bodies ($_POST goes through the same function).
// Want: 400 BAD_REQUEST (a second copy), as for "qty[]".
func TestRB12PHPNulTruncatedName(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rb12nq", Path: "/rb12nq/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
			{ID: "rb12nf", Path: "/rb12nf/buy", SkuFrom: "form:sku", QtyFrom: "form:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
		}}.Config(t))
	p.Preheat(t, "rb12nq")
	p.Preheat(t, "rb12nf")

	// Control: the spelling the tenth round closed is refused.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12nq/buy?sku=cheap&qty=1&qty[]=3", Header: [][2]string{{"X-User-Id", "rb12-ctl"}}})
	if got.Status != 400 {
		t.Fatalf("control qty[]: %d %s, want 400", got.Status, got.Body)
	}

	check := func(what, user, raw string) {
		rq, sent := rb12ShopBuy(shop, user)
		if !sent {
			t.Logf("%s: refused (fine)", what)
			return
		}
		php := rb12PHPArgs(raw)
		admSKU, admQty := rq.Header.Get("X-Seckill-Sku"), rq.Header.Get("X-Seckill-Qty")
		t.Logf("%s: admitted %s × %s; PHP reads sku=%q qty=%q", what, admQty, admSKU, php["sku"], php["qty"])
		if php["sku"] != admSKU || php["qty"] != admQty {
			t.Errorf("BUG (%s): admitted %s × %s, forwarded %q; PHP ends the field name at NUL and reads %s × %s",
				what, admQty, admSKU, raw, php["qty"], php["sku"])
		}
	}

	q := "sku=cheap&qty=1&sku%00=rare&qty%00=3"
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12nq/buy?" + q, Header: [][2]string{{"X-User-Id", "rb12-nq"}}})
	t.Logf("query: %d %.120s", got.Status, got.Body)
	rb12Want400(t, "query "+q, got)
	if rq, ok := rb12ShopBuy(shop, "rb12-nq"); ok {
		check("query", "rb12-nq", rq.Query)
	}

	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12nf/buy", Header: [][2]string{{"X-User-Id", "rb12-nf"}, {"Content-Type", "application/x-www-form-urlencoded"}},
		Body: []byte(q)})
	t.Logf("form: %d %.120s", got.Status, got.Body)
	rb12Want400(t, "form "+q, got)
	if rq, ok := rb12ShopBuy(shop, "rb12-nf"); ok {
		check("form", "rb12-nf", string(rq.Body))
	}
}

// TestRB12QtyInQueryAndJSONBody: a field the proxy decides on, sent in
// both the query and a form body, is refused (README BAD_REQUEST: "the
// name in both the query and a form body"; proxy/request.go get checks an
// urlencoded body and a multipart one for a query: field, the query for a
// form: field) because Laravel and Rails merge them. They merge a JSON
// body just the same, and the proxy checks neither direction:
//
//   - query:sku / query:qty with a JSON body {"sku":"rare","qty":3}:
//     Laravel's $request->input() is the JSON body's keys over the query's
//     (getInputSource()->all() + query->all()), so it reads 3 × rare;
//   - json:/sku / json:/qty with ?sku=rare&qty=3 in the query: Rails'
//     params is request_parameters (the JSON body) merged with
//     query_parameters, the query winning, so it reads 3 × rare.
//
// Either way one unit of "cheap" is reserved (per_user_limit 1) and the
// shop orders three of "rare". Want: 400, as for the form spellings.
func TestRB12QtyInQueryAndJSONBody(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rb12qj", Path: "/rb12qj/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
			{ID: "rb12jq2", Path: "/rb12jq2/buy", SkuFrom: "json:/sku", QtyFrom: "json:/qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
			{ID: "rb12fq", Path: "/rb12fq/{sku}/buy", SkuFrom: "path", QtyFrom: "form:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
		}}.Config(t))
	p.Preheat(t, "rb12qj")
	p.Preheat(t, "rb12jq2")
	p.Preheat(t, "rb12fq")

	// Control: the urlencoded spelling is refused.
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12qj/buy?sku=cheap&qty=1",
		Header: [][2]string{{"X-User-Id", "rb12-ctl"}, {"Content-Type", "application/x-www-form-urlencoded"}}, Body: []byte("sku=rare&qty=3")})
	if got.Status != 400 {
		t.Fatalf("control (urlencoded body): %d %s, want 400", got.Status, got.Body)
	}

	// 1. query: fields, JSON body: Laravel reads the body's.
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12qj/buy?sku=cheap&qty=1",
		Header: [][2]string{{"X-User-Id", "rb12-lv"}, {"Content-Type", "application/json"}}, Body: []byte(`{"sku":"rare","qty":3}`)})
	t.Logf("query fields + JSON body: %d %s", got.Status, got.Code)
	rb12Want400(t, "query fields + JSON body", got)
	if rq, ok := rb12ShopBuy(shop, "rb12-lv"); ok {
		var body map[string]any
		_ = json.Unmarshal(rq.Body, &body)
		q, _ := url.ParseQuery(rq.Query)
		input := func(k string) string { // Laravel input(): JSON body over query
			if v, ok := body[k]; ok {
				return strings.Trim(string(rb12MustJSON(v)), `"`)
			}
			return q.Get(k)
		}
		t.Logf("admitted %s × %s; Laravel input() reads %s × %s", rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), input("qty"), input("sku"))
		if input("sku") != rq.Header.Get("X-Seckill-Sku") || input("qty") != rq.Header.Get("X-Seckill-Qty") {
			t.Errorf("BUG: query sku/qty with a JSON body: admitted %s × %s, Laravel's $request->input() reads %s × %s from the JSON body",
				rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), input("qty"), input("sku"))
		}
	}

	// 2. json: fields, the same names in the query: Rails reads the query's.
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12jq2/buy?sku=rare&qty=3",
		Header: [][2]string{{"X-User-Id", "rb12-rl"}, {"Content-Type", "application/json"}}, Body: []byte(`{"sku":"cheap","qty":1}`)})
	t.Logf("JSON fields + query: %d %s", got.Status, got.Code)
	rb12Want400(t, "JSON fields + query", got)
	if rq, ok := rb12ShopBuy(shop, "rb12-rl"); ok {
		var body map[string]any
		_ = json.Unmarshal(rq.Body, &body)
		q, _ := url.ParseQuery(rq.Query)
		params := func(k string) string { // Rails params: query over JSON body
			if q.Has(k) {
				return q.Get(k)
			}
			return strings.Trim(string(rb12MustJSON(body[k])), `"`)
		}
		t.Logf("admitted %s × %s; Rails params reads %s × %s", rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), params("qty"), params("sku"))
		if params("sku") != rq.Header.Get("X-Seckill-Sku") || params("qty") != rq.Header.Get("X-Seckill-Qty") {
			t.Errorf("BUG: JSON sku/qty with the same names in the query: admitted %s × %s, Rails' params reads %s × %s from the query",
				rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), params("qty"), params("sku"))
		}
	}

	// 3. form:qty, and the body is JSON instead of a form: the proxy finds
	// no form, takes qty 1; Laravel's input() and Rails' params parse the
	// JSON body by its Content-Type and read qty 3.
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12fq/rare/buy",
		Header: [][2]string{{"X-User-Id", "rb12-fj"}, {"Content-Type", "application/json"}}, Body: []byte(`{"qty":3}`)})
	t.Logf("form:qty, JSON body: %d %s", got.Status, got.Code)
	rb12Want400(t, "form:qty, JSON body", got)
	if rq, ok := rb12ShopBuy(shop, "rb12-fj"); ok {
		var body map[string]any
		_ = json.Unmarshal(rq.Body, &body)
		js := strings.Trim(string(rb12MustJSON(body["qty"])), `"`)
		t.Logf("admitted %s × %s; Laravel/Rails read qty %s from the JSON body", rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku"), js)
		if js != rq.Header.Get("X-Seckill-Qty") {
			t.Errorf("BUG: form:qty with a JSON body: admitted qty %s (no form found: qty 1), Laravel's input()/Rails' params read qty %s",
				rq.Header.Get("X-Seckill-Qty"), js)
		}
	}
}

func rb12MustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestRB12QtyOtherLetterCase: a qty_from query:/form: field that is
// absent means qty 1 (proxy/server.go parseWait: req.Qty stays 1 when
// the extractor returns nil), and the extractor matches the name in its
// exact case (proxy/args.go argKeyIs/argCopies with fold=false; only
// _method is folded). ASP.NET Core keeps the query and the form in
// case-insensitive collections (QueryCollection, FormCollection; model
// binding of `int qty` looks the key up in any case and binds the first
// value), as classic ASP.NET's Request.QueryString does. So
// /buy?sku=cheap&QTY=3 is admitted as one unit and an ASP.NET shop orders
// three; /buy?SKU=rare&sku=cheap reserves "cheap" and binds sku "rare". The JSON reader already refuses
// a key in another case (jsonptr.FoldedOnly, "QTY" in a body, a red-team
// find) for the same reason. Want: 400 for a field a case-insensitive
// reader takes as qty/sku.
func TestRB12QtyOtherLetterCase(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rb12cq", Path: "/rb12cq/buy", SkuFrom: "query:sku", QtyFrom: "query:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
			{ID: "rb12cf", Path: "/rb12cf/buy", SkuFrom: "form:sku", QtyFrom: "form:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
		}}.Config(t))
	p.Preheat(t, "rb12cq")
	p.Preheat(t, "rb12cf")

	// aspnet is an ASP.NET Core reading of an urlencoded string: keys in
	// any case, the first value bound to a scalar.
	aspnet := func(raw, name string) string {
		for _, kv := range strings.Split(raw, "&") {
			k, v, _ := strings.Cut(kv, "=")
			dk, _ := url.QueryUnescape(k)
			if strings.EqualFold(dk, name) {
				dv, _ := url.QueryUnescape(v)
				return dv
			}
		}
		return ""
	}
	for _, c := range []struct{ user, uri, ct, body string }{
		{"rb12-cq", "/rb12cq/buy?sku=cheap&QTY=3", "", ""},
		{"rb12-cf", "/rb12cf/buy", "application/x-www-form-urlencoded", "sku=cheap&Qty=3"},
		{"rb12-cs", "/rb12cq/buy?SKU=rare&sku=cheap", "", ""},
	} {
		h := [][2]string{{"X-User-Id", c.user}}
		var body []byte
		if c.ct != "" {
			h = append(h, [2]string{"Content-Type", c.ct})
			body = []byte(c.body)
		}
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: c.uri, Header: h, Body: body})
		rq, ok := rb12ShopBuy(shop, c.user)
		if !ok {
			rb12Want400(t, c.uri+" "+c.body, got)
			continue
		}
		raw := rq.Query
		if c.ct != "" {
			raw = string(rq.Body)
		}
		qty, sku := aspnet(raw, "qty"), aspnet(raw, "sku")
		if qty == "" {
			qty = "1"
		}
		admQty, admSKU := rq.Header.Get("X-Seckill-Qty"), rq.Header.Get("X-Seckill-Sku")
		t.Logf("%s %s: %d %s; admitted %s × %s, ASP.NET binds %s × %s", c.uri, c.body, got.Status, got.Code, admQty, admSKU, qty, sku)
		if qty != admQty || sku != admSKU {
			t.Errorf("BUG: %s %s admitted as %s × %s (per_user_limit 1); a case-insensitive reader (ASP.NET Core binds the first value of any case) orders %s × %s",
				c.uri, c.body, admQty, admSKU, qty, sku)
		}
	}
}

// TestRB12QtyInCompressedForm: a buy body with Content-Encoding: gzip is
// read by the proxy as it is — compressed bytes — so a form:qty field in
// it is not found (qty 1, proxy/args.go formBody/rawArgOnce scan the raw
// body), and the query/form duplicate check (get, case "query") finds no
// form copy either. The request goes to the shop unchanged. Express'
// body-parser (express.urlencoded(), express.json()) inflates gzip and
// deflate bodies by default (`inflate: true`), as do ASP.NET Core's
// request decompression and Apache's DEFLATE input filter; such a shop
// reads qty=3. Want: a buy whose body has a Content-Encoding the proxy
// does not decode is refused (400), or decoded before it is judged.
func TestRB12QtyInCompressedForm(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	skus := []config.SKU{{ID: "cheap", Stock: 10}, {ID: "rare", Stock: 1}}
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{
			{ID: "rb12gz", Path: "/rb12gz/{sku}/buy", SkuFrom: "path", QtyFrom: "form:qty", SKUs: skus, Shards: 1, PerUserLimit: 1},
		}}.Config(t))
	p.Preheat(t, "rb12gz")

	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte("qty=3"))
	_ = zw.Close()
	// Control: the plain form is refused (qty 3 > max_qty 1).
	got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12gz/cheap/buy",
		Header: [][2]string{{"X-User-Id", "rb12-gzc"}, {"Content-Type", "application/x-www-form-urlencoded"}}, Body: []byte("qty=3")})
	if got.Status != 400 {
		t.Fatalf("control (plain form qty=3): %d %s, want 400", got.Status, got.Body)
	}
	got = e2e.Do(nil, p.Addr, e2e.Req{URI: "/rb12gz/cheap/buy",
		Header: [][2]string{{"X-User-Id", "rb12-gz"}, {"Content-Type", "application/x-www-form-urlencoded"}, {"Content-Encoding", "gzip"}},
		Body:   zb.Bytes()})
	t.Logf("gzip form qty=3: %d %s", got.Status, got.Code)
	rq, ok := rb12ShopBuy(shop, "rb12-gz")
	if !ok {
		rb12Want400(t, "gzip form", got)
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(rq.Body))
	if err != nil {
		t.Fatalf("shop body not gzip: %v", err)
	}
	plain, _ := io.ReadAll(zr)
	form, _ := url.ParseQuery(string(plain))
	t.Logf("shop got Content-Encoding %q, X-Seckill-Qty %s; body-parser inflates it to %q",
		rq.Header.Get("Content-Encoding"), rq.Header.Get("X-Seckill-Qty"), plain)
	if form.Get("qty") != rq.Header.Get("X-Seckill-Qty") {
		t.Errorf("BUG: a gzip form body is admitted as qty %s (the proxy read no qty in the compressed bytes); Express' body-parser inflates it and reads qty %s",
			rq.Header.Get("X-Seckill-Qty"), form.Get("qty"))
	}
}
