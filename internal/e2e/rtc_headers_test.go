package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRTCShopSeesOneTokenPerSpelling: a buyer sends forged X-Seckill-*
// fields in every spelling a shop's framework files under the proxy's own
// names (letter case, '_' for '-', duplicate lines, more than the strip's
// first pass holds); in sync and queue mode (the worker sends the kept
// request) the shop's raw header block holds each X-Seckill-* name once,
// with the proxy's value, and no other spelling of it (held).
func TestRTCShopSeesOneTokenPerSpelling(t *testing.T) {
	for _, mode := range []string{"sync", "queue"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			var blocks []string
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							var head strings.Builder
							for {
								line, err := br.ReadString('\n')
								if err != nil {
									return
								}
								head.WriteString(line)
								if line == "\r\n" {
									break
								}
							}
							req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head.String())))
							if err != nil {
								return
							}
							if req.ContentLength > 0 {
								_, _ = io.CopyN(io.Discard, br, req.ContentLength)
							}
							if req.URL.Path == "/internal/orders" {
								_, _ = io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
								continue
							}
							mu.Lock()
							blocks = append(blocks, head.String())
							mu.Unlock()
							_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Shop: order\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"order_id\":\"o-1\"}")
						}
					}()
				}
			}()
			r := StartRedis(t)
			p := StartProxy(t, Options{Redis: r.Addrs, ShopURL: "http://" + ln.Addr().String(),
				Activities: []Activity{{ID: "rtch", Stock: 5, Shards: 1, Mode: mode}}}.Config(t))
			p.Preheat(t, "rtch")
			if mode == "queue" {
				p.StartQueue(t)
			}
			h := [][2]string{{"X-User-Id", "rtc-h1"}}
			for _, n := range []string{"X-Seckill-Token", "x-seckill-token", "X_Seckill_Token", "X-SECKILL-TOKEN", "x_seckill-token",
				"X-Seckill-User", "X_Seckill_User", "X-Seckill-Sku", "x_SECKILL_sku", "X-Seckill-Qty", "X-Seckill-Activity",
				"X-Seckill-Signature", "X_Seckill_Signature", "X-Seckill-Token"} {
				h = append(h, [2]string{n, "forged"})
			}
			got := Do(nil, p.Addr, Req{URI: "/api/seckill/rtch/" + SKU + "/buy", Header: h})
			if got.Code != "WIN" && got.Code != "QUEUED" {
				t.Fatalf("buy: %d %s %s", got.Status, got.Code, got.Body)
			}
			Eventually(t, 10*time.Second, "the buy at the shop", func() bool { mu.Lock(); defer mu.Unlock(); return len(blocks) > 0 })
			mu.Lock()
			block := blocks[0]
			mu.Unlock()
			seen := map[string]int{}
			for _, line := range strings.Split(block, "\r\n")[1:] {
				name, value, ok := strings.Cut(line, ":")
				if !ok {
					continue
				}
				folded := strings.ReplaceAll(strings.ToLower(name), "_", "-")
				if strings.HasPrefix(folded, "x-seckill-") {
					seen[folded]++
					if strings.Contains(value, "forged") {
						t.Errorf("the shop got %q", line)
					}
				}
			}
			for _, n := range []string{"x-seckill-token", "x-seckill-user", "x-seckill-sku", "x-seckill-qty", "x-seckill-activity", "x-seckill-signature"} {
				if seen[n] != 1 {
					t.Errorf("%s: %d lines at the shop, want 1:\n%s", n, seen[n], block)
				}
			}
		})
	}
}
