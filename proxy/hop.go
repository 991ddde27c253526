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

// stripHopByHop removes the hop-by-hop fields and every field the
// Connection header names (never the framing fields or Host: fasthttp owns
// those, and the proxy sets Host) and sets the protocol to HTTP/1.1.
// fasthttp's server reads the buyer's keep-alive and version before the
// handler runs, so its answer on the buyer's connection is unchanged. It
// reports whether the buyer spoke an older HTTP (1.0): such a client cannot
// read a chunked answer (RFC 9112 §6.1), which pass must then not stream.
// hop is whether stripSeckillHeaders' pass may have seen one of
// hopFields (headerFacts): the common request, with none, pays no deletes.
func stripHopByHop(h *fasthttp.RequestHeader, hop bool) (http10 bool) {
	if !h.IsHTTP11() {
		h.SetProtocol("HTTP/1.1")
		http10 = true
	}
	if !hop {
		return http10
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
	return http10
}

// http10Key marks, as a user value, a request whose buyer spoke HTTP/1.0
// (server.go handle): only those carry it, so an HTTP/1.1 pass costs one
// look through an empty list.
type http10Key struct{}

// pass10Max bounds the streamed answer of unknown length read whole for an
// HTTP/1.0 buyer.
const pass10Max = 16 << 20

// hopField reports whether header name k is one of hopFields, any case.
func hopField(k []byte) bool {
	switch len(k) {
	case len("TE"), len("Upgrade"), len("Connection"), len("Proxy-Connection"):
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

// A connection keeps its request's buffers between requests (the server
// runs with ReduceMemoryUsage off, for speed): a buy's buffered body, a
// long request line, and the table of a header of many lines stayed
// allocated on an idle keep-alive connection, 60–250 KiB each against the
// ≈ 20 KiB the README counts per connection (red-team finding,
// docs/decisions.md §34). A request that grew them is answered and its
// connection closed, so what it grew goes back to the pools instead of
// idling with the connection.
const (
	keepBodyMax        = 8 << 10  // a buy body above this closes the connection
	keepHeaderMax      = 12 << 10 // request line and header fields above this
	keepHeaderBytesMax = 4 << 10  // a header above this many bytes…
	keepHeaderLinesMax = 64       // …and this many lines closes it
)

// headerGrew reports whether the request's line and header grew its
// connection's buffers past what an idle connection should hold.
func headerGrew(h *fasthttp.RequestHeader) bool {
	raw := len(h.RawHeaders())
	return raw+len(h.RequestURI()) > keepHeaderMax || raw > keepHeaderBytesMax && h.Len() > keepHeaderLinesMax
}

// bodyGrew reports whether a buy's buffered body did.
func bodyGrew(req *fasthttp.Request) bool {
	return !req.IsBodyStream() && len(req.Body()) > keepBodyMax
}
