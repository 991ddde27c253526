package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestServeSIGTERMAsSoonAsListening: a SIGTERM that arrives the moment the
// public listener accepts (an orchestrator stopping a pod that just
// started) is a graceful stop, exit 0 — not the default action of the
// signal, which ended serve before its handler was installed (a red-team
// helper saw "signal: terminated" 6 ms after start).
func TestServeSIGTERMAsSoonAsListening(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	rs := redistest.Start(t)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	t.Cleanup(shop.Close)
	t.Setenv(lifeSecretEnv, "s3cret")
	for i := range 3 {
		listen := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		start := time.Now().Add(time.Hour)
		y := fmt.Sprintf(`listen: %q
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: 1s }
server: { drain_delay: 0s }
activities:
  - id: sig
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 5 }]
`, listen, redistest.FreePort(t), shop.URL, lifeSecretEnv, rs.Addr,
			start.UTC().Format(time.RFC3339), start.Add(time.Hour).UTC().Format(time.RFC3339))
		cfgPath := filepath.Join(t.TempDir(), "seckill.yaml")
		if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", "-c", cfgPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if c, err := net.DialTimeout("tcp", listen, 100*time.Millisecond); err == nil {
				_ = c.Close()
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatal("serve did not come up")
			}
			time.Sleep(200 * time.Microsecond)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("try %d: SIGTERM as the listener opened: %v, want a graceful stop (exit 0)", i, err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("try %d: serve did not stop after SIGTERM", i)
		}
	}
}
