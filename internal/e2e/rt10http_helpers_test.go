package e2e_test

// Red team, tenth round, the HTTP layer (prefix rt10http): helpers.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rt10httpShopReq is one request as the raw shop parsed it (Go's
// net/http request reader, as a Go shop would), with the connection it
// came on.
type rt10httpShopReq struct {
	Conn   int
	Method string
	Proto  string
	URI    string
	Header http.Header
	Body   []byte
}

// rt10httpRawShop is a shop on a bare net.Listener: it records exactly the
// bytes the proxy sends on each connection, parses them with
// http.ReadRequest and answers every request itself: a request carrying
// X-Seckill-Token is a buy (200 with an order id, X-Shop: order), anything
// else 200 with X-Shop: pass. A request line it cannot parse is recorded
// as a parse error and answered 400, and the connection is closed, as
// net/http does.
type rt10httpRawShop struct {
	URL string
	ln  net.Listener

	mu        sync.Mutex
	raw       map[int]*bytes.Buffer
	reqs      []rt10httpShopReq
	parseErrs []string
	nextConn  int
	nextOrder int
}

type rt10httpRecConn struct {
	net.Conn
	shop *rt10httpRawShop
	id   int
}

func (c *rt10httpRecConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.shop.mu.Lock()
		c.shop.raw[c.id].Write(p[:n])
		c.shop.mu.Unlock()
	}
	return n, err
}

func rt10httpStartRawShop(t *testing.T) *rt10httpRawShop {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rt10httpRawShop{URL: "http://" + ln.Addr().String(), ln: ln, raw: map[int]*bytes.Buffer{}}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			s.mu.Lock()
			s.nextConn++
			id := s.nextConn
			s.raw[id] = &bytes.Buffer{}
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s.serveConn(&rt10httpRecConn{Conn: c, shop: s, id: id})
			}()
		}
	}()
	return s
}

func (s *rt10httpRawShop) serveConn(c *rt10httpRecConn) {
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "use of closed") {
				s.mu.Lock()
				s.parseErrs = append(s.parseErrs, "conn "+strconv.Itoa(c.id)+": "+err.Error())
				s.mu.Unlock()
				_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, rt10httpShopReq{Conn: c.id, Method: r.Method, Proto: r.Proto, URI: r.RequestURI, Header: r.Header, Body: body})
		s.nextOrder++
		n := s.nextOrder
		s.mu.Unlock()
		var out []byte
		if tok := r.Header.Get("X-Seckill-Token"); tok != "" {
			out, _ = json.Marshal(map[string]string{"order_id": "ord-" + strconv.Itoa(n), "token": tok})
			_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Shop: order\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(out))+"\r\n\r\n"+string(out))
		} else {
			out, _ = json.Marshal(map[string]string{"method": r.Method, "uri": r.RequestURI, "body": string(body)})
			_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Shop: pass\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(out))+"\r\n\r\n"+string(out))
		}
		if err != nil || r.Close {
			return
		}
	}
}

// Requests returns every request the shop parsed, in order.
func (s *rt10httpRawShop) Requests() []rt10httpShopReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rt10httpShopReq(nil), s.reqs...)
}

// ParseErrors returns the connections whose bytes net/http could not read
// as requests.
func (s *rt10httpRawShop) ParseErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.parseErrs...)
}

// Raw returns the bytes received on every connection, joined.
func (s *rt10httpRawShop) Raw() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i := 1; i <= s.nextConn; i++ {
		if r := s.raw[i]; r != nil {
			b.WriteString("--- conn " + strconv.Itoa(i) + "\n")
			b.Write(r.Bytes())
		}
	}
	return b.String()
}

// rt10httpFixture is the standard fixture with the raw shop as upstream.
func rt10httpFixture(t *testing.T, edit ...func(*e2e.Options)) (*fixture, *rt10httpRawShop) {
	t.Helper()
	shop := rt10httpStartRawShop(t)
	f := newFixture(t, append([]func(*e2e.Options){func(o *e2e.Options) {
		o.ShopURL = shop.URL
		// The raw shop has no verify endpoint.
		for i := range o.Activities {
			o.Activities[i].NoVerify = true
		}
	}}, edit...)...)
	return f, shop
}

// rt10httpSend writes raw bytes on one connection to addr and reads up to
// answers responses, in order, until the proxy closes or the deadline.
func rt10httpSend(t *testing.T, addr, raw string, answers int) []e2e.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	var out []e2e.Resp
	for i := 0; i < answers; i++ {
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			out = append(out, e2e.Resp{Err: err})
			break
		}
		out = append(out, e2e.ReadResp(&resp))
	}
	return out
}

// rt10httpBuyLine is a raw buy of the default SKU of act for user, with
// extra header lines and body.
func rt10httpBuy(act, user, proto, extra, body string) string {
	return "POST /api/seckill/" + act + "/" + e2e.SKU + "/buy " + proto + "\r\nHost: shop.example\r\nX-User-Id: " + user +
		"\r\n" + extra + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}
