package proxy

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// notSentError marks a buy that failed before any byte of it was handed to
// the connection: no connection could be had (pool, dial, TLS handshake),
// fasthttp would not write the request (no host, a framing it refuses), or
// the connection refused the first byte. The shop cannot have taken the
// order, so the outcome is a definite no and the unit goes back, instead of
// waiting pending for a reconciler (a red-team finding, docs/decisions.md
// §31: one request per identity that fasthttp would not send locked a unit).
type notSentError struct{ err error }

func (e notSentError) Error() string { return "buy not sent to the shop: " + e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// buyTransport is fasthttp's transport for the buy client with one
// difference: it knows whether the request started to leave. It is the
// default transport's steps (a connection from the pool, write with the
// deadline, read the answer whole, keep or close the connection) through
// exported HostClient methods, the write going through a counter. A buy's
// answer is small and read whole; the buy client never retries.
type buyTransport struct {
	timeout time.Duration
}

// countedConn counts the bytes the request's writer handed to the
// connection.
type countedConn struct {
	net.Conn
	n int
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n += n
	return n, err
}

var countedPool = sync.Pool{New: func() any { return new(countedConn) }}

func (t buyTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	deadline := time.Now().Add(t.timeout)
	cc, err := hc.AcquireConn(t.timeout, req.ConnectionClose())
	// An idle connection the shop closed (its keep-alive shorter than
	// idle_timeout, maybe with a 408) or wrote to unasked (bytes its last
	// answer's framing did not cover) is never written to: the buy would be
	// judged by the close or by those bytes, an unknown outcome (or a 4xx)
	// for a request the shop never read, or a verdict that is not its own.
	// Closed, and the next one taken (or dialled), as the warm pool does
	// (shopwarm.go). The deadline is set first: a pooled connection keeps
	// its last request's, passed, and a peek past it never runs.
	for tries := 0; err == nil; tries++ {
		if err = cc.Conn().SetDeadline(deadline); err != nil {
			hc.CloseConn(cc)
			return false, notSentError{err}
		}
		if !connStale(cc.Conn()) {
			break
		}
		hc.CloseConn(cc)
		if tries == maxStaleConns {
			return false, notSentError{errStaleConns}
		}
		cc, err = hc.AcquireConn(t.timeout, req.ConnectionClose())
	}
	if err != nil {
		return false, notSentError{err}
	}
	conn := cc.Conn()
	cw := countedPool.Get().(*countedConn)
	cw.Conn, cw.n = conn, 0
	bw := hc.AcquireWriter(cw)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	sent := cw.n > 0
	cw.Conn = nil
	countedPool.Put(cw)
	if err != nil {
		hc.CloseConn(cc)
		if !sent {
			return false, notSentError{err}
		}
		return false, timeoutAsErrTimeout(err)
	}
	if req.Header.IsHead() {
		resp.SkipBody = true
	}
	if hc.DisableHeaderNamesNormalizing {
		resp.Header.DisableNormalizing()
	}
	br := hc.AcquireReader(conn)
	err = resp.ReadLimitBody(br, hc.MaxResponseBodySize)
	// Bytes after the answer's end (a 204's body, a Content-Length
	// shorter than the body) are not the next answer: the connection is
	// not pooled.
	extra := br.Buffered() > 0
	hc.ReleaseReader(br)
	if err != nil {
		hc.CloseConn(cc)
		return false, timeoutAsErrTimeout(err)
	}
	if resp.StatusCode() < 200 {
		// A 101: the shop switched the connection to another protocol
		// (the proxy sends no Upgrade, hop.go, so this is a shop that
		// ignores that). What it did with the buy is unknown, and the
		// connection is no longer HTTP/1.1: closed, never pooled.
		hc.CloseConn(cc)
		return false, errSwitchedProtocols
	}
	if extra || req.ConnectionClose() || resp.ConnectionClose() {
		hc.CloseConn(cc)
	} else {
		hc.ReleaseConn(cc)
	}
	return false, nil
}

// maxStaleConns bounds the stale idle connections one buy closes before it
// gives up unsent (a definite no).
const maxStaleConns = 16

var errStaleConns = errors.New("every connection to the shop was closed or written to by the shop while idle")

// errSwitchedProtocols is a buy answered 101 Switching Protocols: sent, its
// outcome unknown.
var errSwitchedProtocols = errors.New("the shop answered 101 Switching Protocols; the buy's outcome is unknown")

// timeoutAsErrTimeout reports any timeout as fasthttp.ErrTimeout, as the
// default transport does.
func timeoutAsErrTimeout(err error) error {
	if x, ok := err.(interface{ Timeout() bool }); ok && x.Timeout() {
		return fasthttp.ErrTimeout
	}
	return err
}
