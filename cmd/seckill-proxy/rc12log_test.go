package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 12, resources a client can exhaust: the log.
//
// serve's logger samples (main.go: 10 lines a second per message, then one
// in 100), but fasthttp's own logger (proxy/server.go: zap.NewStdLog) writes
// "error when serving connection <local><-><remote>: <error with the
// request's bytes>" for every connection whose request it cannot parse: the
// client's address and the request are in the message, so every line is a
// new message and the sampler passes them all. The error carries the
// request line (%q-escaped: up to 4 bytes a byte) and a 400-byte snippet
// of the header — its Cookie and Authorization values among them.

var rc12Bin struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// rc12Build builds the binary once per test process.
func rc12Build(t *testing.T) string {
	t.Helper()
	rc12Bin.once.Do(func() {
		rc12Bin.path = filepath.Join(os.TempDir(), "rc12-seckill-proxy")
		rc12Bin.out, rc12Bin.err = exec.Command("go", "build", "-o", rc12Bin.path, ".").CombinedOutput()
	})
	if rc12Bin.err != nil {
		t.Fatalf("go build: %v\n%s", rc12Bin.err, rc12Bin.out)
	}
	return rc12Bin.path
}

// rc12Send writes one raw request on a fresh connection and reads the answer.
func rc12Send(t *testing.T, addr string, raw []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(raw); err != nil {
		return
	}
	buf := make([]byte, 4096)
	_, _ = c.Read(buf)
}

// A client that sends malformed requests on fresh connections writes one
// unsampled log line each, several times the request's size: 300 requests
// of 15 KB in well under a second wrote megabytes.
func TestRC12MalformedRequestsFloodTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	srv := redistest.Start(t)
	shop := orderShop(t)
	cfgPath := lifeConfig(t, srv.Addr, shop.URL, 10, "")
	if code, _, errs := cliRun("preheat", "-c", cfgPath); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	addr, logs := serveLogged(t, rc12Build(t), cfgPath)
	time.Sleep(300 * time.Millisecond)
	before := logs.String()

	const n = 300
	junk := []byte(strings.Repeat("\x01", 15000) + "\r\n\r\n")
	t0 := time.Now()
	for i := 0; i < n; i++ {
		rc12Send(t, addr, junk)
	}
	took := time.Since(t0)
	time.Sleep(300 * time.Millisecond)
	added := strings.TrimPrefix(logs.String(), before)
	lines := strings.Count(added, "\n")
	t.Logf("%d malformed requests (%d bytes each) in %v: %d log lines, %d bytes", n, len(junk), took, lines, len(added))
	// The sampler's bound for one message in one second is 10 + 1 per 100.
	if lines > 50 {
		t.Errorf("%d malformed requests wrote %d log lines (%d bytes of log for %d bytes sent): fasthttp's error log is not sampled (the client address makes each message unique)",
			n, lines, len(added), n*len(junk))
	}
}

// A buyer's malformed request (here a bad Content-Length) puts their
// session cookie and bearer token in the proxy's log.
func TestRC12MalformedRequestLogsCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	srv := redistest.Start(t)
	shop := orderShop(t)
	cfgPath := lifeConfig(t, srv.Addr, shop.URL, 10, "")
	if code, _, errs := cliRun("preheat", "-c", cfgPath); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	addr, logs := serveLogged(t, rc12Build(t), cfgPath)
	rc12Send(t, addr, []byte("GET /account HTTP/1.1\r\nHost: shop\r\nAuthorization: Bearer rc12-SECRET-JWT\r\n"+
		"Cookie: session=rc12-SECRET-SESSION\r\nContent-Length: 1x\r\n\r\n"))
	rc12Send(t, addr, []byte("POST /api/seckill/kact/sku1/buy HTTP/1.1\r\nHost: shop\r\nCookie: session=rc12-SECRET-BUYER\r\n"+
		"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"))
	time.Sleep(300 * time.Millisecond)
	for _, secret := range []string{"rc12-SECRET-JWT", "rc12-SECRET-SESSION", "rc12-SECRET-BUYER"} {
		if i := strings.Index(logs.String(), secret); i >= 0 {
			line := logs.String()[strings.LastIndex(logs.String()[:i], "\n")+1:]
			if j := strings.Index(line, "\n"); j >= 0 {
				line = line[:j]
			}
			t.Errorf("the client's credential %q is in the proxy's log:\n%s", secret, line)
		}
	}
}
