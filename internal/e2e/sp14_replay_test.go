package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// TestSP14Replays: a repeat of a winner's request (same user, same
// X-Request-Id) after each kind of shop answer gets the shop's original
// status and body with the same token (2xx), PENDING (unknown) and then
// ALREADY_PURCHASED after the reconciler confirmed it, or UPSTREAM_FAILED
// (released).
func TestSP14Replays(t *testing.T) {
	gz := func(oid string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(sp14Body(oid)))
		_ = w.Close()
		return b.Bytes()
	}
	cases := []struct {
		name  string
		ans   sp14Answer
		first int // the buyer's first status
		again int // the repeat's status
		after int // the repeat's status after reconcile --repair (0: not checked)
	}{
		{"204", sp14Raw("HTTP/1.1 204 No Content\r\nX-Shop: order\r\n\r\n", true), 204, 204, 0},
		{"100-then-201", func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n%sContent-Length: %d\r\n\r\n%s", sp14Hdr, len(b), b)
			return true
		}, 201, 201, 0},
		{"http10-close", func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n"+sp14Hdr+"\r\n"+sp14Body(oid))
			return false
		}, 200, 200, 0},
		{"gzip", func(c net.Conn, _ sp14Buy, oid string) bool {
			b := gz(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", sp14Hdr, len(b))
			_, _ = c.Write(b)
			return true
		}, 200, 200, 0},
		{"chunked-cut", func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+sp14Hdr+"Transfer-Encoding: chunked\r\n\r\n40\r\n{\"order")
			return false
		}, 504, 202, 409},
		{"409-refused", sp14Raw("HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n", true), 502, 502, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shop := sp14StartShop(t, tc.ans)
			if tc.first == 502 {
				shop.noOrder["u1"] = true
			}
			act := fmt.Sprintf("sp14r%d", i)
			p := sp14Proxy(t, shop, Activity{ID: act})
			r1 := sp14BuyReq(p, act, "u1", "rid-1")
			if r1.Status != tc.first {
				t.Fatalf("first: %d %s", r1.Status, r1.Body)
			}
			_ = p.Server.WaitConfirms(t.Context())
			r2 := sp14BuyReq(p, act, "u1", "rid-1")
			if r2.Status != tc.again {
				t.Errorf("repeat: %d %s, want %d", r2.Status, r2.Body, tc.again)
			}
			if tc.first/100 == 2 {
				if !bytes.Equal(r1.Body, r2.Body) || r1.Token() != r2.Token() || r2.Header["X-Seckill-Replayed"] != "true" ||
					r1.Header["Content-Encoding"] != r2.Header["Content-Encoding"] {
					t.Errorf("replay differs: first %q token %s ce %q; repeat %q token %s ce %q replayed %q",
						r1.Body, r1.Token(), r1.Header["Content-Encoding"], r2.Body, r2.Token(), r2.Header["Content-Encoding"], r2.Header["X-Seckill-Replayed"])
				}
			}
			if len(shop.Buys()) != 1 {
				t.Errorf("the shop got %d buys for one request id", len(shop.Buys()))
			}
			if tc.after != 0 {
				ra12Reconcile(t, p, act, time.Now().Add(time.Hour))
				r3 := sp14BuyReq(p, act, "u1", "rid-1")
				if r3.Status != tc.after {
					t.Errorf("repeat after reconcile: %d %s, want %d", r3.Status, r3.Body, tc.after)
				}
			}
			sp14Settle(t, p, shop, act)
		})
	}
}
