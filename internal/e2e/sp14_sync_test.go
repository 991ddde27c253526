package e2e

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// sp14Case is one way a shop answers a winner whose order it took.
type sp14Case struct {
	name string
	ans  sp14Answer
	// code is the buyer's SPEC outcome: WIN (the shop's 2xx passed
	// through), UPSTREAM_TIMEOUT (unknown, pending), UPSTREAM_FAILED.
	code   string
	status int    // the buyer's HTTP status (0: not checked)
	state  string // the reservation's state right after the answer
}

const sp14Hdr = "Content-Type: application/json\r\nX-Shop: order\r\n"

func sp14Body(oid string) string { return `{"order_id":"` + oid + `"}` }

func sp14Cases() []sp14Case {
	okWith := func(prefix string) sp14Answer {
		return func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "%sHTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", prefix, sp14Hdr, len(b), b)
			return true
		}
	}
	return []sp14Case{
		{name: "100-continue", ans: okWith("HTTP/1.1 100 Continue\r\n\r\n"), code: "WIN", status: 200, state: "confirmed"},
		{name: "103-early-hints", ans: okWith("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"), code: "WIN", status: 200, state: "confirmed"},
		{name: "102-processing-thrice", ans: func(c net.Conn, b sp14Buy, oid string) bool {
			for range 3 {
				_, _ = io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n")
				time.Sleep(50 * time.Millisecond)
			}
			return okWith("")(c, b, oid)
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "204-no-body", ans: sp14Raw("HTTP/1.1 204 No Content\r\nX-Shop: order\r\nX-Order-Id: {oid}\r\n\r\n", true), code: "WIN", status: 204, state: "confirmed"},
		{name: "204-with-body", ans: sp14Raw("HTTP/1.1 204 No Content\r\nX-Shop: order\r\nContent-Length: 17\r\n\r\n{\"order_id\":\"x\"}\n", true), code: "WIN", status: 204, state: "confirmed"},
		{name: "204-with-late-body", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nX-Shop: order\r\nContent-Length: 17\r\n\r\n")
			time.Sleep(100 * time.Millisecond)
			_, _ = io.WriteString(c, "{\"order_id\":\"x\"}\n")
			return true
		}, code: "WIN", status: 204, state: "confirmed"},
		{name: "205-cl0", ans: sp14Raw("HTTP/1.1 205 Reset Content\r\nX-Shop: order\r\nContent-Length: 0\r\n\r\n", true), code: "WIN", status: 205, state: "confirmed"},
		{name: "205-no-length-keepalive", ans: sp14Raw("HTTP/1.1 205 Reset Content\r\nX-Shop: order\r\n\r\n", true), code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "101-switching", ans: sp14Raw("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", false), code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "http10-close-delimited", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n"+sp14Hdr+"\r\n"+sp14Body(oid))
			return false
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "http11-close-delimited", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+sp14Hdr+"Connection: close\r\n\r\n"+sp14Body(oid))
			return false
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "chunked-trailers", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n%x\r\n%s\r\n0\r\nX-Checksum: abc\r\n\r\n", sp14Hdr, len(b), b)
			return true
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "chunked-cut-mid-chunk", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+sp14Hdr+"Transfer-Encoding: chunked\r\n\r\n40\r\n{\"order_id\":")
			return false
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "content-length-short-then-close", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+sp14Hdr+"Content-Length: 500\r\n\r\n"+sp14Body(oid))
			return false
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "content-length-conflicting", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s", sp14Hdr, len(b), len(b)+5, b)
			return true
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "te-and-cl", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", sp14Hdr, len(b), b)
			return true
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "body-drips-past-timeout", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n", sp14Hdr, len(b))
			for i := range len(b) {
				if _, err := c.Write([]byte{b[i]}); err != nil {
					return false
				}
				time.Sleep(150 * time.Millisecond)
			}
			return false
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "headers-over-64k", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sX-Big: %s\r\nContent-Length: %d\r\n\r\n%s", sp14Hdr, strings.Repeat("a", 65<<10), len(b), b)
			return true
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "headers-63k", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sX-Big: %s\r\nContent-Length: %d\r\n\r\n%s", sp14Hdr, strings.Repeat("a", 63<<10), len(b), b)
			return true
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "content-length-counts-characters", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			// A shop that counts characters, not bytes, and streams its
			// body in two writes: 6 bytes more than announced.
			b1, b2 := `{"order_id":"`+oid+`",`, `"msg":"秒杀成功"}`
			n := len(b1) + len([]rune(b2))
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", sp14Hdr, n, b1)
			time.Sleep(20 * time.Millisecond)
			_, _ = io.WriteString(c, b2[:len(b2)-8])
			time.Sleep(20 * time.Millisecond)
			_, _ = io.WriteString(c, b2[len(b2)-8:])
			return true
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "body-over-4MiB", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			pad := strings.Repeat(" ", 4<<20)
			b := `{"order_id":"` + oid + `"}` + pad
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", sp14Hdr, len(b), b)
			return true
		}, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "garbage-status-line", ans: sp14Raw("HTPP/1.1 OK 200\r\nContent-Length: 0\r\n\r\n", true), code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "200-no-reason", ans: func(c net.Conn, _ sp14Buy, oid string) bool {
			b := sp14Body(oid)
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200\r\n%sContent-Length: %d\r\n\r\n%s", sp14Hdr, len(b), b)
			return true
		}, code: "WIN", status: 200, state: "confirmed"},
		{name: "status-600", ans: sp14Raw("HTTP/1.1 600 Weird\r\nContent-Length: 0\r\n\r\n", true), code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "status-099", ans: sp14Raw("HTTP/1.1 099 Weird\r\nContent-Length: 0\r\n\r\n", true), code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
		{name: "close-after-read", ans: func(net.Conn, sp14Buy, string) bool { return false }, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"},
	}
}

