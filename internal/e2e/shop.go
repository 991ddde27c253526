package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

// Shop is a recording test shop. A request carrying X-Seckill-Token is a
// buy: its signature is verified, and it is answered as told for its user
// (200 with an order id by default). /internal/orders?token= is the verify
// endpoint. Anything else is echoed back as JSON (method, path, query,
// body, headers), with the status asked for in ?status=, so pass-through
// can be checked from both ends.
type Shop struct {
	URL string

	srv  *httptest.Server
	done chan struct{}

	mu       sync.Mutex
	orders   map[string]Order // by token, only buys answered 2xx
	buys     []Attempt        // every buy, whatever it was answered
	requests []Request        // every request
	rules    map[string]rule  // by user
	nextID   int
	keys     signing.Keyring      // the shop's signing keys; default the harness's one key
	connAt   map[string]time.Time // when each connection was accepted, by its remote address
}

// Order is one order the shop created.
type Order struct {
	Token, Activity, SKU, Qty, User, OrderID string
	// Items is a bundle's X-Seckill-Items ("" for a single buy).
	Items string
	// SigOK says X-Seckill-Signature's v2 verified with the shop's keys
	// (SetKeys; by default the harness's key "default" with Secret) over
	// the method and request-target the shop received, and is fresh.
	SigOK bool
	// SigV1OK says its v1 verified with the same keys.
	SigV1OK bool
	// SigKey is the id of the key that verified v2; SigErr why v2 did not.
	SigKey string
	SigErr error
	// Method and Target are the request line the shop received;
	// Signature is the X-Seckill-Signature header as received.
	Method, Target, Signature string
}

// Attempt is one request that carried X-Seckill-Token, and what the shop did.
type Attempt struct {
	Order
	Status int
}

// Request is one request as the shop received it.
type Request struct {
	Method, Path, Query string
	// URI is the request target exactly as received (path not decoded).
	URI    string
	Header http.Header
	Body   []byte
	// ConnAt is when the shop accepted the connection it came on.
	ConnAt time.Time
}

type rule struct {
	status int
	cut    bool          // read the buy, then drop the connection without a word
	hang   chan struct{} // closed to let hanging buys finish
	// ordered: the order is created, then status is answered (a balancer's
	// 5xx in front of a shop that did take the order).
	ordered bool
}

// StartShop starts a shop on a free 127.0.0.1 port; it stops when the test ends.
func StartShop(t testing.TB) *Shop {
	t.Helper()
	s := &Shop{done: make(chan struct{}), orders: map[string]Order{}, rules: map[string]rule{},
		keys: signing.Keyring{{ID: config.DefaultSigningKeyID, Secret: []byte(Secret)}}, connAt: map[string]time.Time{}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.connAt[c.RemoteAddr().String()] = time.Now()
		case http.StateClosed, http.StateHijacked:
			delete(s.connAt, c.RemoteAddr().String())
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL
	// Cleanups run last-in first-out: unblock hanging handlers, then close.
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.done) })
	return s
}

// Conns is how many connections to the shop are open.
func (s *Shop) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.connAt)
}

// SetKeys replaces the keys the shop verifies X-Seckill-Signature with.
func (s *Shop) SetKeys(kr signing.Keyring) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = kr
}

// Answer makes the shop answer every buy of user with status.
func (s *Shop) Answer(user string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules[user] = rule{status: status}
}

// Hang makes the shop hold every buy of user without an answer until the
// returned function is called, the proxy gives up, or the test ends. It
// then answers 200 with an order.
func (s *Shop) Hang(user string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.rules[user] = rule{hang: ch}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(ch)
			s.mu.Lock()
			delete(s.rules, user)
			s.mu.Unlock()
		})
	}
}

// HangThen is Hang, the held buys then answered status instead of an
// order (a slow shop that refuses in the end).
func (s *Shop) HangThen(user string, status int) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.rules[user] = rule{hang: ch, status: status}
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Cut makes the shop read every buy of user and then close the connection
// without answering: the order's fate is unknown to the proxy.
func (s *Shop) Cut(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules[user] = rule{cut: true}
}

