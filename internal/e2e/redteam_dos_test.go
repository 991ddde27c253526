package e2e_test

// Red-team: resource exhaustion through the real HTTP listener, from one
// client or a small botnet, and from a misbehaving shop. Every test asserts
// a bound README documents (server.* timeouts and connection limits, 431 on
// headers over 16 KiB, streamed pass-through bodies, upstream.max_conns,
// "ordinary traffic passes straight through", SPEC §5 outcomes).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// dosShop is a shop whose misbehaviour a test picks, counting the
// connections the proxy holds open to it (peak and now).
type dosShop struct {
	srv     *httptest.Server
	URL     string
	open    atomic.Int64
	peak    atomic.Int64
	release chan struct{} // closed: hanging handlers return
	// buyMode: how a buy (X-Seckill-Token) is answered: "ok", "bighdr",
	// "endless", "hang".
	buyMode atomic.Value
	hdrSize atomic.Int64 // bytes of X-Big on "bighdr" answers
	buys    atomic.Int64
	hanging atomic.Int64 // handlers in a hang right now
}

func dosStartShop(t *testing.T) *dosShop {
	t.Helper()
	s := &dosShop{release: make(chan struct{})}
	s.buyMode.Store("ok")
	s.hdrSize.Store(8 << 10)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n := s.open.Add(1)
			for {
				p := s.peak.Load()
				if n <= p || s.peak.CompareAndSwap(p, n) {
					break
				}
			}
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL
	var once sync.Once
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { once.Do(func() { close(s.release) }) })
	return s
}

func (s *dosShop) hang(w http.ResponseWriter, r *http.Request) {
	s.hanging.Add(1)
	defer s.hanging.Add(-1)
	select {
	case <-s.release:
	case <-r.Context().Done():
		return
	}
	w.WriteHeader(200)
}

