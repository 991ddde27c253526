package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Shadow mode (issue 13 §2): a buy of a mode: shadow activity is forwarded
// to the shop unchanged, nothing refused, while the full funnel decides it
// against the activity's shadow copy (config.Activity.Shadow: its own
// stock, keys and limits). A shadow winner's reservation is settled by the
// shop's answer (2xx confirms, anything else releases), so the shadow
// stock tracks what the proxy would have sold; every decision is recorded
// with the shop's answer (store.RecordShadow) for `shadow-report`.

// shadowRecorder is what shadow mode needs of the store.
type shadowRecorder interface {
	RecordShadow(ctx context.Context, recs []store.ShadowRecord) error
}

// shadowQueueMax bounds the decisions waiting to be recorded; beyond it a
// record is dropped (and logged), never the buy.
const shadowQueueMax = 1 << 16

// shadowBatchMax bounds one recording round trip.
const shadowBatchMax = 512

// shadowLog records shadow decisions in the background, in batches.
type shadowLog struct {
	q       chan store.ShadowRecord
	workers atomic.Int32
	pending atomic.Int64 // queued or being recorded
	dropped atomic.Int64
}

func newShadowLog() shadowLog { return shadowLog{q: make(chan store.ShadowRecord, shadowQueueMax)} }

// shadowBuy handles a buy of a shadow activity.
func (s *Server) shadowBuy(ctx *fasthttp.RequestCtx, st *state, m match, a *config.Activity) {
	t0 := time.Now()
	sa := a.Shadow()
	rec := store.ShadowRecord{Activity: sa.ID, Qty: 1, ExpireAt: store.ExpireAt(a)}
	var d admission.Decision
	streamed := false
	code := admission.BadRequest
	switch {
	case ctx.Request.Header.ContentLength() > maxBuyBody:
		// Too large for the funnel (it would answer BAD_REQUEST unread):
		// the shop gets it as it streams in.
		streamed = true
	case !bufferBuyBody(&ctx.Request):
		// A chunked body over the bound, or cut short: what was read is
		// gone, so the shop cannot get it whole; the one answer the proxy
		// makes itself in shadow mode.
		rec.DecisionUs = time.Since(t0).Microseconds()
		rec.Code = code.String()
		s.recordShadow(rec)
		writeAnswer(ctx, &answer{code: admission.BadRequest, activity: a.ID, message: st.messages[admission.BadRequest]})
		return
	default:
		var req admission.Request
		if req, code = s.parse(ctx, st, a, m); code == admission.Admitted {
			rec.SKU, rec.User, rec.Qty = req.SKU, req.User, req.Qty
			rp := requestPool.Get().(*admission.Request)
			*rp = req
			rp.Activity = sa
			d = s.decide.Decide(context.Background(), rp)
			code = d.Code
			if rec.User == "" {
				rec.User = rp.User // a session identity, looked up by admission
			}
			*rp = admission.Request{}
			requestPool.Put(rp)
		}
	}
	rec.DecisionUs = time.Since(t0).Microseconds()
	rec.Code, rec.Admitted = code.String(), code == admission.Admitted
	if a.ShadowHeaders {
		ctx.Request.Header.Set("X-Seckill-Shadow", rec.Code)
	}

	var err error
	if streamed {
		s.pass(ctx, st)
	} else {
		err = shadowSend(ctx, st.upstream)
	}
	if err == nil {
		// Streamed, a proxy-made 502/504 (the shop unreachable) reads as
		// the shop's: such a buy is past the funnel's bound anyway.
		// Otherwise a proxy-made answer records no status (0: the shop's
		// answer is unknown).
		rec.Status = ctx.Response.StatusCode()
	}
	ok := rec.Status >= 200 && rec.Status <= 299
	if ok && !streamed {
		rec.OrderID = orderID(&ctx.Response, a.OrderIDFrom)
	}
	if code == admission.Admitted {
		s.settleShadow(d, ok, rec.OrderID, rec.Status)
	}
	s.recordShadow(rec)
}