func (s *Shop) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, URI: r.RequestURI, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body,
		ConnAt: s.connAt[r.RemoteAddr]})
	s.mu.Unlock()

	if r.URL.Path == "/internal/orders" {
		s.mu.Lock()
		_, ok := s.orders[r.URL.Query().Get("token")]
		s.mu.Unlock()
		if !ok {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	if tok := r.Header.Get("X-Seckill-Token"); tok != "" {
		s.buy(w, r, tok)
		return
	}
	s.echo(w, r, body)
}

func (s *Shop) buy(w http.ResponseWriter, r *http.Request, tok string) {
	o := Order{
		Token:    tok,
		Activity: r.Header.Get("X-Seckill-Activity"),
		SKU:      r.Header.Get("X-Seckill-Sku"),
		Qty:      r.Header.Get("X-Seckill-Qty"),
		User:     r.Header.Get("X-Seckill-User"),
		Items:    r.Header.Get("X-Seckill-Items"),
	}
	o.Method, o.Target, o.Signature = r.Method, r.RequestURI, r.Header.Get("X-Seckill-Signature")
	s.mu.Lock()
	keys := s.keys
	s.mu.Unlock()
	sr := signing.Request{Token: o.Token, Activity: o.Activity, SKU: o.SKU, Qty: o.Qty, User: o.User, Method: r.Method, Target: r.RequestURI, Items: o.Items}
	o.SigKey, o.SigErr = keys.Verify(o.Signature, sr, time.Now(), time.Minute)
	o.SigOK = o.SigErr == nil
	_, err := keys.VerifyV1(o.Signature, sr, time.Now(), time.Minute)
	o.SigV1OK = err == nil

	s.mu.Lock()
	ru := s.rules[o.User]
	s.mu.Unlock()
	if ru.cut {
		s.record(Attempt{Order: o, Status: 0})
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if ru.hang != nil {
		select {
		case <-ru.hang:
		case <-r.Context().Done(): // the proxy gave up: it never sees an answer
			s.record(Attempt{Order: o, Status: 0})
			return
		case <-s.done:
			return
		}
	}
	status := ru.status
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("X-Shop", "order")
	w.Header().Set("Content-Type", "application/json")
	if (status < 200 || status > 299) && !ru.ordered {
		s.record(Attempt{Order: o, Status: status})
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":"refused"}`)
		return
	}
	s.mu.Lock()
	s.nextID++
	o.OrderID = "ord-" + strconv.Itoa(s.nextID)
	s.orders[tok] = o
	s.buys = append(s.buys, Attempt{Order: o, Status: status})
	s.mu.Unlock()
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": o.OrderID, "token": tok})
}

// AnswerAfterOrder makes the shop create every buy's order of user and
// then answer status, as a balancer in front of it may (a 502 or 504 after
// the shop did its work).
func (s *Shop) AnswerAfterOrder(user string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules[user] = rule{status: status, ordered: true}
}

func (s *Shop) record(b Attempt) {
	s.mu.Lock()
	s.buys = append(s.buys, b)
	s.mu.Unlock()
}

// echo answers an ordinary request with what the shop received.
func (s *Shop) echo(w http.ResponseWriter, r *http.Request, body []byte) {
	status := http.StatusOK
	if v, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil && v >= 200 && v < 600 {
		status = v
	}
	w.Header().Set("X-Shop", "pass")
	w.Header().Set("X-Shop-Echo", "yes")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Echo{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: string(body), Header: r.Header})
}

// Echo is the body of the shop's answer to an ordinary request.
type Echo struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Query  string      `json:"query"`
	Body   string      `json:"body"`
	Header http.Header `json:"header"`
}

// Orders returns every order created, by token.
func (s *Shop) Orders() map[string]Order {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Order, len(s.orders))
	for k, v := range s.orders {
		out[k] = v
	}
	return out
}

// Buys returns every buy request received, in order of completion.
func (s *Shop) Buys() []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attempt(nil), s.buys...)
}

// Requests returns every request received.
func (s *Shop) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// SeenBuy reports whether a buy of user has arrived (answered or not).
func (s *Shop) SeenBuy(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.requests {
		if r.Header.Get("X-Seckill-User") == user && r.Header.Get("X-Seckill-Token") != "" {
			return true
		}
	}
	return false
}

// HasSeckillHeader reports whether any request the shop received carried
// an X-Seckill-* header with value v.
func (s *Shop) HasSeckillHeader(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.requests {
		for k, vals := range r.Header {
			if !strings.HasPrefix(strings.ToLower(k), "x-seckill-") {
				continue
			}
			for _, x := range vals {
				if strings.Contains(x, v) {
					return true
				}
			}
		}
	}
	return false
}
