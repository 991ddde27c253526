// Package proxy is the fasthttp front of seckill-proxy: it matches buy
// routes, extracts the buyer's identity, SKU and quantity, asks admission,
// forwards winners to the shop with a signed token, settles the
// reservation by the shop's answer, serves the proxy's own public
// endpoints, and passes every other request straight through.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/identity"
	"github.com/seckill-proxy/seckill-proxy/inflight"
	"github.com/seckill-proxy/seckill-proxy/internal/settlelog"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Deciders is what the proxy needs of admission.
type Deciders interface {
	Decide(ctx context.Context, r *admission.Request) admission.Decision
}

// Book is what the proxy needs to settle and show reservations;
// *store.Store implements it.
type Book interface {
	Confirm(ctx context.Context, t store.Token, shards int, orderID string) (lua.Code, error)
	ConfirmReplay(ctx context.Context, t store.Token, shards int, orderID, user, requestID string, rp *store.Replay) (lua.Code, error)
	Release(ctx context.Context, t store.Token, shards int, reason string, nowMs int64, pendingOnly bool) (lua.Code, error)
	Lookup(ctx context.Context, t store.Token, shards int) (store.Reservation, bool, error)
	Flags(ctx context.Context, act string) (store.Flags, error)
	Status(ctx context.Context, a *config.Activity) (store.ActivityStatus, error)
}

var _ Book = (*store.Store)(nil)

// Server is the public listener.
type Server struct {
	cur    atomic.Pointer[state]
	decide Deciders
	book   Book
	m      *metrics.Metrics
	log    *zap.Logger
	// confirmLog logs confirms that found their reservation released or its
	// record gone (settlelog), at most one line a second each.
	confirmLog *settlelog.Confirms
	srv        *fasthttp.Server
	ref        *handlerRef // srv's handler: Shutdown lets go of the Server
	// maxConns and maxConnsPerIP are server.max_conns and
	// max_conns_per_ip as started with, enforced by limitConns (connlimit.go).
	maxConns, maxConnsPerIP int
	warm                    warmer
	display                 displayCache
	obs                     observers
	refused                 routeRefusals
	// confirms are winners' confirms settled after their answers (issue 10);
	// batcher is the Book's batch confirm, nil when it has none.
	confirms confirms
	batcher  confirmer
	// inflight is the shop's in-flight budgets (upstream.max_inflight).
	inflight *inflight.Fleet
	draining atomic.Bool // Drain: a graceful stop has begun (drain.go)
	// shadow records shadow-mode decisions (shadow.go).
	shadow shadowLog
	// sends is the pending_timeout that winners sent under a replaced
	// upstream config may still need, until when (reload.go).
	sends sendFloor
}

// state is everything derived from one config, swapped whole on reload.
type state struct {
	cfg      *config.Config
	routes   routeTable
	prefix   []byte
	trusted  []netip.Prefix
	user     extractor
	session  *sessionIdentity // identity.user.session, or nil
	jwt      *jwtUser         // identity.user.jwt; nil for header/cookie/query
	device   extractor
	reqID    extractor
	skuFrom  map[*config.Activity]extractor
	qtyFrom  map[*config.Activity]extractor
	upstream *upstream
	messages [32]string
	outcome  map[string]*outcomeCounters
	// budgets are the activities' in-flight budgets; nil without
	// upstream.max_inflight (winners then go straight to the shop).
	budgets map[string]*inflight.Budget
	// fieldCookies are the activities' buy fields a cookie may stand in
	// for (cookiefields.go); none for route.field_cookies: allow.
	fieldCookies map[*config.Activity]*cookieFields
}

type outcomeCounters struct {
	byCode  []prometheus.Counter
	latency prometheus.Observer
}

