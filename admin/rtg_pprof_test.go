package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

type rtgReady struct{}

func (rtgReady) Ping(context.Context) error { return nil }

// rtgAdmin is the admin listener as serve runs it (http.Server with only
// ReadHeaderTimeout), on a real loopback listener.
func rtgAdmin(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(admin.New(metrics.New(), rtgReady{}, "", zap.NewNop()))
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// A client of the admin listener that asks for an execution trace and then
// reads nothing held the tracer on, with every event the runtime recorded
// kept in the proxy's memory, until its seconds ran out — and then for as
// long as it kept not reading (trace.Stop waits for the writes). Nobody
// else could trace meanwhile. The stalled answer is now cut off within a
// few seconds and the tracer is free again.
func TestRTGPprofTraceStalledReaderLetsGo(t *testing.T) {
	srv := rtgAdmin(t)
	addr := srv.Listener.Addr().String()

	// Goroutine ping-pong: trace events fast enough to fill the socket.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := make(chan int), make(chan int)
			go func() {
				for v := range a {
					b <- v
				}
				close(b)
			}()
			for {
				select {
				case <-stop:
					close(a)
					for range b {
					}
					return
				default:
				}
				a <- 1
				<-b
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	stalled, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /debug/pprof/trace?seconds=200 HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	// Read only the status line, then nothing more.
	line, err := bufio.NewReaderSize(stalled, 64).ReadString('\n')
	if err != nil || line[:12] != "HTTP/1.1 200" {
		t.Fatalf("stalled trace answered %q, %v", line, err)
	}

	deadline := time.Now().Add(40 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		resp, err := http.Get(srv.URL + "/debug/pprof/trace?seconds=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %.120s", resp.StatusCode, body)
	}
	t.Fatalf("a client that reads nothing still holds the tracer after 40 s: %s", last)
}

// seconds beyond a few minutes (a profile or trace left running for a day,
// a delta profile's handler asleep for one) is refused.
func TestRTGPprofSecondsCapped(t *testing.T) {
	srv := rtgAdmin(t)
	for _, path := range []string{
		"/debug/pprof/profile?seconds=86400",
		"/debug/pprof/trace?seconds=86400",
		"/debug/pprof/heap?seconds=86400",
		"/debug/pprof/allocs?seconds=1e9",
		"/debug/pprof/profile?seconds=301",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %.120s, want 400", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.5", "/debug/pprof/heap", "/debug/pprof/"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want 200", path, resp.StatusCode)
		}
	}
	// The per-write deadline does not outlive its answer: the next request
	// on the same kept-alive connection, later than the stall bound, is
	// answered.
	time.Sleep(6 * time.Second)
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatalf("kept-alive connection after a profile: %v", err)
	}
	resp.Body.Close()
}
