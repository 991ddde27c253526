package proxy

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// answer is the body of every response the proxy gives itself (SPEC §4).
// Empty fields are left out.
type answer struct {
	code       admission.Code
	message    string
	activity   string
	sku        string
	token      string
	orderID    string
	retryAfter time.Duration
	startMs    int64
	endMs      int64
	serverTime bool
	upstream   int // the shop's status, for UPSTREAM_FAILED
	// challenge is WWW-Authenticate for UNAUTHENTICATED (default
	// `Bearer error="invalid_token"`).
	challenge string
}

// writeAnswer renders a into ctx with the SPEC status and headers. It builds
// the JSON by hand: the refusal path is the hottest path of a sale.
func writeAnswer(ctx *fasthttp.RequestCtx, a *answer) {
	ctx.Response.Reset()
	ctx.SetStatusCode(a.code.HTTPStatus())
	ctx.SetContentType("application/json")
	if a.retryAfter > 0 {
		secs := int64((a.retryAfter + time.Second - 1) / time.Second)
		ctx.Response.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	if a.token != "" {
		ctx.Response.Header.Set("X-Seckill-Token", a.token)
	}
	if a.code == admission.Unauthenticated {
		ch := a.challenge
		if ch == "" {
			ch = `Bearer error="invalid_token"`
		}
		ctx.Response.Header.Set("WWW-Authenticate", ch)
	}
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	buf = append(buf, `{"code":`...)
	buf = appendJSONString(buf, a.code.String())
	buf = append(buf, `,"message":`...)
	buf = appendJSONString(buf, a.message)
	if a.activity != "" {
		buf = append(buf, `,"activity":`...)
		buf = appendJSONString(buf, a.activity)
	}
	if a.sku != "" {
		buf = append(buf, `,"sku":`...)
		buf = appendJSONString(buf, a.sku)
	}
	if a.token != "" {
		buf = append(buf, `,"token":`...)
		buf = appendJSONString(buf, a.token)
	}
	if a.orderID != "" {
		buf = append(buf, `,"order_id":`...)
		buf = appendJSONString(buf, a.orderID)
	}
	if a.serverTime {
		buf = append(buf, `,"server_time_ms":`...)
		buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
	}
	if a.startMs != 0 {
		buf = append(buf, `,"start_ms":`...)
		buf = strconv.AppendInt(buf, a.startMs, 10)
		buf = append(buf, `,"end_ms":`...)
		buf = strconv.AppendInt(buf, a.endMs, 10)
	}
	if a.retryAfter > 0 {
		buf = append(buf, `,"retry_after_ms":`...)
		buf = strconv.AppendInt(buf, a.retryAfter.Milliseconds(), 10)
	}
	if a.upstream != 0 {
		buf = append(buf, `,"upstream_status":`...)
		buf = strconv.AppendInt(buf, int64(a.upstream), 10)
	}
	buf = append(buf, '}')
	ctx.Response.SetBody(buf)
	*bp = buf
	bufPool.Put(bp)
}

// replayOrAnswer answers ALREADY_PURCHASED: with the shop's original
// answer when the buyer repeats a won request (same user, same request id)
// and it was kept, else with the proxy's 409 (token and order id, for a
// verified buyer).
//
// An exact replay is served to an unverified identity too, token header
// included: it needs the winner's own X-Request-Id, which only the
// winner's client sent (README "Identity": use unguessable request ids,
// or a verified identity).
func (s *Server) replayOrAnswer(ctx *fasthttp.RequestCtx, st *state, a *config.Activity, d admission.Decision, ans *answer) {
	if d.Replay == nil {
		s.answer(ctx, st, a, ans)
		return
	}
	writeReplay(ctx, d.Replay, d.Token.String())
	st.outcome[a.ID].byCode[ans.code].Inc()
}

// writeReplay renders a kept shop answer: its status, Content-Type,
// Content-Encoding and body, with the reservation's X-Seckill-Token and
// X-Seckill-Replayed: true (so a client can tell it from a first answer).
func writeReplay(ctx *fasthttp.RequestCtx, rp *store.Replay, token string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(rp.Status)
	if rp.ContentType != "" {
		ctx.Response.Header.SetContentType(rp.ContentType)
	} else {
		ctx.Response.Header.SetNoDefaultContentType(true)
	}
	if rp.ContentEncoding != "" {
		ctx.Response.Header.SetContentEncoding(rp.ContentEncoding)
	}
	ctx.Response.Header.Set("X-Seckill-Token", token)
	ctx.Response.Header.Set("X-Seckill-Replayed", "true")
	ctx.Response.SetBody(rp.Body)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c < 0x20:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, `\ufffd`...)
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}