// New builds a Server for cfg.
func New(cfg *config.Config, d Deciders, b Book, m *metrics.Metrics, log *zap.Logger) (*Server, error) {
	s := &Server{decide: d, book: b, m: m, log: log, obs: newObservers(m), refused: newRouteRefusals(m), confirms: newConfirms(), shadow: newShadowLog(),
		confirmLog: settlelog.New(log)}
	s.batcher, _ = b.(confirmer)
	if is, ok := b.(inflight.Store); ok {
		s.inflight = inflight.NewFleet(is, m.Inflight, m.InflightLimit, log.Named("inflight"), "")
	}
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	sv := cfg.Server
	s.ref = &handlerRef{}
	s.ref.s.Store(s)
	s.srv = &fasthttp.Server{
		Handler:        s.ref.serve,
		Name:           "seckill-proxy",
		ReadBufferSize: 16 << 10, // headers beyond this get 431
		// Bodies stream to the shop as they arrive (pass): an upload is
		// never held whole in memory. MaxRequestBodySize is then only how
		// much is read ahead; a buy reads its own, bounded (bufferBuyBody).
		StreamRequestBody:  true,
		MaxRequestBodySize: maxBuyBody,
		// A proxy forwards multipart bodies as they are; parsing them
		// would spool uploads to temporary files first.
		DisablePreParseMultipartForm: true,
		// max_conns is enforced on accept (limitConns), with a SPEC
		// answer; fasthttp's limit is a backstop just above it.
		Concurrency: sv.MaxConns + connSlack,
		// Workers a wave made (or a warm-up: warm.go) wait this long for
		// the next wave, rather than fasthttp's 10 s.
		MaxIdleWorkerDuration: workerIdle,
		ReadTimeout:           sv.ReadTimeout,
		WriteTimeout:          sv.WriteTimeout,
		IdleTimeout:           sv.IdleTimeout,
		NoDefaultServerHeader: true,
		NoDefaultDate:         false,
		ReduceMemoryUsage:     false,
		Logger:                fasthttpLog{log.Named("fasthttp")},
		ErrorHandler:          malformedRequest,
		// fasthttp's parse errors quote the request line and a snippet of
		// the header (cookies, Authorization) into the log: never.
		SecureErrorLogMessage: true,
	}
	s.maxConns, s.maxConnsPerIP = sv.MaxConns, sv.MaxConnsPerIP
	return s, nil
}

// Apply swaps in a new config (reload). The old one keeps serving requests
// already in flight. A config that would open a running sale's buy path to
// the shop is refused (keepsRunningSales).
func (s *Server) Apply(cfg *config.Config) error {
	if prev := s.cur.Load(); prev != nil {
		if err := s.keepsRunningSales(prev.cfg, cfg); err != nil {
			return err
		}
		if err := s.keepsSendsSettleable(prev.cfg, cfg, time.Now()); err != nil {
			return err
		}
	}
	up, err := newUpstream(cfg.Upstream, signingKeys(cfg))
	if err != nil {
		return err
	}
	prev := s.cur.Load()
	canon := identity.Canon{CaseFold: cfg.Identity.User.CaseFold, Numeric: cfg.Identity.User.Numeric}
	jv, err := s.jwtFor(prev, cfg.Identity.User.JWT, canon)
	if err != nil {
		return err
	}
	st := &state{
		jwt:      jv,
		cfg:      cfg,
		routes:   compileRoutes(cfg.Activities),
		prefix:   []byte(strings.TrimSuffix(cfg.PublicPrefix, "/") + "/"),
		trusted:  cfg.TrustedPrefixes(),
		user:     newSourceExtractor(cfg.Identity.User),
		device:   newSourceExtractor(cfg.Identity.Device),
		reqID:    newSourceExtractor(cfg.Identity.RequestID),
		skuFrom:  map[*config.Activity]extractor{},
		qtyFrom:  map[*config.Activity]extractor{},
		upstream: up,
		outcome:  map[string]*outcomeCounters{},
	}
	var oldSession *sessionIdentity
	if prev != nil {
		oldSession = prev.session
	}
	if st.session, err = s.sessionFor(cfg.Identity.User.Session, canon, oldSession); err != nil {
		return err
	}
	st.fieldCookies = map[*config.Activity]*cookieFields{}
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		st.skuFrom[a] = newFromExtractor(a.Route.SkuFrom)
		if a.Route.QtyFrom != "" {
			st.qtyFrom[a] = newFromExtractor(a.Route.QtyFrom)
		}
		if a.Route.FieldCookies != config.FieldCookiesAllow {
			st.fieldCookies[a] = st.cookieFieldsOf(a)
		}
		oc := &outcomeCounters{latency: s.m.BuyLatency.WithLabelValues(a.ID)}
		for _, c := range admission.AllCodes() {
			oc.byCode = append(oc.byCode, s.m.Outcomes.WithLabelValues(a.ID, c.String()))
		}
		st.outcome[a.ID] = oc
	}
	for _, c := range admission.AllCodes() {
		st.messages[c] = cfg.Message(c.String(), c.DefaultMessage())
	}
	st.budgets = s.budgetsFor(cfg)
	if old := s.cur.Swap(st); old != nil {
		s.sends.replaced(old.cfg.Upstream, cfg.Upstream, time.Now())
		old.upstream.closeIdleLater()
		if old.session != nil && old.session != st.session {
			old.session.closeLater()
		}
		if old.jwt != nil && old.jwt != jv {
			closeJWTLater(old.jwt)
		}
	}
	return nil
}

