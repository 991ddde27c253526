package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
)

// server.max_conns and server.max_conns_per_ip are enforced here, on
// accept, rather than by fasthttp's Concurrency and MaxConnsPerIP: those
// answer a connection past them with a text/plain "503 Service
// Unavailable" / "429 Too Many Requests" of their own, and SPEC §4 wants
// every answer the proxy gives itself as its JSON (SPEC audit spa). A
// connection past max_conns gets 503 BUSY, past max_conns_per_ip 429
// RATE_LIMITED, both with Retry-After, and is closed; nothing of it is read
// as a request. fasthttp's Concurrency stays as a backstop a little above
// max_conns (connSlack): a connection is counted out here when it is
// closed, a moment before fasthttp's worker counts it out.

// connSlack is how far above max_conns fasthttp's own limit sits.
const connSlack = 64

// connRetryAfter is the Retry-After of a refused connection.
const connRetryAfter = time.Second

// refuseLingerMax bounds refused connections whose unread bytes are being
// drained at once (so the client reads the answer rather than a reset);
// past it a refused connection is closed at once, as fasthttp did.
const refuseLingerMax = 1024

type connLimitListener struct {
	net.Listener
	s          *Server
	max, perIP int
	open       atomic.Int64
	lingering  atomic.Int64
	mu         sync.Mutex
	byIP       map[netip.Addr]int
}

// limitConns wraps ln with the server's connection bounds (none: ln).
func (s *Server) limitConns(ln net.Listener) net.Listener {
	if s.maxConns <= 0 && s.maxConnsPerIP <= 0 {
		return ln
	}
	return &connLimitListener{Listener: ln, s: s, max: s.maxConns, perIP: s.maxConnsPerIP, byIP: map[netip.Addr]int{}}
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.open.Add(1) > int64(l.max) {
			l.open.Add(-1)
			l.refuse(c, admission.Busy)
			continue
		} else if l.max <= 0 {
			l.open.Add(1)
		}
		lc := &limitedConn{Conn: c, l: l}
		if l.perIP > 0 {
			if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
				ip := ta.AddrPort().Addr().Unmap()
				l.mu.Lock()
				n := l.byIP[ip]
				if n >= l.perIP {
					l.mu.Unlock()
					l.open.Add(-1)
					l.refuse(c, admission.RateLimited)
					continue
				}
				l.byIP[ip] = n + 1
				l.mu.Unlock()
				lc.ip, lc.counted = ip, true
			}
		}
		return lc, nil
	}
}

// refuse writes the SPEC answer for code on c and closes it. The client's
// request may already be in c's receive buffer: closing over unread bytes
// sends a reset that can overtake the answer, so the bytes are drained for
// a moment first (in its own goroutine, bounded by refuseLingerMax).
func (l *connLimitListener) refuse(c net.Conn, code admission.Code) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(l.s.connRefusal(code))
	if l.lingering.Add(1) > refuseLingerMax {
		l.lingering.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer l.lingering.Add(-1)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c, 64<<10)
		_ = c.Close()
	}()
}

// connRefusal renders the whole HTTP answer to a refused connection, with
// the running config's message for code.
func (s *Server) connRefusal(code admission.Code) []byte {
	var ctx fasthttp.RequestCtx
	ans := &answer{code: code, retryAfter: connRetryAfter}
	if st := s.cur.Load(); st != nil {
		ans.message = st.messages[code]
	}
	if ans.message == "" {
		ans.message = code.DefaultMessage()
	}
	writeAnswer(&ctx, ans)
	ctx.Response.SetConnectionClose()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	_ = ctx.Response.Write(w)
	_ = w.Flush()
	return b.Bytes()
}

// limitedConn counts itself out of its listener's bounds when closed.
type limitedConn struct {
	net.Conn
	l       *connLimitListener
	ip      netip.Addr
	counted bool
	once    sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.counted {
			c.l.mu.Lock()
			if n := c.l.byIP[c.ip] - 1; n > 0 {
				c.l.byIP[c.ip] = n
			} else {
				delete(c.l.byIP, c.ip)
			}
			c.l.mu.Unlock()
		}
	})
	return err
}

// NetConn is the connection under c, for the socket peeks
// (admission.connGone, shop warm-up) that look through wrappers.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }
