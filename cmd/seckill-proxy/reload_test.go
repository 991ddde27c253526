package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// reloadConfig is a config whose only activity is sold out (stock 0), so
// every buy is answered by the proxy with the SOLD_OUT message given.
func reloadConfig(listen, admin, redisAddr, message string, watch bool, extra string) string {
	now := time.Now()
	return fmt.Sprintf(`listen: %q
admin: { listen: %q }
watch: %v
upstream: { url: "http://127.0.0.1:1" }
redis: { addrs: [%q] }
messages: { SOLD_OUT: %q }
activities:
  - id: ract
    start: %s
    end: %s
    skus: [{ id: "s1", stock: 0 }]
%s`, listen, admin, watch, redisAddr, message,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), extra)
}

// soldOutMessage buys once and returns the SOLD_OUT message shown.
func soldOutMessage(t *testing.T, listen string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/api/seckill/ract/s1/buy", strings.NewReader("{}"))
	req.Header.Set("X-User-Id", "u1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Code, Message string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Code != "SOLD_OUT" {
		t.Fatalf("buy: %d %+v %v", resp.StatusCode, body, err)
	}
	return body.Message
}

func waitMessage(t *testing.T, listen, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := soldOutMessage(t, listen)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %q, want %q after reload", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SPEC §3: serve reloads the file on SIGHUP, and on change with watch: true;
// a reload that fails validation is refused and the old config stays.
func TestReload(t *testing.T) {
	srv := redistest.Start(t)
	bin := buildBinary(t)
	tests := []struct {
		name  string
		watch bool
		poke  func(cmd *os.Process)
	}{
		{"SIGHUP", false, func(p *os.Process) { _ = p.Signal(syscall.SIGHUP) }},
		{"watch", true, func(*os.Process) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listen := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			admin := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
			path := filepath.Join(t.TempDir(), "seckill.yaml")
			write := func(s string) {
				t.Helper()
				// Write and rename, as editors do, so the watcher never reads half a file.
				tmp := path + ".tmp"
				if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
			write(reloadConfig(listen, admin, srv.Addr, "first", tt.watch, ""))
			if code, _, errs := cliRun("preheat", "-c", path); code != 0 {
				t.Fatalf("preheat: %d %s", code, errs)
			}
			cmd, _ := startServe(t, bin, path)
			if got := soldOutMessage(t, listen); got != "first" {
				t.Fatalf("message %q, want first", got)
			}

			write(reloadConfig(listen, admin, srv.Addr, "second", tt.watch, ""))
			tt.poke(cmd.Process)
			waitMessage(t, listen, "second")

			// An invalid file is refused; the proxy keeps serving the last good config.
			write(reloadConfig(listen, admin, srv.Addr, "broken", tt.watch, "    stok: 5\n"))
			tt.poke(cmd.Process)
			time.Sleep(1500 * time.Millisecond) // longer than the watcher's 1 s poll
			if got := soldOutMessage(t, listen); got != "second" {
				t.Fatalf("after an invalid reload the message is %q, want the old config's %q", got, "second")
			}
			if cmd.ProcessState != nil {
				t.Fatal("serve exited on an invalid reload")
			}

			write(reloadConfig(listen, admin, srv.Addr, "third", tt.watch, ""))
			tt.poke(cmd.Process)
			waitMessage(t, listen, "third")
		})
	}
}
