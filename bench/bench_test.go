package bench

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/bare"
	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
	"github.com/seckill-proxy/seckill-proxy/bench/shop"
)

func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := bare.Server(h, "test")
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// A closed-loop run against the legacy shop: exactly stock winners, every
// other answer a SPEC code, and the shop's own invariant verified.
func TestRunAgainstLegacyShop(t *testing.T) {
	s, err := shop.New(context.Background(), shop.Config{
		DB: "sqlite:" + filepath.Join(t.TempDir(), "shop.db"), Legacy: true,
		Stock: map[string]int64{"act_1/30021": 40},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	url := serve(t, s.Handler())
	res, err := Execute(context.Background(), Options{
		Name: "test",
		Load: load.Config{Target: url, Activity: "act_1", SKUs: []string{"30021"}, Users: 150, Tries: 2,
			Concurrency: 32, XFF: true, UserPrefix: "t", Timeout: 10 * time.Second},
		ShopURL: url, PerUserLimit: 1, LegacyTarget: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 300 || res.Answered != 300 || res.TransportErrors != 0 {
		t.Fatalf("sent %d answered %d errors %d", res.Sent, res.Answered, res.TransportErrors)
	}
	if res.Outcomes[load.OutcomeOK] != 40 {
		t.Fatalf("outcomes %v, want exactly 40 OK", res.Outcomes)
	}
	if res.Outcomes["SOLD_OUT"]+res.Outcomes["ALREADY_PURCHASED"] != 260 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	if len(res.Checks) == 0 || !res.OK {
		t.Fatalf("checks %+v", res.Checks)
	}
	dir := t.TempDir()
	if err := report.WriteJSON(filepath.Join(dir, "r.json"), res); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteSVG(filepath.Join(dir, "r.svg"), res); err != nil {
		t.Fatal(err)
	}
}

// An open-loop run sends exactly the waveform's count, every request with a
// distinct X-Request-Id, spread over the SKUs.
func TestOpenLoopCounts(t *testing.T) {
	type seen struct{ rid, sku string }
	ch := make(chan seen, 1000)
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		ch <- seen{string(ctx.Request.Header.Peek("X-Request-Id")), string(ctx.Path())}
		ctx.SetStatusCode(200)
		ctx.Response.Header.Set("X-Seckill-Token", "tok")
		ctx.SetBodyString(`{"order_id":"1"}`)
	})
	res, err := load.Run(context.Background(), load.Config{Target: url, Activity: "a", SKUs: []string{"1", "2"},
		Users: 50, Concurrency: 20, Rate: 400, Ramp: 200 * time.Millisecond, Hold: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	close(ch)
	want := load.Waveform{Peak: 400, Ramp: 200 * time.Millisecond, Hold: 500 * time.Millisecond}.Total()
	if res.Sent != want || res.Outcomes[load.OutcomeWin] != want {
		t.Fatalf("sent %d, wins %v, want %d", res.Sent, res.Outcomes, want)
	}
	rids, skus := map[string]bool{}, map[string]int{}
	for s := range ch {
		rids[s.rid] = true
		skus[s.sku]++
	}
	if int64(len(rids)) != want || skus["/api/seckill/a/1/buy"] != skus["/api/seckill/a/2/buy"] {
		t.Fatalf("%d distinct request ids, skus %v", len(rids), skus)
	}
}

// Verification failure surfaces as ErrInvariant with the result kept.
func TestExecuteReportsBrokenInvariant(t *testing.T) {
	s, err := shop.New(context.Background(), shop.Config{DB: "sqlite:" + filepath.Join(t.TempDir(), "shop.db"), Legacy: true,
		Stock: map[string]int64{"act_1/30021": 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	url := serve(t, s.Handler())
	// Legacy orders carry no token; not declaring the target legacy must
	// break "no order without token".
	res, err := Execute(context.Background(), Options{
		Load:    load.Config{Target: url, Activity: "act_1", Users: 10, Concurrency: 4},
		ShopURL: url, PerUserLimit: 1,
	})
	if !errors.Is(err, ErrInvariant) || res == nil || res.OK {
		t.Fatalf("err %v, res ok %v", err, res != nil && res.OK)
	}
}

// --slowest keeps exactly the N slowest answered requests, slowest first,
// naming their user and try: here user 7's second request is held 150 ms
// and user 3's first 80 ms, every other answer is at once.
func TestSlowestRequests(t *testing.T) {
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		user := string(ctx.Request.Header.Peek("X-User-Id"))
		rid := string(ctx.Request.Header.Peek("X-Request-Id"))
		k := rid[strings.LastIndexByte(rid, '-')+1:]
		switch {
		case user == "u7" && k == "27": // users 20, tries 2: k = 20 + 7
			time.Sleep(150 * time.Millisecond)
		case user == "u3" && k == "3":
			time.Sleep(80 * time.Millisecond)
		}
		ctx.SetStatusCode(410)
		ctx.SetBodyString(`{"code":"SOLD_OUT"}`)
	})
	res, err := load.Run(context.Background(), load.Config{Target: url, Activity: "a", SKUs: []string{"1"},
		Users: 20, Tries: 2, Concurrency: 4, Slowest: 2, UserPrefix: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Slowest) != 2 {
		t.Fatalf("slowest = %+v, want 2", res.Slowest)
	}
	first, second := res.Slowest[0], res.Slowest[1]
	if first.User != 7 || first.Try != 1 || first.K != 27 || first.Latency < 150*time.Millisecond || first.Status != 410 || first.Outcome != "SOLD_OUT" {
		t.Fatalf("slowest = %+v, want user 7 try 1 (k 27), ≥ 150 ms, 410 SOLD_OUT", first)
	}
	if second.User != 3 || second.Try != 0 || second.Latency < 80*time.Millisecond || second.Latency > first.Latency {
		t.Fatalf("second slowest = %+v, want user 3 try 0, ≥ 80 ms", second)
	}
	rep := report.Build("t", res, nil, nil)
	if len(rep.Slowest) != 2 || rep.Slowest[0].User != 7 || rep.Slowest[0].LatencyMS < 150 {
		t.Fatalf("report slowest = %+v", rep.Slowest)
	}
}
