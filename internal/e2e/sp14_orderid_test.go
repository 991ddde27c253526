package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

type sp14OIDCase struct {
	name string
	body func(oid string) (hdr string, body []byte)
	want func(oid string) string
}

func sp14OIDCases() []sp14OIDCase {
	same := func(oid string) string { return oid }
	return []sp14OIDCase{
		{"gzip", func(oid string) (string, []byte) {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			_, _ = w.Write([]byte(sp14Body(oid)))
			_ = w.Close()
			return "Content-Encoding: gzip\r\n", b.Bytes()
		}, same},
		{"bom", func(oid string) (string, []byte) {
			return "", append([]byte("\xef\xbb\xbf"), sp14Body(oid)...)
		}, same},
		{"number", func(oid string) (string, []byte) {
			return "", []byte(`{"order_id":` + strings.TrimPrefix(oid, "ord-") + `00123456789012345678}`)
		}, func(oid string) string { return strings.TrimPrefix(oid, "ord-") + "00123456789012345678" }},
		{"pipe-in-id", func(oid string) (string, []byte) {
			return "", []byte(`{"order_id":"SO|2026|` + oid + `"}`)
		}, func(oid string) string { return "SO/2026/" + oid }}, // '|' separates a record's fields: stored as '/' (README, order_id_from)
		{"pretty-with-crlf", func(oid string) (string, []byte) {
			return "", []byte("{\r\n  \"status\": \"ok\",\r\n  \"order_id\" : \"" + oid + "\"\r\n}\r\n")
		}, same},
	}
}

// TestSP14OrderIDSync / Queue: where the order id is in odd but valid
// answers, it is recorded (SPEC: "order id recorded when found").
func TestSP14OrderIDSync(t *testing.T)  { sp14OrderID(t, "sync") }
func TestSP14OrderIDQueue(t *testing.T) { sp14OrderID(t, "queue") }

func sp14OrderID(t *testing.T, mode string) {
	for i, tc := range sp14OIDCases() {
		t.Run(tc.name, func(t *testing.T) {
			shop := sp14StartShop(t, func(c net.Conn, _ sp14Buy, oid string) bool {
				h, b := tc.body(oid)
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%s%sContent-Length: %d\r\n\r\n", sp14Hdr, h, len(b))
				_, _ = c.Write(b)
				return true
			})
			act := fmt.Sprintf("sp14o%s%d", mode, i)
			p := sp14Proxy(t, shop, Activity{ID: act, Mode: mode})
			if mode == "queue" {
				p.StartQueue(t)
			}
			r := sp14BuyReq(p, act, "u1", "")
			tok := r.Token()
			var st, got string
			Eventually(t, 5*time.Second, "confirmed", func() bool {
				st, got = sp14State(t, p, tok)
				return st == "confirmed"
			})
			b, _ := shop.buyOf("u1")
			shop.mu.Lock()
			oid := shop.orders[b.Token]
			shop.mu.Unlock()
			if want := tc.want(oid); got != want {
				t.Errorf("%s: order id recorded %q, want %q", mode, got, want)
			}
		})
	}
}
