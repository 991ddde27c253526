package proxy

import (
	"bytes"
	"context"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// public serves the proxy's own endpoints under the public prefix:
// time, activities/{id}, reservations/{token}.
func (s *Server) public(ctx *fasthttp.RequestCtx, st *state, rest []byte) {
	if !ctx.IsGet() && !ctx.IsHead() {
		jsonError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if pl, ok := s.decide.(PublicLimiter); ok {
		if ok, wait := pl.AllowPublic(clientIP(ctx, st.trusted), time.Now().UnixNano()); !ok {
			s.answer(ctx, st, nil, &answer{code: admission.RateLimited, retryAfter: wait})
			return
		}
	}
	switch {
	case string(rest) == "time":
		b := append([]byte(`{"server_time_ms":`), strconv.FormatInt(time.Now().UnixMilli(), 10)...)
		writeJSON(ctx, 200, append(b, '}'))
	case bytes.HasPrefix(rest, []byte("activities/")):
		s.activity(ctx, st, string(rest[len("activities/"):]))
	case bytes.HasPrefix(rest, []byte("reservations/")):
		s.reservation(ctx, st, string(rest[len("reservations/"):]))
	default:
		jsonError(ctx, fasthttp.StatusNotFound, "not found")
	}
}

// PublicLimiter is what the proxy needs to hold its public endpoints under
// the per-IP limit; *admission.Pipeline implements it.
type PublicLimiter interface {
	AllowPublic(ip netip.Addr, nowNs int64) (bool, time.Duration)
}

var _ PublicLimiter = (*admission.Pipeline)(nil)

// IPLimiter is what the proxy needs to gate first sights of bearer tokens
// on the buyer's per-IP limit, n tokens for n signature checks;
// *admission.Pipeline implements it.
type IPLimiter interface {
	AllowIP(ip netip.Addr, nowNs int64, shadow bool, n int) (bool, time.Duration)
}

var _ IPLimiter = (*admission.Pipeline)(nil)

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(body)
}

// jsonError refuses a request to a public endpoint with SPEC §4's body
// ({"code","message"}, application/json): a 404 (no such endpoint,
// activity or reservation) is UNKNOWN_ITEM, a 405 (the endpoints are
// read-only) is BAD_REQUEST with Allow, as on a buy route's path.
func jsonError(ctx *fasthttp.RequestCtx, status int, msg string) {
	code := admission.UnknownItem
	if status == fasthttp.StatusMethodNotAllowed {
		code = admission.BadRequest
	}
	writeAnswer(ctx, &answer{code: code, message: msg})
	ctx.SetStatusCode(status)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if status == fasthttp.StatusMethodNotAllowed {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
	}
}

// displayCache keeps each activity's public state, so a page refreshed by
// a million buyers costs Redis at most one status read in flight per
// instance, and one per displayTTL while it is asked for:
//
//   - fresher than displayTTL, the body is served as is;
//   - older, the first request to see it starts one read (in its own
//     goroutine, displayReadTimeout at most); while it runs, every request
//     is served the old body if it is younger than displayMaxStale (the
//     SPEC: remaining "may lag by < 1 s"), else waits for that same read;
//   - a read that failed is kept for displayErrTTL: requests meanwhile are
//     answered 503 STORE_UNAVAILABLE at once (or the old body, if young
//     enough), and after it one request waits on a new read while the
//     others are answered at once, so a Redis outage costs no buyer the
//     read timeout but that one.
type displayCache struct {
	mu sync.Mutex
	m  map[string]*displayEntry
}

type displayEntry struct {
	read    time.Time     // when the read behind body began: its figures are no older
	body    []byte        // nil until a read succeeded
	failed  time.Time     // when the last read failed; zero if it succeeded
	running chan struct{} // closed when the read in flight ends; nil if none
}

const (
	displayTTL         = 500 * time.Millisecond
	displayMaxStale    = 900 * time.Millisecond
	displayErrTTL      = 500 * time.Millisecond
	displayReadTimeout = 2 * time.Second
)

func (s *Server) activity(ctx *fasthttp.RequestCtx, st *state, id string) {
	a := st.cfg.Activity(id)
	if a == nil {
		jsonError(ctx, fasthttp.StatusNotFound, "no such activity")
		return
	}
	now := time.Now()
	d := &s.display
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]*displayEntry{}
	}
	e := d.m[id]
	if e == nil {
		e = &displayEntry{}
		d.m[id] = e
	}
	age := now.Sub(e.read)
	if e.body != nil && age < displayTTL {
		body := e.body
		d.mu.Unlock()
		writeJSON(ctx, 200, body)
		return
	}
	failing := !e.failed.IsZero()
	started := false
	if e.running == nil && (!failing || now.Sub(e.failed) >= displayErrTTL) {
		e.running = make(chan struct{})
		started = true
		go s.refreshDisplay(e, a, e.running)
	}
	running, body := e.running, e.body
	d.mu.Unlock()
	switch {
	case body != nil && age < displayMaxStale:
		writeJSON(ctx, 200, body) // the read in flight refreshes it
		return
	case failing && !started:
		s.storeUnavailable(ctx, st, a)
		return
	}
	<-running // bounded by displayReadTimeout
	d.mu.Lock()
	body, failed := e.body, !e.failed.IsZero()
	d.mu.Unlock()
	if failed || body == nil {
		s.storeUnavailable(ctx, st, a)
		return
	}
	writeJSON(ctx, 200, body)
}

