package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// FuzzBuyRequest feeds arbitrary requests, as fasthttp would parse them off
// the wire, into the proxy's handler in front of a real Redis and shop, and
// checks: no panic; every answer to a buy route is a SPEC JSON answer or a
// shop 2xx with a token; a bad identity never reserves; the stock invariant
// holds after every request.
func FuzzBuyRequest(f *testing.F) {
	rd := e2e.StartRedis(f)
	shop := e2e.StartShop(f)
	cfg := e2e.Options{Redis: rd.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "fz", Path: "/buy/{activity}/{sku}", QtyFrom: "query:qty", Stock: 100000, PerUserLimit: 3, Shards: 4},
		{ID: "fj", Path: "/jbuy", SkuFrom: "json:/sku", QtyFrom: "json:/qty", Stock: 100000, PerUserLimit: 3, Shards: 2},
	}}.Config(f)
	p := e2e.StartProxy(f, cfg)
	for _, a := range cfg.Activities {
		p.Preheat(f, a.ID)
	}
	handler := p.Server.Handler()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	f.Add("POST", "/buy/fz/sku1", "qty=1", "alice", "", []byte(nil))
	f.Add("POST", "/jbuy", "", "bob", "application/json", []byte(`{"sku":"sku1","qty":2}`))

	f.Fuzz(func(t *testing.T, method, path, query, user, ctype string, body []byte) {
		var raw bytes.Buffer
		raw.WriteString(method + " " + path)
		if query != "" {
			raw.WriteString("?" + query)
		}
		raw.WriteString(" HTTP/1.1\r\nHost: shop\r\nX-User-Id: " + user + "\r\n")
		if ctype != "" {
			raw.WriteString("Content-Type: " + ctype + "\r\n")
		}
		raw.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
		raw.Write(body)
		text := raw.String()
		var req fasthttp.Request
		if err := req.ReadLimitBody(bufio.NewReader(&raw), 8<<20); err != nil {
			return // the server refuses it before any handler runs
		}
		seenUser := append([]byte(nil), req.Header.Peek("X-User-Id")...)
		before := stock(t, p)
		buysBefore := len(shop.Buys())

		var ctx fasthttp.RequestCtx
		ctx.Init(&req, addr, nil)
		// A hung handler would stall the fuzzer silently; crash instead, so
		// the input is kept as a crasher.
		watchdog := time.AfterFunc(20*time.Second, func() { panic("handler hung on " + strconv.Quote(text)) })
		handler(&ctx)
		watchdog.Stop()

		resp := &ctx.Response
		status := resp.StatusCode()
		fromShop := string(resp.Header.Peek("X-Shop"))
		isBuy := ctx.IsPost() && isBuyPath(ctx.Path())
		code, isSpec := specAnswer(resp)
		switch {
		case fromShop == "order":
			if status/100 != 2 || len(resp.Header.Peek("X-Seckill-Token")) == 0 {
				t.Fatalf("shop answer %d passed back without a token: %s", status, resp.Body())
			}
		case isSpec:
			if code.HTTPStatus() != status {
				t.Fatalf("%s answered with status %d", code, status)
			}
		case isBuy:
			t.Fatalf("buy route %s %q: answer %d %q is neither SPEC JSON nor a shop 2xx", ctx.Method(), ctx.Path(), status, resp.Body())
		}

		after := stock(t, p)
		for id, k := range after {
			if !k.OK {
				t.Fatalf("%s: stock invariant broken: %+v", id, k)
			}
		}
		if !goodID(seenUser) {
			if !maps.Equal(after, before) || len(shop.Buys()) != buysBefore {
				t.Fatalf("bad identity %q reserved: %v -> %v, shop buys %d -> %d", seenUser, before, after, buysBefore, len(shop.Buys()))
			}
			if isBuy && code != admission.BadRequest && code != admission.UnknownItem {
				t.Fatalf("bad identity %q on a buy route answered %s", seenUser, code)
			}
		}
	})
}

// isBuyPath tells the fuzz config's buy routes apart, by the test's own
// reading of the route patterns.
func isBuyPath(p []byte) bool {
	s := strings.TrimSuffix(strings.TrimPrefix(string(p), "/"), "/")
	if s == "jbuy" {
		return true
	}
	parts := strings.Split(s, "/")
	return len(parts) == 3 && parts[0] == "buy" && parts[1] != "" && parts[2] != ""
}

// specAnswer reports whether resp is a proxy-made SPEC answer, and its code.
func specAnswer(resp *fasthttp.Response) (admission.Code, bool) {
	if string(resp.Header.ContentType()) != "application/json" {
		return 0, false
	}
	var body struct {
		Code    *string `json:"code"`
		Message *string `json:"message"`
	}
	if json.Unmarshal(resp.Body(), &body) != nil || body.Code == nil || body.Message == nil {
		return 0, false
	}
	c, ok := admission.ParseCode(*body.Code)
	return c, ok
}

// goodID is SPEC's valid identity: 1..128 bytes of UTF-8 without control
// characters or '|'.
func goodID(b []byte) bool {
	if len(b) == 0 || len(b) > 128 || !utf8.Valid(b) {
		return false
	}
	return !bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '|' })
}

type skuKey struct{ act, sku string }

func stock(t *testing.T, p *e2e.Proxy) map[skuKey]store.SKUStatus {
	t.Helper()
	out := map[skuKey]store.SKUStatus{}
	for i := range p.Cfg.Activities {
		a := &p.Cfg.Activities[i]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := p.Store.Status(ctx, a)
		cancel()
		if err != nil {
			t.Fatalf("status %s: %v", a.ID, err)
		}
		for _, k := range s.SKUs {
			out[skuKey{a.ID, k.ID}] = k
		}
	}
	return out
}
