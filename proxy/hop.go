package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// A proxy is an intermediary: the buyer's connection ends here, and the
// fields that describe it (RFC 9110 §7.6.1: Connection, every field it
// names, and the hop-by-hop fields of old) are not forwarded, and the
// request goes out in the proxy's own HTTP version (§6.2). Forwarded, they
// were a scalper's tools (red-team finding, docs/decisions.md §34):
// `Upgrade: h2c` made the shop switch the buy's connection to HTTP/2 and
// take the order while the proxy read its 101 as a refusal and put the unit
// back on sale; `Connection: X-Seckill-Token, …` had a standard gateway in
// front of the shop drop the proxy's own headers; an upgraded connection
// went back to the pool and took the next shopper's request; a buy in
// `HTTP/2.0` syntax was refused by the shop before its handler and held a
// unit pending. They are removed as the request is read, before any
// decision, so the proxy decides on the fields the shop gets.

// hopFields are always removed. Transfer-Encoding and Trailer are framing,
// which fasthttp owns (it writes its own); Expect is end to end.
var hopFields = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Upgrade"}

// clientConn is what the buyer's connection asked of the proxy, kept while
// its fields are gone from the request: fasthttp's server reads them back
// from the request after the handler (keep-alive or close, HTTP/1.0
// framing of the answer).
type clientConn struct {
	close bool
	proto string // the request's protocol when it is not HTTP/1.1
}

// stripHopByHop removes the hop-by-hop fields and every field the
// Connection header names (never the framing fields or Host: fasthttp owns
// those, and the proxy sets Host), sets the protocol to HTTP/1.1, and
// returns what restoreClientConn needs.
func stripHopByHop(h *fasthttp.RequestHeader) clientConn {
	cc := clientConn{close: h.ConnectionClose()}
	if !h.IsHTTP11() {
		cc.proto = string(h.Protocol())
		h.SetProtocol("HTTP/1.1")
	}
	if !hasHopField(h) {
		return cc
	}
	// The names are copied out first: deleting fields moves the bytes
	// PeekAll returned. The header's size bounds how many there are.
	var named [][]byte
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		for tok := range bytes.SplitSeq(v, []byte(",")) {
			if tok = bytes.TrimSpace(tok); len(tok) > 0 && !protectedField(tok) {
				named = append(named, append([]byte(nil), tok...))
			}
		}
	}
	for _, k := range hopFields {
		h.Del(k)
	}
	for _, k := range named {
		h.DelBytes(k)
	}
	return cc
}

// hasHopField reports whether any hop-by-hop field is there: one pass over
// the header, so the common request pays no deletes.
func hasHopField(h *fasthttp.RequestHeader) bool {
	for k := range h.All() {
		for _, f := range hopFields {
			if len(k) == len(f) && bytes.EqualFold(k, []byte(f)) {
				return true
			}
		}
	}
	return false
}

// protectedField reports whether a name the Connection header lists must
// stay: the message's framing, which fasthttp writes itself, and Host.
func protectedField(name []byte) bool {
	return bytes.EqualFold(name, []byte(fasthttp.HeaderContentLength)) ||
		bytes.EqualFold(name, []byte(fasthttp.HeaderTransferEncoding)) ||
		bytes.EqualFold(name, []byte(fasthttp.HeaderHost)) ||
		bytes.EqualFold(name, []byte(fasthttp.HeaderTrailer))
}

// restoreClientConn puts back what the buyer's connection asked, for
// fasthttp's server to answer by after the handler.
func restoreClientConn(h *fasthttp.RequestHeader, cc clientConn) {
	if cc.proto != "" {
		h.SetProtocol(cc.proto)
	}
	if cc.close {
		h.SetConnectionClose()
	}
}
