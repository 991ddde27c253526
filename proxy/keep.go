package proxy

import (
	"bufio"
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Queue mode answers the buyer before the shop sees the buy, so the queue
// worker that sends it later needs what sync mode forwards at once: the
// buyer's request (the session cookie a legacy shop logs the buyer in by,
// the delivery address in the body, the coupon in the query). The proxy
// keeps it in the reservation's stream entry, bounded by
// queue.max_request_bytes; the entry goes when the worker is done.

// hopByHop are the fields that describe the buyer's connection to the
// proxy, not the request: they are not kept for a later send.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Upgrade", "Expect", fasthttp.HeaderTransferEncoding}

// keepSize is what a request counts against queue.max_request_bytes: its
// request line, headers and body as the buyer sent them.
func keepSize(req *fasthttp.Request) int64 {
	h := &req.Header
	return int64(len(h.Method()) + len(h.RequestURI()) + len(h.RawHeaders()) + len(req.Body()) + 16)
}

// unkeepable reports whether a buy that may be queued (mode: queue, or a
// spill) cannot be kept for its worker, with the message saying why:
// larger than the queue keeps, or a header field the worker's HTTP client
// would refuse to send (fasthttp takes names net/http does not: the buy
// would be queued, never sent, and held until the reconciler).
func unkeepable(req *fasthttp.Request, a *config.Activity) (string, bool) {
	if n := keepSize(req); n > a.Queue.MaxRequestBytes {
		return "request too large to queue: " + strconv.FormatInt(n, 10) + " bytes, queue.max_request_bytes is " +
			strconv.FormatInt(a.Queue.MaxRequestBytes, 10), true
	}
	for k, v := range req.Header.All() {
		if !validFieldName(k) || !validFieldValue(v) {
			return "header field " + strconv.Quote(string(k)) + " is not valid HTTP; a queued buy could not be sent with it", true
		}
	}
	return "", false
}

// validFieldName reports whether k is an RFC 9110 token.
func validFieldName(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

// validFieldValue reports whether v has no control byte but tab.
func validFieldValue(v []byte) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// keeper returns the function that builds the request to keep for a queued
// buyer (admission.Request.Keep). m is taken by value and the closure made
// here, so the buy path that never queues does not pay for it.
func (s *Server) keeper(ctx *fasthttp.RequestCtx, up *upstream, m match) func() []byte {
	return func() []byte { return s.keptRequest(ctx, up, &m) }
}

// keptRequest is the buyer's request as a queue worker is to send it, in
// HTTP/1.1 wire form: what forwardWinner sends (the route's canonical path,
// X-Forwarded-For with the peer, the shop's Host when the buyer sent none)
// without the X-Seckill-* headers, which the worker adds and signs when it
// sends, and without hop-by-hop fields. The worker puts upstream.url in
// front of the path. nil if it cannot be written (the worker then rebuilds
// one from the route).
func (s *Server) keptRequest(ctx *fasthttp.RequestCtx, up *upstream, m *match) []byte {
	var req fasthttp.Request
	ctx.Request.CopyTo(&req)
	if m != nil {
		m.rewriteURI(req.URI())
	}
	req.URI().DisablePathNormalizing = true
	for _, k := range hopByHop {
		req.Header.Del(k)
	}
	req.Header.ResetConnectionClose()
	setForwardedFor(&req, ctx.RemoteIP())
	if len(req.Header.Host()) == 0 {
		req.Header.SetHost(up.hostHeader)
	}
	var buf bytes.Buffer
	w := bufio.NewWriterSize(&buf, 1024)
	if err := req.Write(w); err != nil || w.Flush() != nil {
		s.log.Warn("queued buyer's request could not be kept; the worker sends one rebuilt from the route", zap.Error(err))
		return nil
	}
	return buf.Bytes()
}

// spillRequest is keptRequest for a sync winner spilled to the queue
// (upstream.overflow: queue), or nil with false when it cannot be kept
// (unkeepable).
func (s *Server) spillRequest(ctx *fasthttp.RequestCtx, st *state, a *config.Activity) ([]byte, bool) {
	if _, bad := unkeepable(&ctx.Request, a); bad {
		return nil, false
	}
	// The path was rewritten to the canonical spelling already (buy).
	return s.keptRequest(ctx, st.upstream, nil), true
}