// shadowSend forwards a shadowed buy as ordinary traffic is: the pass
// client, waiting up to upstream.pass_timeout (not upstream.timeout, sized
// for winners), so a slow shop's answer reaches the buyer as it would
// without the proxy. The answer is read whole, bounded as a winner's is
// (its order id for the record; a Content-Length for an HTTP/1.0 buyer).
// On an error the proxy has answered 502/504 itself (answerUnreachable).
func shadowSend(ctx *fasthttp.RequestCtx, up *upstream) error {
	up.prepare(ctx)
	err := up.pass.DoTimeout(&ctx.Request, &ctx.Response, up.passTimeout)
	if err == nil && ctx.Response.StatusCode() < 200 {
		// A 101 (see Server.pass): nothing is tunnelled.
		up.pass.CloseIdleConnections()
		err = errSwitchedProtocols
	}
	if err == nil && ctx.Response.IsBodyStream() {
		b, rerr := io.ReadAll(io.LimitReader(ctx.Response.BodyStream(), buyAnswerMax+1))
		switch {
		case rerr != nil:
			err = rerr
		case len(b) > buyAnswerMax:
			err = errShadowAnswerTooLarge
		default:
			ctx.Response.SetBody(b)
		}
	}
	if err != nil {
		answerUnreachable(ctx, err)
	}
	return err
}

// errShadowAnswerTooLarge: a shop's answer to a shadowed buy over
// buyAnswerMax (as the buy client refused one before).
var errShadowAnswerTooLarge = errors.New("the shop's answer to a shadowed buy is over 4 MiB")

// settleShadow settles a shadow winner's reservation as the shop's answer
// says: 2xx confirms, anything else (a refusal, no answer) releases.
func (s *Server) settleShadow(d admission.Decision, ok bool, oid string, status int) {
	tok := d.Token.String()
	if ok {
		s.confirmAfter(tok, oid, store.ConfirmItem{Token: d.Token, Shards: d.Shards, OrderID: oid}, func(c context.Context) (lua.Code, error) {
			return s.book.Confirm(c, d.Token, d.Shards, oid)
		})
		return
	}
	reason := fmt.Sprintf("shadow_shop_status_%d", status)
	s.settle("release", func(c context.Context) (lua.Code, error) {
		return s.book.Release(c, d.Token, d.Shards, reason, time.Now().UnixMilli(), true)
	}, tok)
}

// recordShadow queues one decision for the recorder.
func (s *Server) recordShadow(rec store.ShadowRecord) {
	sr, ok := s.book.(shadowRecorder)
	if !ok {
		return
	}
	l := &s.shadow
	l.pending.Add(1)
	select {
	case l.q <- rec:
	default:
		l.pending.Add(-1)
		if n := l.dropped.Add(1); n&(n-1) == 0 { // 1, 2, 4, 8...: logged, not flooded
			s.log.Warn("shadow decisions not recorded: the recorder is behind", zap.Int64("dropped", n))
		}
		return
	}
	for {
		n := l.workers.Load()
		if n >= 2 {
			return
		}
		if l.workers.CompareAndSwap(n, n+1) {
			go s.shadowWork(sr)
			return
		}
	}
}

// shadowWork records batches until the queue is empty, then exits.
func (s *Server) shadowWork(sr shadowRecorder) {
	l := &s.shadow
	batch := make([]store.ShadowRecord, 0, 64)
	for {
		select {
		case r := <-l.q:
			batch = append(batch[:0], r)
		fill:
			for len(batch) < shadowBatchMax {
				select {
				case r := <-l.q:
					batch = append(batch, r)
				default:
					break fill
				}
			}
			var err error
			for try := 0; try < 3; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err = sr.RecordShadow(ctx, batch)
				cancel()
				if err == nil || !store.Retryable(err) {
					break
				}
				time.Sleep(100 * time.Millisecond << try)
			}
			if err != nil {
				n := l.dropped.Add(int64(len(batch)))
				s.log.Warn("shadow decisions not recorded", zap.Int("batch", len(batch)), zap.Int64("dropped", n), zap.Error(err))
			}
			l.pending.Add(-int64(len(batch)))
		default:
			l.workers.Add(-1)
			if len(l.q) == 0 {
				return
			}
			n := l.workers.Load()
			if n >= 2 || !l.workers.CompareAndSwap(n, n+1) {
				return
			}
		}
	}
}

// WaitShadow waits until every shadow decision taken so far is recorded
// (tests read the report after it; Shutdown waits for it too).
func (s *Server) WaitShadow(ctx context.Context) error {
	for s.shadow.pending.Load() > 0 {
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%d shadow decisions still being recorded: %w", s.shadow.pending.Load(), ctx.Err())
		}
	}
	return nil
}

// ShadowDropped is how many shadow decisions were not recorded (the
// recorder's queue full, or Redis down through its retries).
func (s *Server) ShadowDropped() int64 { return s.shadow.dropped.Load() }
