package e2e

// Red team sp14 (shop side, HTTP protocol level): a shop on a bare TCP
// listener whose every answer byte a test writes itself.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// sp14Buy is one buy the raw shop read whole (so it took the order).
type sp14Buy struct {
	Conn  int // connection number (1-based)
	Seq   int // request number on that connection (1-based)
	Token string
	User  string
}

// sp14Answer writes the answer to one buy on conn (raw bytes, sleeps,
// closes). It returns false to stop serving the connection (the shop
// closes it). The order is already recorded when it runs.
type sp14Answer func(c net.Conn, b sp14Buy, orderID string) bool

// sp14Shop is a raw-TCP shop: it reads requests with http.ReadRequest (as
// a Go shop would), takes an order for every buy it read whole (token ->
// order id, the truth verify tells), and answers buys with the test's
// answer function; /internal/orders answers the truth.
type sp14Shop struct {
	URL string
	ln  net.Listener

	mu     sync.Mutex
	answer sp14Answer
	orders map[string]string // token -> order id
	buys   []sp14Buy
	conns  int
	// noOrder: the shop reads buys but takes no order (a refusal).
	noOrder map[string]bool // user -> true
	// idleClose closes a connection idle this long after an answer
	// (a shop whose keep-alive is short); 0: never.
	idleClose time.Duration
	// idleSay is written before the idle close (a 408, as some servers
	// send on their keep-alive timeout).
	idleSay  string
	verifies atomic.Int64
}

func sp14StartShop(t testing.TB, ans sp14Answer) *sp14Shop {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sp14Shop{URL: "http://" + ln.Addr().String(), ln: ln, answer: ans,
		orders: map[string]string{}, noOrder: map[string]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			id := s.conns
			s.mu.Unlock()
			go s.serve(c, id)
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return s
}

func (s *sp14Shop) setAnswer(a sp14Answer) { s.mu.Lock(); s.answer = a; s.mu.Unlock() }

func (s *sp14Shop) serve(c net.Conn, id int) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	seq := 0
	for {
		s.mu.Lock()
		idle := s.idleClose
		s.mu.Unlock()
		if idle > 0 {
			_ = c.SetReadDeadline(time.Now().Add(idle))
		} else {
			_ = c.SetReadDeadline(time.Time{})
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			s.mu.Lock()
			say := s.idleSay
			s.mu.Unlock()
			if ne, ok := err.(net.Error); ok && ne.Timeout() && say != "" {
				_, _ = io.WriteString(c, say)
			}
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		_ = body
		seq++
		if req.URL.Path == "/internal/orders" {
			s.verifies.Add(1)
			s.mu.Lock()
			oid, ok := s.orders[req.URL.Query().Get("token")]
			s.mu.Unlock()
			if !ok {
				_, _ = io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			b, _ := json.Marshal(map[string]string{"order_id": oid})
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			continue
		}
		tok := req.Header.Get("X-Seckill-Token")
		if tok == "" {
			_, _ = io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		b := sp14Buy{Conn: id, Seq: seq, Token: tok, User: req.Header.Get("X-Seckill-User")}
		s.mu.Lock()
		s.buys = append(s.buys, b)
		oid := ""
		if !s.noOrder[b.User] {
			oid, _ = s.orders[tok]
			if oid == "" {
				oid = "ord-" + strconv.Itoa(len(s.orders)+1)
				s.orders[tok] = oid
			}
		}
		ans := s.answer
		s.mu.Unlock()
		if !ans(c, b, oid) {
			return
		}
	}
}

func (s *sp14Shop) Orders() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.orders) }

func (s *sp14Shop) Buys() []sp14Buy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sp14Buy(nil), s.buys...)
}

// buyOf is the shop's record of user's buy (its token).
func (s *sp14Shop) buyOf(user string) (sp14Buy, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.buys) - 1; i >= 0; i-- {
		if s.buys[i].User == user {
			return s.buys[i], true
		}
	}
	return sp14Buy{}, false
}

func (s *sp14Shop) hasOrder(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.orders[tok]
	return ok
}

// sp14OK is a well-formed 200 with the order id.
func sp14OK(c net.Conn, _ sp14Buy, oid string) bool {
	b := `{"order_id":"` + oid + `"}`
	_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Shop: order\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	return true
}

// sp14Raw answers with exactly raw (%s is the order id, if present).
func sp14Raw(raw string, keep bool) sp14Answer {
	return func(c net.Conn, _ sp14Buy, oid string) bool {
		_, _ = io.WriteString(c, strings.ReplaceAll(raw, "{oid}", oid))
		return keep
	}
}

// sp14Proxy starts Redis and a proxy in front of shop with one activity.
func sp14Proxy(t testing.TB, shop *sp14Shop, act Activity, edit ...func(*Options)) *Proxy {
	t.Helper()
	r := StartRedis(t)
	if act.Pending == 0 {
		act.Pending = 10 * time.Second
	}
	if act.Stock == 0 {
		act.Stock = 10
	}
	if act.Shards == 0 {
		act.Shards = 1
	}
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second, Activities: []Activity{act}}
	for _, e := range edit {
		e(&o)
	}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, act.ID)
	return p
}

// sp14State reads /_seckill/reservations/{token}.
func sp14State(t testing.TB, p *Proxy, tok string) (state, orderID string) {
	t.Helper()
	r := Do(nil, p.Addr, Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
	return r.Str("state"), r.Str("order_id")
}

// sp14Settle runs reconcile --repair far in the future (every pending
// reservation is older than pending_timeout; verify tells the truth), then
// checks the invariant and that confirmed units equal the shop's orders.
func sp14Settle(t testing.TB, p *Proxy, shop *sp14Shop, act string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Server.WaitConfirms(ctx)
	ra12Reconcile(t, p, act, time.Now().Add(time.Hour))
	k := p.SKUStatus(t, act)
	if !k.OK {
		t.Fatalf("stock invariant broken: %+v", k)
	}
	if k.Pending != 0 {
		t.Errorf("after reconcile --repair with a truthful verify: %d still pending (%+v)", k.Pending, k)
	}
	if int(k.Confirmed) != shop.Orders() {
		t.Errorf("units confirmed %d != orders the shop holds %d (%+v)", k.Confirmed, shop.Orders(), k)
	}
}

func sp14BuyReq(p *Proxy, act, user, rid string) Resp {
	h := [][2]string{{"X-User-Id", user}}
	if rid != "" {
		h = append(h, [2]string{"X-Request-Id", rid})
	}
	return Do(sp14Client, p.Addr, Req{URI: "/api/seckill/" + act + "/" + SKU + "/buy", Header: h, Timeout: 10 * time.Second})
}

// sp14Client reads answers with large headers (the shop's pass through).
var sp14Client = &fasthttp.Client{MaxConnsPerHost: 64, ReadBufferSize: 256 << 10}
