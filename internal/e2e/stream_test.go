package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// pattern is an endless deterministic byte stream, so neither end of a
// large transfer needs to hold it in memory.
type pattern struct{ n uint64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(p.n*2654435761>>13) ^ byte(p.n)
		p.n++
	}
	return len(b), nil
}

// streamShop hashes what it receives at /upload and sends ?n= pattern bytes
// from /download, never holding a body.
func streamShop(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d %s", n, hex.EncodeToString(h.Sum(nil)))
		case "/download":
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, n))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// heapPeak samples HeapInuse until stop is called and returns how far it
// rose above the level at the start.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		if p := peak.Load(); p > base {
			return p - base
		}
		return 0
	}
}

// TestStreamedBodyBoundsProxyMemory: a 32 MiB upload through an ordinary
// route arrives intact at the shop, and a 32 MiB download arrives intact at
// the client, while the proxy's heap grows by far less than the body: the
// bodies stream through instead of being buffered whole.
func TestStreamedBodyBoundsProxyMemory(t *testing.T) {
	const size = 32 << 20
	shop := streamShop(t)
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = shop.URL })
	client := &http.Client{Timeout: 30 * time.Second}

	want := sha256.New()
	body := io.TeeReader(io.LimitReader(&pattern{}, size), want)
	req, err := http.NewRequest("POST", "http://"+f.p.Addr+"/upload", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	stop := heapPeak()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	grew := stop()
	if wantGot := fmt.Sprintf("%d %s", size, hex.EncodeToString(want.Sum(nil))); resp.StatusCode != 200 || string(got) != wantGot {
		t.Fatalf("upload: %d %q, want 200 %q", resp.StatusCode, got, wantGot)
	}
	t.Logf("upload of %d MiB: heap in use rose %.1f MiB at most", size>>20, float64(grew)/(1<<20))
	if grew > size/4 {
		t.Errorf("heap in use rose %d bytes during a %d-byte upload: the body was buffered", grew, size)
	}

	stop = heapPeak()
	resp, err = client.Get("http://" + f.p.Addr + "/download?n=" + strconv.Itoa(size))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	grew = stop()
	ref := sha256.New()
	_, _ = io.Copy(ref, io.LimitReader(&pattern{}, size))
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), ref.Sum(nil)) {
		t.Fatalf("download: %d bytes (err %v), intact %v", n, err, bytes.Equal(h.Sum(nil), ref.Sum(nil)))
	}
	t.Logf("download of %d MiB: heap in use rose %.1f MiB at most", size>>20, float64(grew)/(1<<20))
	if grew > size/4 {
		t.Errorf("heap in use rose %d bytes during a %d-byte download: the body was buffered", grew, size)
	}
}

// TestBuyBodyStillBounded: with bodies streamed, a buy still reads its own
// body, bounded: too big is 400 BAD_REQUEST (with a length or chunked) and
// nothing is reserved, while a small chunked JSON buy still wins.
func TestBuyBodyStillBounded(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("x", 100<<10)
	wantCode(t, f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy", Header: [][2]string{{"X-User-Id", "alice"}}, Body: []byte(big)}), "BAD_REQUEST", 400)

	chunked := func(path, user string, body io.Reader) (int, string) {
		req, err := http.NewRequest("POST", "http://"+f.p.Addr+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // chunked
		req.Header.Set("X-User-Id", user)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := chunked("/api/seckill/open/sku1/buy", "bob", io.MultiReader(strings.NewReader(big), strings.NewReader(big))); st != 400 || !strings.Contains(b, "BAD_REQUEST") {
		t.Errorf("chunked too-big buy: %d %s", st, b)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
	if n := len(f.shop.Buys()); n != 0 {
		t.Errorf("the shop got %d buys", n)
	}
	if st, b := chunked("/j/buy", "carol", strings.NewReader(`{"item":{"sku":"sku1"},"qty":2}`)); st != 200 {
		t.Fatalf("chunked JSON buy: %d %s", st, b)
	}
	if o := f.shop.Buys(); len(o) != 1 || o[0].Qty != "2" || o[0].User != "carol" {
		t.Errorf("shop buys = %+v", o)
	}
}

// TestServerConnLimitsFromConfig: server.max_conns_per_ip bounds one
// address's connections to the public listener.
func TestServerConnLimitsFromConfig(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.Server = "{ max_conns_per_ip: 1 }" })
	held, err := net.Dial("tcp", f.p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	e2e.Eventually(t, 2*time.Second, "a second connection refused", func() bool {
		c, err := net.Dial("tcp", f.p.Addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /_seckill/time HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		b, _ := io.ReadAll(io.LimitReader(c, 64))
		return strings.HasPrefix(string(b), "HTTP/1.1 429")
	})
	held.Close()
	e2e.Eventually(t, 2*time.Second, "served once the first is gone", func() bool {
		return f.do(e2e.Req{Method: "GET", URI: "/_seckill/time"}).Status == 200
	})
}
