package e2e_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRT11FixHTTP10ClientGetsAStreamedAnswerItCanRead: requests now go to
// the shop as HTTP/1.1 whatever the client wrote (proxy/hop.go), so a shop
// answers a pass-through request of an HTTP/1.0 client with a chunked,
// streamed body it would never have sent to HTTP/1.0; the proxy streams
// ordinary answers (StreamResponseBody). An HTTP/1.0 client cannot read
// chunked framing (RFC 9112 §6.1: a server must not send it to 1.0): it
// must get the body plain, delimited by Content-Length or by the close of
// the connection, whether it asked for keep-alive or not.
func TestRT11FixHTTP10ClientGetsAStreamedAnswerItCanRead(t *testing.T) {
	const part1, part2 = "first-part-of-the-page;", "second-part-of-the-page"
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, part1)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(w, part2)
	}))
	t.Cleanup(shop.Close)
	r := e2e.StartRedis(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "rt11h10", Stock: 1}}}.Config(t))
	for _, keep := range []bool{false, true} {
		c, err := net.DialTimeout("tcp", p.Addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req := "GET /page HTTP/1.0\r\nHost: shop\r\n"
		if keep {
			req += "Connection: keep-alive\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		raw := rt11fixReadFor(c, 500*time.Millisecond)
		c.Close()
		t.Logf("keep-alive %v: raw answer %q", keep, raw)
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), &http.Request{Method: "GET", Proto: "HTTP/1.0", ProtoMajor: 1})
		if err != nil {
			t.Fatalf("keep-alive %v: %v", keep, err)
		}
		// Go's reader decodes chunked for us; a 1.0 client would not: the
		// framing header is what is checked.
		te := resp.TransferEncoding
		var body []byte
		if resp.ContentLength >= 0 {
			body = make([]byte, resp.ContentLength)
			_, err = io.ReadFull(resp.Body, body)
		} else {
			body, err = io.ReadAll(resp.Body)
		}
		t.Logf("keep-alive %v: %s %d TE %v CL %d close %v body %q (err %v)", keep, resp.Proto, resp.StatusCode, te, resp.ContentLength, resp.Close, body, err)
		if len(te) > 0 {
			t.Errorf("keep-alive %v: an HTTP/1.0 client was answered with Transfer-Encoding %v", keep, te)
		}
		if got := string(body); !strings.Contains(got, part1+part2) {
			t.Errorf("keep-alive %v: body %q, want the page", keep, got)
		}
	}
}

// rt11fixReadFor reads what c sends until it closes or is quiet for quiet.
func rt11fixReadFor(c net.Conn, quiet time.Duration) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