// jwtFor returns the JWT identity stage for cfg: the running one when its
// config is unchanged (a reload, e.g. SIGHUP, then re-reads the key file or
// re-fetches the key set), else a new verifier.
func (s *Server) jwtFor(prev *state, c config.JWT, canon identity.Canon) (*jwtUser, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if prev != nil && prev.jwt != nil && prev.jwt.canon == canon && reflect.DeepEqual(prev.jwt.cfg, c) {
		prev.jwt.v.Reload()
		return prev.jwt, nil
	}
	v, err := identity.NewJWT(c, identity.Options{Log: s.log.Named("jwt"), Check: userCheck(canon)})
	if err != nil {
		return nil, err
	}
	j := newJWTUser(v, c, s.m)
	j.canon = canon
	return j, nil
}

// Serve accepts connections on ln until Shutdown.
// Connections past server.max_conns / max_conns_per_ip are answered 503
// BUSY / 429 RATE_LIMITED and closed (connlimit.go).
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(s.limitConns(ln)) }

// Shutdown stops accepting and waits for requests in flight, then for the
// confirms of winners already answered.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	if err == nil {
		// Every connection is closed: nothing calls the handler again.
		s.ref.s.Store(nil)
	}
	if werr := s.confirms.wait(ctx); err == nil {
		err = werr
	}
	if werr := s.WaitShadow(ctx); err == nil {
		err = werr
	}
	if s.inflight != nil {
		s.inflight.Close() // slots not in use go back to the fleet now, not at lease expiry
	}
	if st := s.cur.Load(); st != nil {
		if st.session != nil {
			st.session.resolver.Close()
		}
		if st.jwt != nil {
			st.jwt.v.Close()
		}
	}
	return err
}

// handlerRef is the listener's handler. fasthttp's worker pool keeps its
// cleaner goroutine, and so the fasthttp.Server and its handler, for up to
// MaxIdleWorkerDuration (workerIdle, a minute) after Serve returns; through
// this the Server (its caches, limiters, store) is let go at Shutdown, not
// a minute later (a test process starting proxy after proxy held ~4 GiB of
// stopped ones; a memory test measured another test's going away).
type handlerRef struct{ s atomic.Pointer[Server] }

func (h *handlerRef) serve(ctx *fasthttp.RequestCtx) {
	if s := h.s.Load(); s != nil {
		s.handle(ctx)
		return
	}
	// After a complete Shutdown no connection is left to ask; should one,
	// it is told what a draining instance says.
	ctx.SetConnectionClose()
	writeAnswer(ctx, &answer{code: admission.Busy, retryAfter: DrainRetryAfter})
}