func (s *dosShop) serve(w http.ResponseWriter, r *http.Request) {
	if tok := r.Header.Get("X-Seckill-Token"); tok != "" {
		s.buys.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		switch s.buyMode.Load().(string) {
		case "bighdr":
			w.Header().Set("X-Big", strings.Repeat("b", int(s.hdrSize.Load())))
		case "hang":
			s.hang(w, r)
			return
		case "endless":
			// A chunked body that never ends, at about 16 MiB/s.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			chunk := []byte(strings.Repeat(" ", 32<<10))
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-s.release:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"order_id":"o-%s"}`, tok[len(tok)-8:])
		return
	}
	switch r.URL.Path {
	case "/bighdr":
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("X-Big", strings.Repeat("h", n))
		_, _ = io.WriteString(w, "page")
	case "/hang":
		s.hang(w, r)
	case "/download":
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		_, _ = io.Copy(w, io.LimitReader(&pattern{}, n))
	case "/upload":
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			w.WriteHeader(400)
			return
		}
		fmt.Fprintf(w, "%d", n)
	default:
		_, _ = io.WriteString(w, "ok")
	}
}

// dosHeap is the heap in use after a full collection.
func dosHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// dosSettledHeap is dosHeap once the process's heap has stopped moving (two
// reads 100 ms apart within 1 MiB, at most 3 s): earlier tests' proxies and
// clients may still be winding down, and their memory is not this test's.
func dosSettledHeap() uint64 {
	h := dosHeap()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		n := dosHeap()
		if d := int64(n) - int64(h); d < 1<<20 && d > -(1<<20) {
			return n
		}
		h = n
	}
	return h
}

// dosServeConns counts the public listener's connections being served:
// goroutines in fasthttp's serveConn (idle workers of its pool, kept up to
// 10 s, are not counted).
func dosServeConns() int {
	dosStackMu.Lock()
	defer dosStackMu.Unlock()
	n := runtime.Stack(dosStackBuf, true)
	return bytes.Count(dosStackBuf[:n], []byte("fasthttp.(*Server).serveConn("))
}

var (
	dosStackMu  sync.Mutex
	dosStackBuf = make([]byte, 8<<20) // at start: sampling must not move a heap measure
)

// dosServeConnsWithin waits (at most within) until at most want
// connections are being served, and returns the last count.
func dosServeConnsWithin(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	n := dosServeConns()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = dosServeConns()
	}
	return n
}

// dosRead reads one answer from br.
func dosRead(br *bufio.Reader) e2e.Resp {
	var resp fasthttp.Response
	if err := resp.Read(br); err != nil {
		return e2e.Resp{Err: err}
	}
	return e2e.ReadResp(&resp)
}

// TestRedTeamDoSShopBigResponseHeaderPassesThrough: SPEC §1 "ordinary
// traffic passes straight through"; §5 "shop answers 2xx → reservation
// confirmed". A shop whose answer carries 8 KiB of headers (a long CSP,
// several cookies: common on real shops) must reach the client as sent, on
// an ordinary route and for a winner.
func TestRedTeamDoSShopBigResponseHeaderPassesThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL })

	// Read with a buffer the 8 KiB header fits in (a client's default
	// of 4 KiB would fail on it, not the proxy).
	big := func(raw string) e2e.Resp {
		c, err := net.DialTimeout("tcp", f.p.Addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		return dosRead(bufio.NewReaderSize(c, 64<<10))
	}
	r := big("GET /bighdr?n=" + strconv.Itoa(8<<10) + " HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n")
	if r.Err != nil || r.Status != 200 || len(r.Header["X-Big"]) != 8<<10 || string(r.Body) != "page" {
		t.Errorf("ordinary page with an 8 KiB response header: status %d err %v, X-Big %d bytes, body %q; want 200 with the shop's answer as sent",
			r.Status, r.Err, len(r.Header["X-Big"]), r.Body)
	}

	shop.buyMode.Store("bighdr")
	r = big("POST /api/seckill/" + actOpen + "/" + e2e.SKU + "/buy HTTP/1.1\r\nHost: shop\r\nX-User-Id: dos-bighdr\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	if r.Err != nil || r.Status != 200 || r.Header["X-Seckill-Token"] == "" {
		t.Errorf("winner whose shop 2xx has an 8 KiB header: status %d code %s body %s err %v; want the shop's 200 with X-Seckill-Token",
			r.Status, r.Code, r.Body, r.Err)
	}
	k := f.p.SKUStatus(t, actOpen)
	if k.Confirmed != 1 || k.Pending != 0 {
		t.Errorf("after the shop answered 2xx: %+v, want confirmed 1 pending 0 (SPEC §5)", k)
	}
}

// TestRedTeamDoSUpstreamMaxConnsBound: README upstream.max_conns —
// connections to the shop per instance for winners, and as many again for
// ordinary traffic (two pools, so pass-through never takes a winner's
// connection; the red team found the README said "per instance" alone).
// With max_conns: 2 and a shop that holds every request, 4 hanging ordinary
// requests and 4 hanging winners never have more than 2 + 2 connections
// open to the shop.
func TestRedTeamDoSUpstreamMaxConnsBound(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	shop.buyMode.Store("hang")
	f := newFixture(t, func(o *e2e.Options) {
		o.ShopURL = shop.URL
		o.UpstreamTimeout = 2 * time.Second
		o.UpstreamExtra = []string{"max_conns: 2", "pass_timeout: 2s"}
	})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); f.do(e2e.Req{Method: "GET", URI: "/hang", Timeout: 4 * time.Second}) }()
		go func(i int) { defer wg.Done(); f.buy(actOpen, "dos-mc-"+strconv.Itoa(i)) }(i)
	}
	time.Sleep(1200 * time.Millisecond)
	peak := shop.peak.Load()
	wg.Wait()
	t.Logf("peak connections to the shop: %d (ordinary requests hanging: 4, winners hanging: 4)", peak)
	if peak > 4 {
		t.Errorf("the proxy held %d connections to the shop at once, upstream.max_conns is 2 per pool", peak)
	}
}

// dosFastServer is the server block the slow-client tests use: short
// timeouts so a test sees them fire.
const dosFastServer = "{ read_timeout: 1s, write_timeout: 1s, idle_timeout: 2s }"

// TestRedTeamDoSSlowlorisClosedByReadTimeout: README server.read_timeout —
// "reading one request (headers and body)". 200 connections that each send
// a request header one byte every 100 ms, never finishing it, are all closed
// by the proxy within read_timeout (1 s) plus slack, none is answered with
// anything but a 4xx, and their goroutines are gone afterwards.
func TestRedTeamDoSSlowlorisClosedByReadTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL; o.Server = dosFastServer })
	const n = 200
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// One writer trickles a byte to every connection each 100 ms, for up to
	// 4 s (4× read_timeout); it stops writing to a connection once it fails.
	head := "POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: x\r\nX-User-Id: slow\r\nX-Pad: " + strings.Repeat("a", 200)
	stop := make(chan struct{})
	var wwg sync.WaitGroup
	wwg.Add(1)
	dead := make([]atomic.Bool, n)
	go func() {
		defer wwg.Done()
		for i := 0; i < 40; i++ {
			for j, c := range conns {
				if dead[j].Load() {
					continue
				}
				_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				if _, err := c.Write([]byte{head[i%len(head)]}); err != nil {
					dead[j].Store(true)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t0 := time.Now()
	var slowest time.Duration
	var open, answered2xx atomic.Int64
	var rwg sync.WaitGroup
	var mu sync.Mutex
	for j, c := range conns {
		rwg.Add(1)
		go func(j int, c net.Conn) {
			defer rwg.Done()
			_ = c.SetReadDeadline(t0.Add(3500 * time.Millisecond))
			b, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open.Add(1)
				return
			}
			dead[j].Store(true)
			if strings.HasPrefix(string(b), "HTTP/1.1 2") {
				answered2xx.Add(1)
			}
			mu.Lock()
			if d := time.Since(t0); d > slowest {
				slowest = d
			}
			mu.Unlock()
		}(j, c)
	}
	rwg.Wait()
	close(stop)
	wwg.Wait()
	t.Logf("slowloris: %d of %d still open after 3.5 s; slowest close %v", open.Load(), n, slowest)
	if open.Load() > 0 {
		t.Errorf("%d slowloris connections still open 3.5 s after opening, server.read_timeout is 1s", open.Load())
	}
	if answered2xx.Load() > 0 {
		t.Errorf("%d unfinished requests were answered 2xx", answered2xx.Load())
	}
	if g := dosServeConnsWithin(0, 2*time.Second); g > 0 {
		t.Errorf("%d connections still served after the slowloris connections closed", g)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestRedTeamDoSConnectionLimits: README server.max_conns ("more are
// refused") and server.max_conns_per_ip. With max_conns: 30 and
// max_conns_per_ip: 10, one address gets 10 idle connections and no more;
// three more addresses (127.0.0.2-4) fill the 30 and the 31st connection is
// refused; closing some lets new ones be served.
func TestRedTeamDoSConnectionLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) {
		o.ShopURL = shop.URL
		o.Server = "{ max_conns: 30, max_conns_per_ip: 10, read_timeout: 10s, idle_timeout: 10s }"
	})
	dial := func(src string) (net.Conn, error) {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return d.Dial("tcp", f.p.Addr)
	}
	// served reports whether c gets an answer to a request, and the status line.
	served := func(c net.Conn) (bool, string) {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "GET /_seckill/time HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return false, err.Error()
		}
		r := dosRead(bufio.NewReader(c))
		if r.Err != nil {
			return false, r.Err.Error()
		}
		return r.Status == 200, strconv.Itoa(r.Status)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, src := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		for i := 0; i < 10; i++ {
			c, err := dial(src)
			if err != nil {
				t.Fatalf("dial from %s: %v", src, err)
			}
			held = append(held, c)
			if ok, st := served(c); !ok {
				t.Fatalf("connection %d from %s not served (%s) within max_conns_per_ip", i+1, src, st)
			}
		}
	}
	// 11th from one address: refused (429, per-IP).
	if c, err := dial("127.0.0.1"); err == nil {
		ok, st := served(c)
		c.Close()
		if ok {
			t.Errorf("11th connection from 127.0.0.1 served, max_conns_per_ip is 10")
		} else {
			t.Logf("11th from one address: %s", st)
		}
	}
	// 31st overall, from a fresh address: refused (max_conns).
	if c, err := dial("127.0.0.4"); err == nil {
		ok, st := served(c)
		c.Close()
		if ok {
			t.Errorf("31st connection served, max_conns is 30")
		} else {
			t.Logf("31st overall: %s", st)
		}
	}
	for _, c := range held[:5] {
		c.Close()
	}
	held = held[5:]
	e2e.Eventually(t, 3*time.Second, "a new connection served once some closed", func() bool {
		c, err := dial("127.0.0.4")
		if err != nil {
			return false
		}
		ok, _ := served(c)
		if ok {
			held = append(held, c)
		} else {
			c.Close()
		}
		return ok
	})
}

// TestRedTeamDoSSlowBodies: README server.read_timeout bounds the body too.
// A buy whose 200-byte body trickles at a byte per 100 ms, and an ordinary
// upload whose 1 MiB body trickles likewise, are cut within read_timeout
// (1 s) plus slack: the buy reserves nothing and reaches no shop, and the
// upload's connection to the shop is given back (a later request is served
// with upstream.max_conns: 1).
func TestRedTeamDoSSlowBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) {
		o.ShopURL = shop.URL
		o.Server = dosFastServer
		o.UpstreamExtra = []string{"max_conns: 1"}
	})
	trickle := func(head string, n int) (time.Duration, bool, string) {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		got := make(chan string, 1)
		go func() {
			_ = c.SetReadDeadline(t0.Add(4 * time.Second))
			b, _ := io.ReadAll(c)
			got <- string(b)
		}()
		for i := 0; i < n && time.Since(t0) < 4*time.Second; i++ {
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Write([]byte{'x'}); err != nil {
				break
			}
			select {
			case b := <-got:
				return time.Since(t0), true, b
			case <-time.After(100 * time.Millisecond):
			}
		}
		select {
		case b := <-got:
			return time.Since(t0), true, b
		case <-time.After(4*time.Second - time.Since(t0)):
			return time.Since(t0), false, ""
		}
	}
	d, closed, b := trickle("POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: x\r\nX-User-Id: slowbuy\r\nContent-Length: 200\r\n\r\n", 200)
	t.Logf("slow buy body: closed %v after %v: %.60q", closed, d, b)
	if !closed || d > 2500*time.Millisecond {
		t.Errorf("a buy body trickled over 20 s held its connection %v (closed %v), server.read_timeout is 1s", d, closed)
	}
	if strings.HasPrefix(b, "HTTP/1.1 2") {
		t.Errorf("a buy whose body never arrived was answered %.40q", b)
	}
	d, closed, b = trickle("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n", 1<<20)
	t.Logf("slow upload: closed %v after %v: %.60q", closed, d, b)
	if !closed || d > 2500*time.Millisecond {
		t.Errorf("an upload trickled held its connection %v (closed %v), server.read_timeout is 1s", d, closed)
	}
	// Connection: close: kept alive, this healthy request's connection
	// would be served until idle_timeout (2 s), as long as the check below
	// waits (a CI flake: "1 connections still served").
	if r := f.do(e2e.Req{Method: "GET", URI: "/after", Timeout: 3 * time.Second, Header: [][2]string{{"Connection", "close"}}}); r.Err != nil || r.Status != 200 {
		t.Errorf("ordinary request after the slow upload: %d %v (the shop connection was not given back?)", r.Status, r.Err)
	}
	if shop.buys.Load() != 0 {
		t.Errorf("the shop got %d buys", shop.buys.Load())
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
	if g := dosServeConnsWithin(0, 2*time.Second); g > 0 {
		t.Errorf("%d connections still served after the slow bodies", g)
	}
}

// TestRedTeamDoSSlowReadersOfLargeDownloads: README — answers on ordinary
// routes are streamed, never held whole; server.write_timeout bounds
// writing one answer. 20 clients ask for a 64 MiB page each and never read
// it: the proxy's heap rises by far less than one page, every connection is
// closed within write_timeout (1 s) plus slack, and the shop connections
// come back (upstream.max_conns: 20, a later request is served).
func TestRedTeamDoSSlowReadersOfLargeDownloads(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) {
		o.ShopURL = shop.URL
		o.Server = dosFastServer
		o.UpstreamExtra = []string{"max_conns: 20"}
	})
	const n, size = 20, 64 << 20
	stop := heapPeak()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		fmt.Fprintf(c, "GET /download?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", size)
		conns[i] = c
	}
	if g := dosServeConns(); g != n {
		t.Logf("connections served right after the requests: %d", g)
	}
	// write_timeout 1 s passes with nothing read: the proxy drops them all
	// (the client side sees no EOF yet: the kernel still holds the unsent
	// bytes ahead of the FIN), and gives the shop connections back.
	g := dosServeConnsWithin(0, 2500*time.Millisecond)
	grew := stop()
	t.Logf("%d slow readers of %d MiB: heap peak +%.1f MiB, served conns %d, shop conns open %d (peak %d)",
		n, size>>20, float64(grew)/(1<<20), g, shop.open.Load(), shop.peak.Load())
	if grew > 16<<20 {
		t.Errorf("heap in use rose %.1f MiB with %d slow readers: the answers were buffered", float64(grew)/(1<<20), n)
	}
	if g > 0 {
		t.Errorf("%d slow readers still served 2.5 s after asking, server.write_timeout is 1s", g)
	}
	e2e.Eventually(t, 2*time.Second, "shop connections given back", func() bool { return shop.open.Load() == 0 })
	if r := f.do(e2e.Req{Method: "GET", URI: "/after", Timeout: 3 * time.Second}); r.Err != nil || r.Status != 200 {
		t.Errorf("ordinary request after the slow readers: %d %v", r.Status, r.Err)
	}
}

// TestRedTeamDoSPipelineFloodUnread: 50 connections each pipeline 2,000
// requests (public time and an ordinary page) and never read an answer.
// The proxy reads one request at a time and blocks on writing: its heap
// (live, after a collection, while they are stuck) stays within a few MiB
// (README: ≈ 20 KiB of buffers per connection), and write_timeout (2 s) or,
// once every answer sits in the kernel's buffers, idle_timeout (2 s) drops
// every connection.
func TestRedTeamDoSPipelineFloodUnread(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) {
		o.ShopURL = shop.URL
		o.Server = "{ read_timeout: 5s, write_timeout: 2s, idle_timeout: 2s }"
	})
	const conns, reqs = 50, 2000
	var batch strings.Builder
	for i := 0; i < reqs; i++ {
		if i%2 == 0 {
			batch.WriteString("GET /_seckill/time HTTP/1.1\r\nHost: x\r\n\r\n")
		} else {
			batch.WriteString("GET /page?i=" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	raw := []byte(batch.String())
	// flood opens the connections, writes the requests and measures; the
	// connections are closed when it returns.
	flood := func() (grew, held int64, g int) {
		before := dosSettledHeap()
		var cs []net.Conn
		defer func() {
			for _, c := range cs {
				c.Close()
			}
		}()
		var wg sync.WaitGroup
		for i := 0; i < conns; i++ {
			c, err := net.Dial("tcp", f.p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4 << 10)
			}
			cs = append(cs, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
				_, _ = c.Write(raw) // may block: the proxy stops reading once its answers back up
			}()
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond)
		stuck := dosServeConns()
		after := dosHeap()
		grew = int64(after) - int64(before)
		g = dosServeConnsWithin(0, 5*time.Second)
		// What the stuck connections held is what their closing gave back.
		held = int64(after) - int64(dosHeap())
		t.Logf("%d connections × %d pipelined requests unread: %d stuck, live heap +%.1f MiB (%.1f MiB given back once they were closed), still served after write_timeout %d, shop conns peak %d",
			conns, reqs, stuck, float64(grew)/(1<<20), float64(held)/(1<<20), g, shop.peak.Load())
		return grew, held, g
	}
	// Alone this run measures +5.6 MiB (the stuck connections' buffers);
	// the heap is the whole test process's, and in the package run other
	// tests' leftovers move it by several MiB (8.8 MiB once, 13.5 once in
	// .ci/run, 22.4 once beside other suites on the box; 23.4 once in
	// .ci/run while 338 MiB an earlier test still held, settled at the
	// start, were given back during it). Every answer kept for 50
	// connections × 2,000 requests would be well above 30 MiB, held while
	// they are open and given back when they close: so both the rise and
	// what the close gives back must exceed the bound to fail (a leak that
	// outlives the connections is the memory tests' to find: GrowNoMemory,
	// BoundsProxyMemory), and a first measure over it is taken again, on
	// fresh connections, once the first ones are gone: answers kept exceed
	// it every time, another test's memory moving under one measure does
	// not twice.
	grew, held, g := flood()
	if grew > 20<<20 && held > 20<<20 {
		t.Logf("heap rose %.1f MiB (%.1f MiB given back at close): measuring again", float64(grew)/(1<<20), float64(held)/(1<<20))
		var g2 int
		grew, held, g2 = flood()
		g = max(g, g2)
	}
	if grew > 20<<20 && held > 20<<20 {
		t.Errorf("heap rose %.1f MiB (%.1f MiB given back at close) for %d pipelining connections that read nothing", float64(grew)/(1<<20), float64(held)/(1<<20), conns)
	}
	if g > 0 {
		t.Errorf("%d pipelining connections still served 5 s after their answers stopped being read, write_timeout and idle_timeout 2s", g)
	}
	// The listener still serves others.
	if r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/time"}); r.Status != 200 {
		t.Errorf("time after the flood: %d %v", r.Status, r.Err)
	}
}

// TestRedTeamDoSHeaderShapes: README — "Request headers beyond 16 KiB get
// 431"; within the bound, odd but legal shapes are answered promptly and
// correctly. 10,000 small headers, a 20 KiB cookie, a 20 KiB URL: 431 with
// JSON (the request line is part of the header block), nothing reserved,
// nothing forwarded. Just under 16 KiB: 1,500 headers on a buy, a 15 KiB
// cookie, 1,500 distinct query arguments on a query-SKU buy: each decided
// in well under a second.
func TestRedTeamDoSHeaderShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL })
	buy := "POST /api/seckill/open/sku1/buy HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
	var many strings.Builder
	for i := 0; i < 10000; i++ {
		many.WriteString("A" + strconv.Itoa(i) + ": b\r\n")
	}
	for _, c := range []struct{ name, raw string }{
		{"10,000 headers", buy + "X-User-Id: h1\r\n" + many.String() + "\r\n"},
		{"20 KiB cookie", buy + "X-User-Id: h2\r\nCookie: s=" + strings.Repeat("c", 20<<10) + "\r\n\r\n"},
		{"20 KiB URL", "GET /page?" + strings.Repeat("q=1&", 5<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"20 KiB buy URL", "POST /api/seckill/open/sku1/buy?" + strings.Repeat("q=1&", 5<<10) + " HTTP/1.1\r\nHost: x\r\nX-User-Id: h3\r\nContent-Length: 0\r\n\r\n"},
	} {
		rs := rtRaw(t, f.p.Addr, c.raw, 1)
		if len(rs) != 1 || rs[0].Err != nil || rs[0].Status != 431 || rs[0].Header["Content-Type"] != "application/json" {
			t.Errorf("%s: %+v, want 431 with a JSON body", c.name, rs)
		}
	}
	if n := shop.buys.Load(); n != 0 {
		t.Errorf("oversized requests: the shop got %d buys", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)

	var hs strings.Builder
	for i := 0; i < 1500; i++ {
		hs.WriteString("A" + strconv.Itoa(i) + ": b\r\n")
	}
	var qs strings.Builder
	for i := 0; i < 1500; i++ {
		qs.WriteString("a" + strconv.Itoa(i) + "=1&")
	}
	for _, c := range []struct{ name, raw, want string }{
		{"1,500 headers on a buy", buy + "X-User-Id: ok1\r\n" + hs.String() + "\r\n", "WIN"},
		{"15 KiB cookie on a buy", buy + "X-User-Id: ok2\r\nCookie: s=" + strings.Repeat("c", 15<<10) + "\r\n\r\n", "WIN"},
		{"1,500 query args on a query-SKU buy", "POST /q/buy?" + qs.String() + "sku=sku1 HTTP/1.1\r\nHost: x\r\nX-User-Id: ok3\r\nContent-Length: 0\r\n\r\n", "WIN"},
		{"1,500 query args on an ordinary page", "GET /page?" + qs.String() + " HTTP/1.1\r\nHost: x\r\n\r\n", ""},
	} {
		t0 := time.Now()
		rs := rtRaw(t, f.p.Addr, c.raw, 1)
		d := time.Since(t0)
		if len(rs) != 1 || rs[0].Err != nil {
			t.Errorf("%s: %+v", c.name, rs)
			continue
		}
		r := rs[0]
		ok := r.Status == 200
		if c.want == "WIN" {
			ok = ok && r.Header["X-Seckill-Token"] != ""
		}
		t.Logf("%s: %d in %v", c.name, r.Status, d)
		if !ok {
			t.Errorf("%s: %d %s, want %s", c.name, r.Status, r.Body, dosOr(c.want, "200"))
		}
		if d > time.Second {
			t.Errorf("%s: answered in %v", c.name, d)
		}
	}
}

func dosOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestRedTeamDoSIdleKeepAliveConnections: README server.max_conns — "each
// ≈ 20 KiB of buffers" — and server.idle_timeout. 1,000 keep-alive
// connections, each served one request and then left idle, cost the proxy
// at most 40 KiB of live heap apiece, and all are closed by idle_timeout
// (2 s).
func TestRedTeamDoSIdleKeepAliveConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL; o.Server = dosFastServer })
	const n = 1000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := []byte("GET /_seckill/time HTTP/1.1\r\nHost: x\r\n\r\n")
	before := dosSettledHeap()
	buf := make([]byte, 4096)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if m, err := c.Read(buf); err != nil || !bytes.HasPrefix(buf[:m], []byte("HTTP/1.1 200")) {
			t.Fatalf("request %d: %q %v", i, buf[:m], err)
		}
	}
	open := dosServeConns()
	after := dosHeap()
	per := (int64(after) - int64(before)) / n
	t.Logf("%d idle keep-alive connections (opened in %v): %d served, live heap +%.1f MiB, %.1f KiB each",
		n, time.Since(t0), open, float64(int64(after)-int64(before))/(1<<20), float64(per)/1024)
	if per > 40<<10 {
		t.Errorf("each idle connection holds %d bytes of heap, README says ≈ 20 KiB", per)
	}
	if g := dosServeConnsWithin(0, 4*time.Second); g > 0 {
		t.Errorf("%d idle connections still served well after idle_timeout (2s)", g)
	}
}

// TestRedTeamDoSWinnerEndlessShopAnswer: SPEC §5 / README upstream.max_conns
// — a winner whose shop answers 200 and then sends an endless chunked body
// (≈ 16 MiB/s) is answered 504 UPSTREAM_TIMEOUT within upstream.timeout
// (3 s) plus slack, its reservation stays pending for the reconciler, its
// connection to the shop is dropped, and the proxy reads at most 4 MiB of it
// (the heap grows by what that bound allows, not by the whole timeout).
func TestRedTeamDoSWinnerEndlessShopAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("timeouts and heap measures: in the plain pass (make test), not under -race")
	}
	shop := dosStartShop(t)
	shop.buyMode.Store("endless")
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL; o.UpstreamTimeout = 3 * time.Second })
	stop := heapPeak()
	t0 := time.Now()
	r := f.buy(actOpen, "dos-endless")
	d := time.Since(t0)
	grew := stop()
	t.Logf("endless shop answer: %d %s in %v; proxy heap peak +%.1f MiB", r.Status, r.Code, d, float64(grew)/(1<<20))
	if r.Err != nil || r.Code != "UPSTREAM_TIMEOUT" || r.Status != 504 || r.Token() == "" {
		t.Errorf("winner with an endless shop answer: %d %s %v, want 504 UPSTREAM_TIMEOUT with token", r.Status, r.Body, r.Err)
	}
	if d > 4*time.Second {
		t.Errorf("answered after %v, upstream.timeout is 3s", d)
	}
	// A winner's answer is read up to 4 MiB (README): before the bound,
	// one buy held everything the shop streamed for the whole timeout
	// (+32 MiB in 1 s at ~16 MiB/s; the in-process shop's own buffers are
	// in the measure too: ~16 MiB with the bound, whatever the timeout).
	if grew > 24<<20 {
		t.Errorf("one winner's endless shop answer grew the proxy's heap by %.1f MiB; a buy's answer is read up to 4 MiB", float64(grew)/(1<<20))
	}
	f.p.WantStock(t, actOpen, 99, 1, 0)
	e2e.Eventually(t, 3*time.Second, "shop connection dropped", func() bool { return shop.open.Load() == 0 })
}