// TestSP14SyncShopAnswers: every way a shop that took the order answers
// it, in sync mode. The buyer's answer follows SPEC (2xx passed through
// and confirmed; unknown → 504 with token, pending), a shop that took the
// order is never released, the next winner on the same connection pool
// is judged by its own answer, and after reconcile --repair (truthful
// verify) units equal orders.
func TestSP14SyncShopAnswers(t *testing.T) {
	Soak(t)
	for i, tc := range sp14Cases() {
		t.Run(tc.name, func(t *testing.T) {
			shop := sp14StartShop(t, tc.ans)
			act := fmt.Sprintf("sp14s%d", i)
			p := sp14Proxy(t, shop, Activity{ID: act})
			// A warm-up buy so the case's buy runs on a reused connection.
			if r := sp14BuyFirst(t, p, shop, act); r != nil {
				return
			}
			shop.setAnswer(tc.ans)
			r := sp14BuyReq(p, act, "victim", "")
			b, sent := shop.buyOf("victim")
			if !sent {
				t.Fatalf("the shop never read the buy: %d %s", r.Status, r.Body)
			}
			sp14Check(t, p, shop, tc, r, b)
			// The next winner, answered well, on the same pool.
			shop.setAnswer(sp14OK)
			time.Sleep(200 * time.Millisecond)
			n := sp14BuyReq(p, act, "next", "")
			if n.Code != "WIN" || n.Status != 200 {
				nb, _ := shop.buyOf("next")
				t.Errorf("next winner after %s: %d %s %s (shop read it: conn %d seq %d, order %v)", tc.name, n.Status, n.Code, n.Body, nb.Conn, nb.Seq, shop.hasOrder(nb.Token))
			}
			sp14Settle(t, p, shop, act)
		})
	}
}

// sp14BuyFirst buys once with a well-formed answer; nil when fine.
func sp14BuyFirst(t *testing.T, p *Proxy, shop *sp14Shop, act string) *Resp {
	t.Helper()
	shop.setAnswer(sp14OK)
	r := sp14BuyReq(p, act, "warm", "")
	if r.Code != "WIN" {
		t.Fatalf("warm-up buy: %d %s", r.Status, r.Body)
		return &r
	}
	return nil
}

func sp14Check(t *testing.T, p *Proxy, shop *sp14Shop, tc sp14Case, r Resp, b sp14Buy) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("buyer: %v", r.Err)
	}
	if tc.status != 0 && r.Status != tc.status || r.Code != tc.code {
		t.Errorf("buyer got %d %q %s, want %d %s", r.Status, r.Code, trunc(r.Body), tc.status, tc.code)
	}
	if r.Code == "UPSTREAM_TIMEOUT" && r.Token() == "" {
		t.Errorf("504 without token: %s", r.Body)
	}
	_ = p.Server.WaitConfirms(t.Context())
	st, _ := sp14State(t, p, b.Token)
	if st != tc.state {
		t.Errorf("reservation %s, want %s", st, tc.state)
	}
	if st == "released" && shop.hasOrder(b.Token) {
		t.Errorf("released a reservation the shop holds an order for (oversell)")
	}
}

func trunc(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