// Handler exposes the request handler (for in-process tests and benchmarks).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	st := s.cur.Load()
	if s.warm.take(ctx) { // a warm-up round's own request (warm.go)
		return
	}
	facts := stripSeckillHeaders(&ctx.Request.Header)
	// Answered, then the connection closes (hop.go): set on the answer
	// as the handler ends, after anything that resets it.
	grew := headerGrew(&ctx.Request.Header)
	path := ctx.Path()
	if bytes.HasPrefix(path, st.prefix) {
		s.public(ctx, st, path[len(st.prefix):])
		if grew {
			ctx.SetConnectionClose()
		}
		return
	}
	if hasTrailers(&ctx.Request.Header) {
		// Trailer fields land where stripSeckillHeaders does not look, and
		// an announced name would carry the proxy's own headers (X-Seckill-*,
		// X-Forwarded-For) into the trailer section: refused on every route.
		s.refused.trailer.Inc()
		writeAnswer(ctx, &answer{code: admission.BadRequest, message: "request trailer fields are not accepted"})
		return
	}
	// The buyer's connection ends here: its hop-by-hop fields go before any
	// decision (hop.go). fasthttp took what it needs of them (keep-alive,
	// the HTTP version) before the handler; pass reads an HTTP/1.0 buyer's
	// mark (forward.go, http10Key), set only for them.
	if stripHopByHop(&ctx.Request.Header, facts.may(factHop)) {
		ctx.SetUserValue(http10Key{}, true)
	}
	// Routes are matched on the path as sent, canonicalised here: fasthttp's
	// Path() decodes %2F into a separator and keeps case, ";" and ".json".
	m, kind := st.routes.resolve(ctx.Method(), ctx.URI().PathOriginal())
	m.facts = facts
	if kind == routePass && st.routes.networkPathBuy(ctx.Method(), ctx.URI().PathOriginal()) {
		kind, m.flaw = routeUnsafe, flawNetworkPath
	}
	switch kind {
	case routeBuy:
		s.buy(ctx, st, m)
	case routeUnsafe:
		s.refused.unsafe[m.flaw].Inc()
		writeAnswer(ctx, &answer{code: admission.BadRequest, message: "path cannot be read safely: " + m.flaw.String()})
	case routePassMethod:
		if !hasMethodOverride(ctx, facts.may(factOverride)) {
			s.pass(ctx, st)
			break
		}
		// A pass_methods spelling of the buy path that asks the shop to
		// take it as another method (POST) would be a buy without admission.
		fallthrough
	case routeMethod:
		s.refused.method.Inc()
		allow := st.routes.allow(m.path)
		writeAnswer(ctx, &answer{code: admission.BadRequest, message: "method not allowed on this path; use " + allow})
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set("Allow", allow)
	default:
		s.pass(ctx, st)
	}
	if grew || kind == routeBuy && bodyGrew(&ctx.Request) {
		ctx.SetConnectionClose()
	}
	m.release()
	if s.draining.Load() {
		ctx.SetConnectionClose()
	}
}

// buy runs one buy request through admission and, for a winner, the shop.
func (s *Server) buy(ctx *fasthttp.RequestCtx, st *state, m match) {
	t0 := time.Now()
	a := m.act
	if a == nil {
		s.answer(ctx, st, nil, &answer{code: admission.UnknownItem})
		return
	}
	if a.Shadow() != nil {
		s.shadowBuy(ctx, st, m, a)
		return
	}
	if s.draining.Load() {
		s.refuseDraining(ctx, st, a)
		return
	}
	ans := answer{activity: a.ID}
	req, code, wait := s.parseWait(ctx, st, a, m)
	if code != admission.Admitted {
		ans.code = code
		switch code {
		case admission.RateLimited:
			ans.retryAfter = wait
		case admission.Unauthenticated:
			if st.jwt != nil {
				ans.challenge = st.jwt.challenge(ctx)
			}
		case admission.AuthUnavailable:
			ans.retryAfter = authRetryAfter
		}
		s.answer(ctx, st, a, &ans)
		st.outcome[a.ID].latency.Observe(time.Since(t0).Seconds())
		return
	}
	if req.Items == nil {
		ans.sku = req.SKU
	}
	if a.Mode == config.ModeQueue {
		// Queue mode keeps the request for its later send: one it cannot
		// keep is refused before anything is reserved, rather than queued
		// and sent without it (or never sent).
		if msg, bad := unkeepable(&ctx.Request, a); bad {
			ans.code, ans.message = admission.BadRequest, msg
			s.answer(ctx, st, a, &ans)
			return
		}
	}
	// The request goes to admission behind an interface, so it would escape
	// to the heap: take it from a pool instead (nothing keeps it past Decide
	// and forwardWinner, both done before this handler returns).
	rp := requestPool.Get().(*admission.Request)
	*rp = req
	defer func() { *rp = admission.Request{}; requestPool.Put(rp) }()
	if a.Mode == config.ModeQueue && req.Items == nil {
		rp.Keep = s.keeper(ctx, st.upstream, m)
	}
	if a.FairStart > 0 {
		// A buy held in the fair_start window is dropped if its buyer
		// has gone by its release (admission peeks at the socket).
		rp.Conn = ctx.Conn()
	}
	// Never the RequestCtx: it must not escape the handler, and as a parent
	// context it would cost a goroutine per Redis call (STYLE.md).
	d := s.decide.Decide(context.Background(), rp)
	ans.code, ans.retryAfter = d.Code, d.RetryAfter
	if d.Short != "" {
		ans.sku = d.Short // a bundle's SOLD_OUT names the SKU that was short
	}
	if d.Token.ID != "" && (rp.Verified || a.Signature.Enabled() || ownReservation(d.Code)) {
		// SPEC §9 / issue 9 §4: a reservation this very request did not
		// make is shown only to a verified buyer; anyone can send someone
		// else's X-User-Id. (A required app signature passed too.)
		ans.token = d.Token.String()
		ans.orderID = d.OrderID
	}
	switch d.Code {
	case admission.Admitted:
		m.rewrite(ctx) // the shop gets the canonical spelling
		if b := st.budgets[a.ID]; b != nil {
			s.forwardBounded(ctx, st, b, rp, d, &ans)
		} else {
			s.forwardWinner(ctx, st, rp, d, &ans)
		}
	case admission.AlreadyPurchased:
		s.replayOrAnswer(ctx, st, a, d, &ans)
	case admission.Pending:
		// Answered a moment ago, its confirm still running here: say
		// what the confirm makes true rather than "in flight".
		s.confirms.settledAs(d.Token.String(), &ans)
		s.answer(ctx, st, a, &ans)
	case admission.NotStarted, admission.Ended:
		ans.startMs, ans.endMs, ans.serverTime = a.StartMs(), a.EndMs(), true
		s.answer(ctx, st, a, &ans)
	default:
		s.answer(ctx, st, a, &ans)
	}
	st.outcome[a.ID].latency.Observe(time.Since(t0).Seconds())
}

