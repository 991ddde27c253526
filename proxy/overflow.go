package proxy

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Protecting the shop (issue 11 §1): with upstream.max_inflight, a sync
// winner is sent only with a slot of the activity's in-flight budget
// (package inflight). Past it, upstream.overflow says what the winner
// gets: queue (202 QUEUED, the queue workers send it when the shop has
// room), wait (up to upstream.overflow_wait for a slot, then 503 BUSY) or
// busy (503 BUSY at once). A winner answered BUSY holds nothing: its
// reservation is released before the answer, and its request id is
// forgotten so a retry can buy.
//
// Without max_inflight none of this runs: a winner goes straight to
// forwardWinner, as before.

// spiller is what overflow needs of the store beyond Book.
type spiller interface {
	Spill(ctx context.Context, t store.Token, shards int, nowMs, maxBacklog, expireAt int64, request []byte) (lua.Code, int64, error)
	ForgetRequestID(ctx context.Context, t store.Token, shards int, user, requestID string) error
}

var _ spiller = (*store.Store)(nil)

// busyRetryAfter is what a winner turned away for want of room is told to
// wait: the shop frees slots within its latency, but a retry storm at
// once would only meet the same full budget.
const busyRetryAfter = time.Second

// Inflight is the instance's in-flight budgets (nil when the store cannot
// hold them): queue workers take their slots from the same budgets.
func (s *Server) Inflight() *inflight.Fleet { return s.inflight }

// budgetsFor returns the activities' in-flight budgets under cfg, nil when
// none is bounded.
func (s *Server) budgetsFor(cfg *config.Config) map[string]*inflight.Budget {
	if s.inflight == nil {
		return nil
	}
	s.inflight.Apply(cfg)
	if cfg.Upstream.MaxInflight <= 0 {
		return nil
	}
	m := make(map[string]*inflight.Budget, len(cfg.Activities))
	for i := range cfg.Activities {
		if b := s.inflight.Budget(cfg.Activities[i].ID); b != nil {
			m[cfg.Activities[i].ID] = b
		}
	}
	return m
}

// forwardBounded is forwardWinner under the activity's in-flight budget.
func (s *Server) forwardBounded(ctx *fasthttp.RequestCtx, st *state, b *inflight.Budget, r *admission.Request, d admission.Decision, ans *answer) {
	u := &st.cfg.Upstream
	wait := u.OverflowWait
	if u.Overflow == config.OverflowBusy {
		wait = 0
	}
	slot, res := b.Acquire(context.Background(), wait)
	if res == inflight.Got {
		if slot.Waited {
			s.m.Overflow.WithLabelValues(r.Activity.ID, "waited").Inc()
		}
		t0 := time.Now()
		s.forwardWinner(ctx, st, r, d, ans)
		b.Done(slot, time.Since(t0), sendOutcome(ans))
		return
	}
	s.overflow(ctx, st, r, d, ans, res)
}

// sendOutcome reads how a send ended from forwardWinner's answer.
func sendOutcome(ans *answer) inflight.Outcome {
	switch ans.code {
	case admission.UpstreamTimeout:
		if ans.upstream == 0 {
			// No answer came (a timeout, the connection cut after
			// sending): the shop may still be working on it, so its slot
			// stays taken one more upstream.timeout (red-team finding,
			// TestRA12InflightShopAboveLimitAfterTimeouts).
			return inflight.Unknown
		}
		return inflight.Overloaded
	case admission.UpstreamFailed:
		switch {
		case ans.upstream == 0:
			return inflight.NotSent // no connection: nothing reached the shop
		case ans.upstream >= 500 || ans.upstream == fasthttp.StatusTooManyRequests:
			return inflight.Overloaded
		}
	}
	return inflight.Answered
}

