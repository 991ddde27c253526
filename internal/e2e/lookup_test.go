package e2e_test

import (
	"net"
	"runtime"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// lookupCtx serves one public GET through the proxy's handler in-process
// (no sockets: 100,000 requests in well under a second) from client ip.
func lookupCtx(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, uri string, ip net.IP) int {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI(uri)
	ctx.SetRemoteAddr(&net.TCPAddr{IP: ip, Port: 4444})
	h(ctx)
	return ctx.Response.StatusCode()
}

// TestMadeUpLookupsGrowNoMemory is issue 8 §4's measurement: 60,000 look-ups
// of made-up tokens grew the proxy by 460 MiB (a key-name cache per SKU
// string). An unknown SKU or a malformed token is 404 before any store
// call, and nothing a client sends grows a cache: the heap grows by less
// than 16 MiB over 100,000 made-up look-ups from many addresses.
func TestMadeUpLookupsGrowNoMemory(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 1000000, burst: 1000000 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	h := f.p.Server.Handler()
	var ctx fasthttp.RequestCtx
	id := "AAAAAAAAAAAAAAAAAAAAAA" // 22 characters, the shape of a real id
	// Warm up what a real look-up legitimately builds once.
	lookupCtx(h, &ctx, "/_seckill/reservations/"+actOpen+"."+e2e.SKU+".0."+id, net.IPv4(10, 0, 0, 1))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 100_000; i++ {
		var uri string
		switch i % 4 {
		case 0: // a made-up SKU of a real activity
			uri = "/_seckill/reservations/" + actOpen + ".sku-" + strconv.Itoa(i) + ".0." + id
		case 1: // a made-up activity
			uri = "/_seckill/reservations/act-" + strconv.Itoa(i) + "." + e2e.SKU + ".0." + id
		case 2: // malformed
			uri = "/_seckill/reservations/" + strconv.Itoa(i) + ".x"
		case 3: // a real SKU, a shard the activity does not have
			uri = "/_seckill/reservations/" + actOpen + "." + e2e.SKU + "." + strconv.Itoa(1000+i%60000) + "." + id
		}
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		if st := lookupCtx(h, &ctx, uri, ip); st != 404 {
			t.Fatalf("%s: status %d, want 404: %s", uri, st, ctx.Response.Body())
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use %d KiB before, %d KiB after 100,000 made-up look-ups", before.HeapInuse>>10, after.HeapInuse>>10)
	if grew > 16<<20 {
		t.Fatalf("heap grew %d MiB over 100,000 made-up look-ups, want < 16 MiB", grew>>20)
	}
}

// TestPublicEndpointsUnderPerIPLimit: the proxy's public endpoints are
// under the per-IP limit (their own buckets of the same size, so a buyer's
// countdown polling does not eat the tokens of their buy).
func TestPublicEndpointsUnderPerIPLimit(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 1, burst: 5 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	h := f.p.Server.Handler()
	var ctx fasthttp.RequestCtx
	ip := net.IPv4(192, 0, 2, 77)
	limited := 0
	for i := 0; i < 20; i++ {
		switch st := lookupCtx(h, &ctx, "/_seckill/reservations/"+actOpen+"."+e2e.SKU+".0.AAAAAAAAAAAAAAAAAAAAAA", ip); st {
		case 404:
		case 429:
			limited++
			if ra := string(ctx.Response.Header.Peek("Retry-After")); ra == "" {
				t.Fatalf("429 without Retry-After")
			}
		default:
			t.Fatalf("status %d: %s", st, ctx.Response.Body())
		}
	}
	if limited < 14 {
		t.Errorf("%d of 20 look-ups limited at per_ip {rate: 1, burst: 5}, want at least 14", limited)
	}
	// The buy bucket of that address is untouched.
	r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", "poller"}, {"X-Forwarded-For", ip.String()}}})
	if r.Code != "WIN" {
		t.Errorf("buy after polling: %d %s, want a win", r.Status, r.Body)
	}
}