// storeUnavailable answers a public read that Redis could not serve: the
// SPEC's 503 STORE_UNAVAILABLE (not counted as a buy's answer).
func (s *Server) storeUnavailable(ctx *fasthttp.RequestCtx, st *state, a *config.Activity) {
	s.answer(ctx, st, nil, &answer{code: admission.StoreUnavailable, activity: a.ID, retryAfter: time.Second})
}

// refreshDisplay reads a's state into e and closes done. It is the only
// read of e in flight (activity starts it under the cache's lock).
func (s *Server) refreshDisplay(e *displayEntry, a *config.Activity, done chan struct{}) {
	start := time.Now()
	body, err := s.renderActivity(a, start)
	s.display.mu.Lock()
	if err == nil {
		e.read, e.body, e.failed = start, body, time.Time{}
	} else {
		e.failed = time.Now() // the old body stays, served while young enough
	}
	e.running = nil
	s.display.mu.Unlock()
	close(done)
}

func (s *Server) renderActivity(a *config.Activity, now time.Time) ([]byte, error) {
	cctx, cancel := context.WithTimeout(context.Background(), displayReadTimeout)
	defer cancel()
	stt, err := s.book.Status(cctx, a)
	if err != nil {
		return nil, err
	}
	soldOut, ready := len(stt.SKUs) > 0, len(stt.SKUs) > 0
	for _, k := range stt.SKUs {
		if !k.Preheated || k.Remaining > 0 {
			soldOut = false
		}
		ready = ready && k.Preheated
	}
	state := "open"
	switch {
	case now.Before(a.Start):
		state = "upcoming"
	case !now.Before(a.End):
		state = "ended"
	case stt.Paused:
		state = "paused"
	case soldOut:
		state = "sold_out"
	}
	b := []byte(`{"id":`)
	b = appendJSONString(b, a.ID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, state)
	// ready is false until stock is preheated: buys answer NOT_READY meanwhile.
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, ready)
	b = append(b, `,"start_ms":`...)
	b = strconv.AppendInt(b, a.StartMs(), 10)
	b = append(b, `,"end_ms":`...)
	b = strconv.AppendInt(b, a.EndMs(), 10)
	b = append(b, `,"server_time_ms":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	b = append(b, `,"skus":[`...)
	for i, k := range stt.SKUs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, k.ID)
		b = append(b, `,"initial":`...)
		b = strconv.AppendInt(b, k.Initial, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, k.Remaining, 10)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

func (s *Server) reservation(ctx *fasthttp.RequestCtx, st *state, raw string) {
	// Everything a client can make up is refused here, before any store
	// call and before anything is built or cached for it.
	tok, err := store.ParseToken(raw)
	if err != nil {
		jsonError(ctx, fasthttp.StatusNotFound, "no such reservation")
		return
	}
	a := st.cfg.Activity(tok.Activity)
	if a == nil || (a.SKU(tok.SKU) == nil && tok.SKU != store.BundleSKU) {
		jsonError(ctx, fasthttp.StatusNotFound, "no such reservation")
		return
	}
	// A winner asking right after their answer reads the confirm this
	// instance is still running, not the moment before it.
	s.confirms.await(raw)
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f, err := s.book.Flags(cctx, tok.Activity)
	if err != nil {
		s.storeUnavailable(ctx, st, a)
		return
	}
	r, ok, err := s.book.Lookup(cctx, tok, f.Shards)
	if err != nil {
		s.storeUnavailable(ctx, st, a)
		return
	}
	if !ok {
		jsonError(ctx, fasthttp.StatusNotFound, "no such reservation")
		return
	}
	b := []byte(`{"token":`)
	b = appendJSONString(b, raw)
	// SPEC's states are pending|confirmed|released: a queued reservation
	// (queue mode, not sent to the shop yet) is pending, with "queued":true.
	b = append(b, `,"state":`...)
	if r.State == store.StateQueued {
		b = appendJSONString(b, store.StatePending)
		b = append(b, `,"queued":true`...)
	} else {
		b = appendJSONString(b, r.State)
	}
	b = append(b, `,"activity":`...)
	b = appendJSONString(b, tok.Activity)
	b = append(b, `,"sku":`...)
	b = appendJSONString(b, tok.SKU)
	b = append(b, `,"qty":`...)
	b = strconv.AppendInt(b, r.Qty, 10)
	if tok.SKU == store.BundleSKU {
		b = appendBundleItems(cctx, s.book, b, tok, f.Shards)
	}
	b = append(b, `,"created_ms":`...)
	b = strconv.AppendInt(b, r.CreatedMs, 10)
	if r.OrderID != "" {
		b = append(b, `,"order_id":`...)
		b = appendJSONString(b, r.OrderID)
	}
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, r.Reason)
	}
	if r.State == store.StateQueued {
		// Where the buyer stands: one O(1) call more, only while queued.
		type queue interface {
			QueuePosition(ctx context.Context, t store.Token, shards int, entryID string) (int64, bool, error)
		}
		if q, isQ := s.book.(queue); isQ {
			if pos, ok, err := q.QueuePosition(cctx, tok, f.Shards, r.QueueEntry); err == nil && ok {
				b = append(b, `,"position":`...)
				b = strconv.AppendInt(b, pos, 10)
				if a := st.cfg.Activity(tok.Activity); a != nil && a.Queue.Rate > 0 {
					b = append(b, `,"eta_ms":`...)
					b = strconv.AppendInt(b, int64(float64(pos)*1000/a.Queue.Rate), 10)
				}
			}
		}
	}
	writeJSON(ctx, 200, append(b, '}'))
}