// ownReservation reports whether a decision's token is the reservation the
// request itself just made (or, for a timeout, is still waiting on).
func ownReservation(c admission.Code) bool {
	switch c {
	case admission.Admitted, admission.Queued, admission.UpstreamTimeout:
		return true
	}
	return false
}

var requestPool = sync.Pool{New: func() any { return new(admission.Request) }}

// parse extracts and checks the request's shape; any failure is BAD_REQUEST
// (or UNKNOWN_ITEM for a SKU this activity does not sell) and reserves nothing.
func (s *Server) parse(ctx *fasthttp.RequestCtx, st *state, a *config.Activity, m match) (admission.Request, admission.Code) {
	req, code, _ := s.parseWait(ctx, st, a, m)
	return req, code
}

// parseWait is parse that also says, for RATE_LIMITED (a bearer token's
// first sight over the address's per_ip budget), how long to wait.
func (s *Server) parseWait(ctx *fasthttp.RequestCtx, st *state, a *config.Activity, m match) (admission.Request, admission.Code, time.Duration) {
	body := buyInput{facts: m.facts}
	if !bufferBuyBody(&ctx.Request) || m.facts.may(factEncoding) && encodedBody(&ctx.Request.Header) || foreignCharset(&ctx.Request.Header) {
		return admission.Request{}, admission.BadRequest, 0
	}
	// A buy the shop would take as another method, or whose path's
	// {activity} has a second copy the shop may read (captureCopy).
	if m.r != nil && (overridesMethod(ctx, m.r.method, m.facts.may(factOverride)) || m.r.hasActivity() && captureCopy(ctx, &body, "activity") != nil) {
		return admission.Request{}, admission.BadRequest, 0
	}
	// 1. Who is buying: a verified token's claim, a session's user (looked
	// up by admission after its local checks), or the id as sent.
	req := admission.Request{Activity: a, Qty: 1}
	if st.jwt != nil {
		// The claim was canonicalised and checked once, before the
		// verified token was cached (userCheck).
		il, _ := s.decide.(IPLimiter)
		u, code, wait, spent := st.jwt.identify(ctx, &body, il, clientIP(ctx, st.trusted), a.IsShadow() || a.IsShadowCopy())
		if code != admission.Admitted {
			return admission.Request{}, code, wait
		}
		req.User, req.Verified, req.IPSpent = u, true, spent
	} else if code := st.readBuyer(ctx, &body, &req); code != admission.Admitted {
		return admission.Request{}, code, 0
	}
	if m.r.bundle {
		if code := parseItems(ctx, &body, a, &req); code != admission.Admitted {
			return admission.Request{}, code, 0
		}
	} else {
		sx := st.skuFrom[a]
		sku, err := sx.get(ctx, m.sku, &body)
		if err != nil || !validID(sku) {
			return admission.Request{}, admission.BadRequest, 0
		}
		if k := a.SKU(string(sku)); k != nil {
			req.SKU = k.ID // the config's string: no per-request allocation kept
		} else {
			return admission.Request{}, admission.UnknownItem, 0
		}
		if qx, ok := st.qtyFrom[a]; ok {
			q, err := qx.get(ctx, m.sku, &body)
			if err != nil {
				return admission.Request{}, admission.BadRequest, 0
			}
			if q != nil {
				if req.Qty = parseQty(q); req.Qty == 0 {
					return admission.Request{}, admission.BadRequest, 0
				}
			}
		}
		if req.Qty > a.MaxQty {
			return admission.Request{}, admission.BadRequest, 0
		}
	}
	if dev, err := st.device.getID(ctx, &body); err != nil || len(dev) > 0 {
		if err != nil || !validID(dev) {
			return admission.Request{}, admission.BadRequest, 0
		}
		req.Device = string(dev)
	}
	if rid, err := st.reqID.getID(ctx, &body); req.Items == nil && (err != nil || len(rid) > 0) {
		if err != nil || !validID(rid) {
			return admission.Request{}, admission.BadRequest, 0
		}
		req.RequestID = string(rid)
	}
	if f := st.fieldCookies[a]; f != nil && f.copied(&ctx.Request.Header, m.r.bundle) {
		return admission.Request{}, admission.BadRequest, 0
	}
	req.IP = clientIP(ctx, st.trusted)
	if a.Signature.Enabled() {
		readSignature(ctx, &a.Signature, &req)
	}
	return req, admission.Admitted, 0
}

