package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"runtime"
	"testing"
)

// TestSP14CompressedAnswerDecodedWithoutBound: a winner's 2xx in
// Content-Encoding gzip (the buyer's own Accept-Encoding is forwarded in
// sync mode) is decoded whole to find the order id: proxy/forward.go
// checks the decoded size (1 MiB) only after BodyUncompressed() built it,
// without a limit. 60 KiB on the wire (under the 64 KiB the code lets
// through) decode to 60 MiB of heap per winner; a brotli or zstd answer
// can decode to far more. The queue worker reads at most 1 MiB of the
// decoded body.
func TestSP14CompressedAnswerDecodedWithoutBound(t *testing.T) {
	var zb bytes.Buffer
	w, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	_, _ = w.Write([]byte(`{"order_id":"x","pad":"`))
	_, _ = w.Write(make([]byte, 60<<20))
	_, _ = w.Write([]byte(`"}`))
	_ = w.Close()
	body := zb.Bytes()
	if len(body) > 64<<10 {
		t.Fatalf("compressed %d bytes", len(body))
	}
	shop := sp14StartShop(t, func(c net.Conn, _ sp14Buy, _ string) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", sp14Hdr, len(body))
		_, _ = c.Write(body)
		return true
	})
	p := sp14Proxy(t, shop, Activity{ID: "sp14gz"})
	shop.setAnswer(sp14OK)
	sp14BuyReq(p, "sp14gz", "warm", "") // connections, pools
	shop.setAnswer(func(c net.Conn, _ sp14Buy, _ string) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", sp14Hdr, len(body))
		_, _ = c.Write(body)
		return true
	})
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	r := sp14BuyReq(p, "sp14gz", "u1", "")
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("buyer %d; %d bytes compressed; heap allocated during the buy: %d MiB", r.Status, len(body), alloc>>20)
	if alloc > 16<<20 {
		t.Errorf("one winner's %d-byte answer cost %d MiB of heap (decoded without a bound)", len(body), alloc>>20)
	}
}