// overflow answers a winner the shop has no room for.
func (s *Server) overflow(ctx *fasthttp.RequestCtx, st *state, r *admission.Request, d admission.Decision, ans *answer, res inflight.Result) {
	a := r.Activity
	sp, _ := s.book.(spiller)
	outcome, retry := "busy", busyRetryAfter
	if res == inflight.Down {
		outcome = "down"
	}
	// A bundle is never queued: queue workers send one SKU's buy, so a
	// queued bundle was never sent nor released (red-team finding). Past
	// the budget it is BUSY, its units released, as with overflow: busy.
	// The worker sends the buyer's own request (keptRequest); one larger
	// than the queue keeps is BUSY too.
	kept, fits := []byte(nil), false
	if st.cfg.SpillsToQueue(a) && sp != nil && r.Items == nil {
		if kept, fits = s.spillRequest(ctx, st, a); !fits {
			outcome = "too_large"
		}
	}
	if fits {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code, backlog, err := sp.Spill(c, d.Token, d.Shards, time.Now().UnixMilli(), a.Queue.MaxBacklog, store.ExpireAt(a), kept)
		cancel()
		switch {
		case err == nil && (code == lua.OK || code == lua.Same):
			s.m.Overflow.WithLabelValues(a.ID, "queued").Inc()
			ans.code = admission.Queued
			s.answer(ctx, st, a, ans)
			return
		case err == nil && code == lua.Backlog:
			// The queue is full too: the shop is behind by max_backlog.
			outcome = "backlog"
			if a.Queue.Rate > 0 {
				retry = max(retry, time.Duration(float64(backlog)/a.Queue.Rate*float64(time.Second)))
			}
		case err != nil:
			s.spillUnknown(ctx, st, r, d, ans, err)
			return
		default:
			// Released or confirmed meanwhile (an operator's release):
			// nothing of it is left to hold.
			s.log.Warn("winner settled before it could be queued", zap.String("token", d.Token.String()), zap.Stringer("code", code))
		}
	}
	s.m.Overflow.WithLabelValues(a.ID, outcome).Inc()
	s.settle("release", func(c context.Context) (lua.Code, error) {
		return s.book.Release(c, d.Token, d.Shards, "shop_busy", time.Now().UnixMilli(), true)
	}, d.Token.String())
	s.forgetRequest(sp, r, d)
	ans.token, ans.orderID = "", ""
	ans.code, ans.retryAfter = admission.Busy, retry
	if res == inflight.Down {
		ans.code = admission.StoreUnavailable
	}
	s.answer(ctx, st, a, ans)
}

// spillUnknown handles a spill whose reply never came: it may still land.
// A pending-only release decides: released (503 BUSY), or refused because
// the reservation is queued after all (202 QUEUED). When Redis answers
// neither, the outcome is unknown: 504 with the token, which the buyer
// polls (the release is retried in the background and a queued
// reservation is sent by the workers, so it ends one way or the other).
func (s *Server) spillUnknown(ctx *fasthttp.RequestCtx, st *state, r *admission.Request, d admission.Decision, ans *answer, cause error) {
	a := r.Activity
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	code, err := s.releaseUnsent(c, d)
	cancel()
	switch {
	case err == nil && code == lua.NotSent:
		s.m.Overflow.WithLabelValues(a.ID, "queued").Inc()
		ans.code = admission.Queued
	case err == nil:
		s.m.Overflow.WithLabelValues(a.ID, "busy").Inc()
		s.m.Settlements.WithLabelValues("release", code.String()).Inc()
		sp, _ := s.book.(spiller)
		s.forgetRequest(sp, r, d)
		ans.token, ans.orderID = "", ""
		ans.code, ans.retryAfter = admission.Busy, busyRetryAfter
	default:
		s.m.Overflow.WithLabelValues(a.ID, "unknown").Inc()
		s.log.Warn("queueing a winner did not reach Redis; its outcome is settled in the background",
			zap.String("token", d.Token.String()), zap.NamedError("spill", cause), zap.Error(err))
		s.settle("release", func(c context.Context) (lua.Code, error) {
			code, err := s.releaseUnsent(c, d)
			if code == lua.NotSent {
				code = lua.Same // queued after all: the workers send it
			}
			return code, err
		}, d.Token.String())
		ans.code = admission.UpstreamTimeout
	}
	s.answer(ctx, st, a, ans)
}

// sentReleaser is the store's release conditional on the send stamp
// (store.ReleaseSent).
type sentReleaser interface {
	ReleaseSent(ctx context.Context, t store.Token, shards int, reason string, nowMs, sentMs int64) (lua.Code, error)
}

// releaseUnsent releases a spilled winner whose spill's reply never came,
// only while it is the reservation as reserved: still pending with the
// reserve's stamp. Queued (the spill landed: NOT_SENT) or claimed and sent
// by a worker since (a new stamp: RESTAMPED, a red-team find — a release
// retried in the background landed on a reservation in flight at the
// shop), it is the workers' to settle; both answer NOT_SENT here.
func (s *Server) releaseUnsent(c context.Context, d admission.Decision) (lua.Code, error) {
	now := time.Now().UnixMilli()
	sr, ok := s.book.(sentReleaser)
	if !ok || d.Stamp.IsZero() {
		return s.book.Release(c, d.Token, d.Shards, "shop_busy", now, true)
	}
	code, err := sr.ReleaseSent(c, d.Token, d.Shards, "shop_busy", now, d.Stamp.UnixMilli())
	if code == lua.Restamped {
		code = lua.NotSent
	}
	return code, err
}

// forgetRequest drops the request id's record of a winner released before
// it was sent, so the buyer's retry is decided afresh (best effort: left
// in place, a retry is answered UPSTREAM_FAILED by the released record).
func (s *Server) forgetRequest(sp spiller, r *admission.Request, d admission.Decision) {
	if sp == nil || r.RequestID == "" {
		return
	}
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := sp.ForgetRequestID(c, d.Token, d.Shards, r.User, r.RequestID); err != nil {
		s.log.Warn("could not forget the request id of a winner turned away", zap.String("token", d.Token.String()), zap.Error(err))
	}
}
