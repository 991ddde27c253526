package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
)

// DrainRetryAfter is what a buyer refused by a draining instance is told
// to wait: another instance (or this one's replacement) can take the buy.
const DrainRetryAfter = time.Second

// Drain starts a graceful stop: from now on every buy is answered 503 BUSY
// with Retry-After and no admission decision (nothing is reserved), and
// every answer closes its connection so keep-alive clients reconnect to
// another instance. Buys already admitted go on to the shop and are
// settled; other routes are still served until Shutdown. It cannot be
// undone.
func (s *Server) Drain() { s.draining.Store(true) }

// Draining reports whether Drain was called (readiness is then false).
func (s *Server) Draining() bool { return s.draining.Load() }

// refuseDraining answers a buy that arrived after Drain.
func (s *Server) refuseDraining(ctx *fasthttp.RequestCtx, st *state, a *config.Activity) {
	s.answer(ctx, st, a, &answer{code: admission.Busy, activity: a.ID, retryAfter: DrainRetryAfter})
}