// readSignature copies the app signature headers into req; admission checks
// them (missing or malformed ones are its BAD_REQUEST). Path is the path as
// sent, without the query.
func readSignature(ctx *fasthttp.RequestCtx, sg *config.Signature, req *admission.Request) {
	h := &ctx.Request.Header
	req.Method = string(ctx.Method())
	req.Path = string(ctx.URI().PathOriginal())
	req.SigKeyID = string(h.Peek(sg.KeyIDHeader))
	req.SigTimestamp = string(h.Peek(sg.TimestampHeader))
	req.SigNonce = string(h.Peek(sg.NonceHeader))
	req.Signature = string(h.Peek(sg.SignatureHeader))
}

// answer writes a proxy-made answer and counts it.
func (s *Server) answer(ctx *fasthttp.RequestCtx, st *state, a *config.Activity, ans *answer) {
	if ans.message == "" { // a message of its own says what to change (a BAD_REQUEST's)
		ans.message = st.messages[ans.code]
	}
	if ans.code == admission.Unauthenticated && ans.challenge == "" && st.session != nil {
		ans.challenge = st.session.challenge
	}
	writeAnswer(ctx, ans)
	if a != nil {
		st.outcome[a.ID].byCode[ans.code].Inc()
	}
}

// malformedRequest answers requests fasthttp could not parse (bad header
// bytes, headers over the read buffer) with the SPEC's JSON BAD_REQUEST,
// so even a broken client gets a body it can read. Nothing was reserved.
func malformedRequest(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		// The rest of the oversized header is still arriving: read it away
		// before answering, or closing with unread bytes sends a reset and
		// the client may never see the answer (a lingering close).
		if c := ctx.Conn(); c != nil {
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.CopyN(io.Discard, c, 1<<20)
		}
		writeAnswer(ctx, &answer{code: admission.BadRequest, message: "request headers too large"})
		ctx.SetStatusCode(fasthttp.StatusRequestHeaderFieldsTooLarge)
		return
	}
	writeAnswer(ctx, &answer{code: admission.BadRequest, message: "malformed request"})
}

// fasthttpLog passes fasthttp's log lines to zap with the format string as
// the message: constant per kind of line, so serve's sampler keeps a client's
// flood of malformed requests to a trickle (each line names the client's
// address, which as a message would make every line new and pass them all).
// The formatted text is a field, bounded, built only for a sampled line.
type fasthttpLog struct{ l *zap.Logger }

// fasthttpLogDetail bounds a line's formatted text.
const fasthttpLogDetail = 512

func (f fasthttpLog) Printf(format string, args ...any) {
	ce := f.l.Check(zap.InfoLevel, format)
	if ce == nil {
		return
	}
	d := fmt.Sprintf(format, args...)
	if len(d) > fasthttpLogDetail {
		d = d[:fasthttpLogDetail] + "…"
	}
	ce.Write(zap.String("detail", d))
}
