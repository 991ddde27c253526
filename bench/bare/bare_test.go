package bare

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/redisinfo"
)

// startRedis runs a throwaway redis-server, skipping when none is installed.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install -y redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if i > 100 {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBareRedisSellsExactlyStock(t *testing.T) {
	addr := startRedis(t)
	rt, err := NewRedisTarget(context.Background(), addr, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(rt.Handler(), "test")
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	defer srv.Shutdown()

	before, err := redisinfo.Read(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := load.Run(context.Background(), load.Config{Target: "http://" + ln.Addr().String(), Activity: "a",
		Users: 200, Tries: 1, Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcomes[load.OutcomeOK] != 30 || res.Outcomes["SOLD_OUT"] != 170 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	after, err := redisinfo.Read(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	// One script call per request; requests racing before the script is
	// cached get NOSCRIPT on EVALSHA and fall back to EVAL (at most one
	// extra call per concurrent worker).
	if d := redisinfo.Diff(before, after); d.ScriptCalls < 200 || d.ScriptCalls > 200+16 {
		t.Fatalf("script calls %d, want 200 (+ ≤16 NOSCRIPT fallbacks)", d.ScriptCalls)
	}
}

func TestBareHandler(t *testing.T) {
	var ctx fasthttp.RequestCtx
	Handler()(&ctx)
	if ctx.Response.StatusCode() != 410 || string(ctx.Response.Header.ContentType()) != "application/json" {
		t.Fatalf("bare answered %d %s", ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
	}
}

// TestBareRedisPerUser: one unit per user, a repeat answered 409 by the
// same script call, never more than the stock.
func TestBareRedisPerUser(t *testing.T) {
	addr := startRedis(t)
	rt, err := NewRedisTargetUsers(context.Background(), addr, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	h := rt.Handler()
	buy := func(user string) int {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.Set("X-User-Id", user)
		h(&ctx)
		return ctx.Response.StatusCode()
	}
	for _, tt := range []struct {
		user string
		want int
	}{{"a", 200}, {"a", 409}, {"b", 200}, {"c", 410}, {"b", 409}} {
		if got := buy(tt.user); got != tt.want {
			t.Errorf("buy %s: %d, want %d", tt.user, got, tt.want)
		}
	}
}

// TestHopForwards: the hop answers what the upstream answered, and 502
// when it cannot reach it.
func TestHopForwards(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(FixedHandler(200, []byte(`{"order_id":"bare"}`)), "shop")
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	defer srv.Shutdown()
	hop := func(upstream string) (int, string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("http://shop.test/buy")
		ctx.Request.Header.SetMethod("POST")
		HopHandler(upstream, time.Second)(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if code, body := hop(ln.Addr().String()); code != 200 || body != `{"order_id":"bare"}` {
		t.Errorf("hop: %d %s", code, body)
	}
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	if code, _ := hop(addr); code != 502 {
		t.Errorf("hop to nothing: %d, want 502", code)
	}
}

// TestBareSale: exactly the stock is sold, one unit per user, winners get
// the shop's answer, every buyer after the first "none left" is answered
// from memory (no script call), and /_reset starts a new sale.
func TestBareSale(t *testing.T) {
	addr := startRedis(t)
	shopLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shop := Server(FixedHandler(200, []byte(`{"order_id":"shop"}`)), "shop")
	go shop.Serve(shopLn) //nolint:errcheck // ends at Shutdown
	defer shop.Shutdown()
	st, err := NewSaleTarget(context.Background(), addr, shopLn.Addr().String(), 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := st.Handler()
	do := func(path, user string) (int, string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("http://sale.test" + path)
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.Set("X-User-Id", user)
		h(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	before, err := redisinfo.Read(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		user string
		want int
	}{{"a", 200}, {"a", 409}, {"b", 200}, {"c", 410}, {"d", 410}, {"a", 410}} {
		code, body := do("/buy", tt.user)
		if code != tt.want || code == 200 && body != `{"order_id":"shop"}` {
			t.Errorf("buy %s: %d %s, want %d", tt.user, code, body, tt.want)
		}
	}
	after, err := redisinfo.Read(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	// a, a, b, c: four calls (the first may be EVAL after a NOSCRIPT);
	// d and a's last are answered from memory.
	if d := redisinfo.Diff(before, after); d.ScriptCalls < 4 || d.ScriptCalls > 5 {
		t.Errorf("script calls %d, want 4 (+1 NOSCRIPT fallback)", d.ScriptCalls)
	}
	if code, _ := do("/_reset", ""); code != 200 {
		t.Fatalf("reset: %d", code)
	}
	if code, _ := do("/buy", "a"); code != 200 {
		t.Errorf("after reset, a: %d, want 200", code)
	}
}
