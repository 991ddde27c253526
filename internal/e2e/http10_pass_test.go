package e2e_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestHTTP10ClientStreamCutShortIs502: an HTTP/1.0 buyer's pass answer of
// unknown length is read whole before it is sent (it cannot be chunked);
// one the shop cuts short is a 502 and a close, never a short body framed
// as complete.
func TestHTTP10ClientStreamCutShortIs502(t *testing.T) {
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "half of the page")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection closes mid-body
	}))
	t.Cleanup(shop.Close)
	r := e2e.StartRedis(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "h10cut", Stock: 1}}}.Config(t))
	c, err := net.DialTimeout("tcp", p.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /page HTTP/1.0\r\nHost: shop\r\nConnection: keep-alive\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(c) // the proxy closes the connection
	if !strings.HasPrefix(string(raw), "HTTP/1.1 502") || strings.Contains(string(raw), "half of the page") {
		t.Errorf("HTTP/1.0 buyer, shop cut its answer short: %q, want a 502 and a close", raw)
	}
}
