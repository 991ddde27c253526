package e2e_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestRT10HTTPUpgradeOnPassRouteCannotCaptureOthersRequests: ordinary
// traffic passes straight through (SPEC §1). The proxy does not tunnel an
// upgraded connection, yet forwards a client's Upgrade and Connection
// fields (RFC 9110 §7.6.1: hop-by-hop, an intermediary MUST remove them),
// so a shop's WebSocket endpoint (live stock, a countdown, chat) answers
// 101 and switches the proxy's pooled upstream connection to WebSocket.
// The proxy's pass client reads the 101 as a final answer and puts the
// connection back in its pool: the next shopper's ordinary request —
// session cookie included — is written into mallory's WebSocket session at
// the shop, and that shopper waits for pass_timeout and gets 504. Want:
// the other shopper's request reaches the shop's HTTP handler and is
// answered; nothing of it lands in another client's upgraded connection.
func TestRT10HTTPUpgradeOnPassRouteCannotCaptureOthersRequests(t *testing.T) {
	var mu sync.Mutex
	var wsBytes bytes.Buffer
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
			_ = brw.Flush()
			// The WebSocket session: whatever arrives is mallory's frames.
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 4096)
			rd := bufio.NewReader(io.MultiReader(brw.Reader, c))
			for {
				n, err := rd.Read(buf)
				mu.Lock()
				wsBytes.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}
		w.Header().Set("X-Shop", "pass")
		_, _ = io.WriteString(w, "hello "+r.URL.Path)
	})
	shop := httptest.NewServer(h)
	t.Cleanup(shop.Close)
	redis := e2e.StartRedis(t)
	o := e2e.Options{Redis: redis.Addrs, ShopURL: shop.URL, UpstreamExtra: []string{"pass_timeout: 1500ms"},
		Activities: []e2e.Activity{{ID: "wsact", Stock: 10, Shards: 1}}}
	p := e2e.StartProxy(t, o.Config(t))

	rs := rt10httpSend(t, p.Addr, "GET /ws HTTP/1.1\r\nHost: shop.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 1)
	if len(rs) == 0 || rs[0].Err != nil {
		t.Fatalf("mallory's upgrade: %+v", rs)
	}
	t.Logf("mallory's upgrade request: %d %v", rs[0].Status, rs[0].Header)

	r := e2e.Do(nil, p.Addr, e2e.Req{Method: "GET", URI: "/account", Header: [][2]string{{"Cookie", "session=alice-secret"}}})
	t.Logf("alice's ordinary request after it: %d %q err=%v", r.Status, r.Body, r.Err)
	mu.Lock()
	leaked := wsBytes.String()
	mu.Unlock()
	if strings.Contains(leaked, "alice-secret") {
		t.Errorf("alice's request (with her session cookie) was written into mallory's WebSocket session at the shop: %q", leaked)
	}
	if r.Err != nil || r.Status != 200 || string(r.Body) != "hello /account" {
		t.Errorf("alice's ordinary request: %d %q err=%v, want the shop's 200 \"hello /account\"", r.Status, r.Body, r.Err)
	}
}
