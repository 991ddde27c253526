package e2e_test

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestBuyNotSentGivesStockBack: a buy that fails before any byte of it
// reaches the shop is a definite no, whatever the step that failed: here the
// TLS handshake with an https upstream whose port speaks no TLS (the
// listener reads the ClientHello and hangs up). The unit goes back at once
// (502 UPSTREAM_FAILED), it is not left pending for a reconciler (504), and
// the shop never saw an HTTP request. Before the buy transport, a handshake
// failure was not a dial error and locked the unit.
func TestBuyNotSentGivesStockBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns, httpSeen atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil && b[0] != 0x16 { // 0x16: a TLS handshake record
					httpSeen.Add(1)
				}
			}()
		}
	}()
	f := newFixture(t, func(o *e2e.Options) { o.ShopURL = "https://" + ln.Addr().String() })
	wantCode(t, f.buy(actTiny, "alice"), "UPSTREAM_FAILED", 502)
	f.p.WantStock(t, actTiny, 1, 0, 0)
	// The unit is back in Redis; this instance hears so through the sold-out
	// flag's invalidation, a moment later (README: a memory answer is as old
	// as that message at most). A SOLD_OUT meanwhile reserves nothing.
	var r e2e.Resp
	e2e.Eventually(t, 3*time.Second, "the unit on sale again here", func() bool {
		r = f.buy(actTiny, "bob")
		return r.Code != "SOLD_OUT"
	})
	wantCode(t, r, "UPSTREAM_FAILED", 502)
	f.p.WantStock(t, actTiny, 1, 0, 0)
	if conns.Load() == 0 || httpSeen.Load() != 0 {
		t.Fatalf("connections %d, plain requests seen %d: want TLS handshakes only", conns.Load(), httpSeen.Load())
	}
}
