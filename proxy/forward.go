package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/signing"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// upstream is the shop: one client for winners (never retried: a buy is
// not idempotent from the proxy's side) and one for ordinary traffic.
type upstream struct {
	buy   *fasthttp.HostClient
	pass  *fasthttp.HostClient
	https bool
	// hostHeader is the shop's authority, the Host of a request that came
	// without one (HTTP/1.0 allows that; fasthttp would not send it).
	hostHeader string
	basePath   string
	timeout    time.Duration
	// passTimeout bounds an ordinary request's whole exchange, its bodies
	// streaming at the client's pace.
	passTimeout time.Duration
	// keys sign X-Seckill-Signature: the first signs (issue 9 §6), with
	// pooled HMAC states.
	keys *signing.Signer
	// replayMax bounds a winner's answer kept for exact replays.
	replayMax int
	// releases says whether a non-2xx answer to a buy releases it.
	releases func(status int) bool
	// warm holds connections to the shop dialled ahead of a sale's first
	// winners (upstream.warm_conns); the buy client's Dial takes them.
	warm *shopConns
}

// shopHeaderMax bounds a shop answer's header block; buyAnswerMax a
// winner's answer body (README, upstream.max_conns).
const (
	shopHeaderMax = 64 << 10
	buyAnswerMax  = 4 << 20
)

// dialError marks a failure to connect: nothing reached the shop, so the
// outcome is a definite no.
type dialError struct{ err error }

func (e dialError) Error() string { return "dial shop: " + e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// signingKeys reads the configured signing keys' secrets, current first.
func signingKeys(cfg *config.Config) signing.Keyring {
	var kr signing.Keyring
	for _, k := range cfg.SigningKeys() {
		kr = append(kr, signing.Key{ID: k.ID, Secret: []byte(k.Secret())})
	}
	return kr
}

func newUpstream(u config.Upstream, keys signing.Keyring) (*upstream, error) {
	pu, err := url.Parse(u.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream.url: %w", err)
	}
	host := pu.Host
	https := pu.Scheme == "https"
	if pu.Port() == "" {
		if https {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	dialTimeout := min(u.Timeout, 2*time.Second)
	dial := func(addr string) (net.Conn, error) {
		c, err := fasthttp.DialTimeout(addr, dialTimeout)
		if err != nil {
			return nil, dialError{err}
		}
		return c, nil
	}
	warm := shopConnsFor(func() (net.Conn, error) { return dial(host) }, u.IdleTimeout)
	buyDial := func(addr string) (net.Conn, error) {
		if c := warm.take(); c != nil {
			return c, nil
		}
		return dial(addr)
	}
	mk := func(timeout time.Duration, dial fasthttp.DialFunc) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			// A shop's header block may exceed fasthttp's 4 KiB default
			// (a long CSP, several cookies): past the buffer the answer
			// was a 502, and a winner's 2xx an unknown outcome, pending.
			// Readers are pooled per request in flight, not per connection.
			ReadBufferSize:                shopHeaderMax,
			Addr:                          host,
			IsTLS:                         https,
			Dial:                          dial,
			MaxConns:                      u.MaxConns,
			MaxConnWaitTimeout:            u.Timeout,
			ReadTimeout:                   timeout,
			WriteTimeout:                  timeout,
			MaxIdleConnDuration:           u.IdleTimeout, // below the shop's keep-alive (config default 4 s)
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
		}
	}
	up := &upstream{buy: mk(u.Timeout, buyDial), pass: mk(u.PassTimeout, dial), warm: warm, https: https, hostHeader: pu.Host, timeout: u.Timeout, passTimeout: u.PassTimeout,
		basePath: strings.TrimSuffix(pu.Path, "/"), keys: signing.NewSigner(keys),
		replayMax: u.ReplayMaxBytes, releases: u.Releases}
	up.buy.RetryIfErr = func(*fasthttp.Request, int, error) (bool, bool) { return false, false }
	up.buy.Transport = buyTransport{timeout: u.Timeout}
	// A winner's answer is read whole (its order id, its replay): bounded,
	// so a shop streaming without end cannot grow the heap for the whole
	// timeout. Past it the outcome is unknown (the request was sent).
	up.buy.MaxResponseBodySize = buyAnswerMax
	// Ordinary answers stream back to the client as they arrive, so a large
	// download never sits whole in memory. A buy's answer is read whole: it
	// is small, and its order id and replay come from it.
	up.pass.StreamResponseBody = true
	return up, nil
}

func (u *upstream) closeIdleLater() {
	u.warm.close()
	time.AfterFunc(30*time.Second, func() {
		u.buy.CloseIdleConnections()
		u.pass.CloseIdleConnections()
	})
}

// prepare points the request at the shop and appends X-Forwarded-For.
// The scheme is always the shop's (a client's absolute-form https:// target
// would otherwise make fasthttp refuse to send it), and a request without a
// Host gets the shop's.
func (u *upstream) prepare(ctx *fasthttp.RequestCtx) {
	req := &ctx.Request
	if u.https {
		req.URI().SetScheme("https")
	} else {
		req.URI().SetScheme("http")
	}
	if len(req.Header.Host()) == 0 {
		// Both: fasthttp writes the parsed URI's host over the header's,
		// and a request that came without Host (HTTP/1.0) parsed none. It
		// goes out as HTTP/1.1 (hop.go), which must carry one.
		req.Header.SetHost(u.hostHeader)
		req.URI().SetHost(u.hostHeader)
	}
	if u.basePath != "" {
		req.URI().SetPathBytes(append([]byte(u.basePath), req.URI().PathOriginal()...))
	}
	setForwardedFor(req, ctx.RemoteIP())
}

// setForwardedFor sets X-Forwarded-For to one canonical line: every line the
// client and its balancers sent, in order, then the peer (a shop that reads
// only one line then reads the same list the proxy judged the client by).
func setForwardedFor(req *fasthttp.Request, peer net.IP) {
	// Built in a pooled buffer: this runs for every proxied request.
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	ip, _ := netip.AddrFromSlice(peer)
	b = appendForwardedFor(b, &req.Header, ip.Unmap())
	req.Header.Del(fasthttp.HeaderXForwardedFor)
	req.Header.SetBytesV(fasthttp.HeaderXForwardedFor, b)
	*bp = b
	bufPool.Put(bp)
}

// forwardWinner sends an admitted buy to the shop and settles the
// reservation by what the shop said: 2xx confirms (keeping the answer for
// replays of the request id), a release status or a failed connection
// releases, silence or (with verify.url) any other status keeps it pending
// for the reconciler.
func (s *Server) forwardWinner(ctx *fasthttp.RequestCtx, st *state, r *admission.Request, d admission.Decision, ans *answer) {
	up := st.upstream
	a := r.Activity
	tok := ans.token
	qty := strconv.FormatInt(r.Qty, 10)
	h := &ctx.Request.Header
	h.Set("X-Seckill-Token", tok)
	h.Set("X-Seckill-Activity", a.ID)
	h.Set("X-Seckill-Sku", r.SKU)
	h.Set("X-Seckill-Qty", qty)
	h.Set("X-Seckill-User", r.User)
	items := bundleHeaders(h, r)
	up.prepare(ctx)
	// v2 signs the request line as it goes out: the canonical path after
	// rewrite and the base path, the query as fasthttp writes it (the buy
	// client sends the path unnormalised, as set here).
	uri := ctx.Request.URI()
	uri.DisablePathNormalizing = true
	h.Set("X-Seckill-Signature", up.keys.Sign(time.Now().UnixMilli(), signing.Request{Token: tok, Activity: a.ID, SKU: r.SKU,
		Qty: qty, User: r.User, Method: string(h.Method()), Target: string(uri.RequestURI()), Items: items}))

	t0 := time.Now()
	if lateToSend(d.Stamp, t0, a.PendingTimeout, up.timeout) {
		// Sent now, the shop could still be working on it when the
		// reconciler may settle the reservation: not sent, released.
		s.log.Warn("winner not sent: its reservation is too old to reach the shop before the reconciler may settle it (Redis or a replica stalled its reserve)",
			zap.String("token", tok), zap.Duration("age", t0.Sub(d.Stamp)), zap.Duration("pending_timeout", a.PendingTimeout))
		s.settle("release", func(c context.Context) (lua.Code, error) {
			return s.book.Release(c, d.Token, d.Shards, "late", time.Now().UnixMilli(), true)
		}, tok)
		ans.code, ans.token, ans.retryAfter = admission.StoreUnavailable, "", time.Second
		s.answer(ctx, st, a, ans)
		return
	}
	err := up.buy.DoTimeout(&ctx.Request, &ctx.Response, up.timeout)
	elapsed := time.Since(t0).Seconds()
	status := ctx.Response.StatusCode()

	// A non-2xx answer releases when it is a definite no: a configured
	// release status, or any status when nothing could settle it otherwise
	// (no verify.url). A 5xx may come from a balancer after the shop took
	// the order: with verify.url it is an unknown outcome, left pending.
	refused := err == nil && (status < 200 || status > 299) && (a.Verify.URL == "" || up.releases(status))
	switch {
	case err == nil && status >= 200 && status < 300:
		s.obs.upstreamOK.Observe(elapsed)
		oid := orderID(&ctx.Response, a.OrderIDFrom)
		// The closure may outlive the handler (settle retries): it holds
		// copies, never the request or the ctx's bytes.
		if rid := r.RequestID; rid != "" {
			// A repeat of this request id must find the answer kept: the
			// confirm that keeps it lands before the buyer hears.
			user, rp := r.User, keepReplay(&ctx.Response, up.replayMax)
			s.settleBeforeAnswer("confirm", func(c context.Context) (lua.Code, error) {
				return s.book.ConfirmReplay(c, d.Token, d.Shards, oid, user, rid, rp)
			}, tok)
		} else {
			// Nothing the answer says waits for the confirm: it runs
			// while the answer is written (issue 10).
			s.confirmAfter(tok, oid, store.ConfirmItem{Token: d.Token, Shards: d.Shards, OrderID: oid}, func(c context.Context) (lua.Code, error) {
				return s.book.Confirm(c, d.Token, d.Shards, oid)
			})
		}
		ctx.Response.Header.Set("X-Seckill-Token", tok)
		st.outcome[a.ID].byCode[admission.Admitted].Inc()
	case refused || isDefiniteNo(err):
		outcome, reason := "refused", "shop_status_"+strconv.Itoa(status)
		if err != nil {
			outcome, reason = "failed", "shop_unreachable"
			s.log.Warn("shop unreachable; reservation released", zap.String("token", tok), zap.Error(err))
		}
		s.m.UpstreamLatency.WithLabelValues(outcome).Observe(elapsed)
		s.settle("release", func(c context.Context) (lua.Code, error) {
			return s.book.Release(c, d.Token, d.Shards, reason, time.Now().UnixMilli(), true)
		}, tok)
		ans.code, ans.token = admission.UpstreamFailed, ""
		if err == nil {
			ans.upstream = status
		}
		s.answer(ctx, st, a, ans)
	default:
		s.obs.upstreamTimeout.Observe(elapsed)
		if err == nil {
			ans.upstream = status
			err = fmt.Errorf("shop answered %d", status)
		}
		s.log.Warn("shop outcome unknown; reservation stays pending for the reconciler", zap.String("token", tok), zap.Error(err))
		ans.code = admission.UpstreamTimeout
		s.answer(ctx, st, a, ans)
	}
}

// lateToSend reports whether a winner reserved at stamp is too old at now
// to be sent (config.LateToSend): the reserve or a replica stalled (a late
// but in-time reply after DEBUG SLEEP, durable_winners on_timeout: forward).
func lateToSend(stamp, now time.Time, pending, upstream time.Duration) bool {
	return config.LateToSend(stamp, now, pending, upstream)
}

// keepReplay copies the shop's answer to a winner for exact replays, or
// returns nil when its body is larger than max (repeats then read 409
// ALREADY_PURCHASED with token and order id).
func keepReplay(resp *fasthttp.Response, max int) *store.Replay {
	body := resp.Body()
	if max <= 0 || len(body) > max {
		return nil
	}
	return &store.Replay{
		Status:          resp.StatusCode(),
		ContentType:     string(resp.Header.ContentType()),
		ContentEncoding: string(resp.Header.ContentEncoding()),
		Body:            append([]byte(nil), body...),
	}
}

// isDefiniteNo reports whether err proves the shop never got the request:
// nothing of it was handed to a connection (buyTransport), or fasthttp
// refused it before its transport ran.
func isDefiniteNo(err error) bool {
	var de dialError
	var ns notSentError
	return errors.As(err, &ns) || errors.As(err, &de) || errors.Is(err, fasthttp.ErrNoFreeConns) ||
		errors.Is(err, fasthttp.ErrHostClientRedirectToDifferentScheme)
}

// maxConfirmsInFlight bounds the winners' confirms running after their
// answers; past it a winner's confirm runs before its answer, as every
// confirm did before issue 10, so a Redis that falls behind slows winners
// down instead of piling up goroutines.
const maxConfirmsInFlight = 4096

// confirms runs winners' confirms after their answers and remembers, per
// token, the ones started in the last confirmKeep or two, so a repeat of
// the buyer that this instance decides meanwhile is answered by what the
// confirm makes true: its reserve may have run in Redis before the confirm
// (PENDING) even when the confirm is done by the time it is answered.
type confirms struct {
	slots   chan struct{}
	running atomic.Int64 // polled by wait: a WaitGroup may not be waited on while winners keep adding

	queue   chan confirmJob // batched confirms (a confirmer Book)
	workers atomic.Int32

	mu        sync.Mutex
	cur, prev map[string]*runningConfirm // token -> its confirm; prev is dropped on rotation
	rotated   time.Time
}

// confirmKeep is how long a confirm is remembered at least (at most twice
// that): above any reserve call's wait for Redis.
const confirmKeep = 3 * time.Second

func (c *confirms) remember(tok string, rc *runningConfirm) {
	now := time.Now()
	c.mu.Lock()
	if c.cur == nil || now.Sub(c.rotated) > confirmKeep {
		c.prev, c.cur, c.rotated = c.cur, make(map[string]*runningConfirm), now
	}
	c.cur[tok] = rc
	c.mu.Unlock()
}

func (c *confirms) lookup(tok string) *runningConfirm {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc, ok := c.cur[tok]; ok {
		return rc
	}
	return c.prev[tok]
}

type runningConfirm struct {
	done    chan struct{}
	orderID string
	// ok: confirmed. Set by the first attempt (before done is closed); a
	// retry in the background may set it later.
	ok atomic.Bool
}

func newConfirms() confirms {
	return confirms{slots: make(chan struct{}, maxConfirmsInFlight), queue: make(chan confirmJob, maxConfirmsInFlight)}
}

// confirmer confirms many reservations in one call per shard (the store);
// a Book without it confirms each winner in a goroutine of its own.
type confirmer interface {
	ConfirmMany(ctx context.Context, items []store.ConfirmItem) ([]lua.Code, []error)
}

// confirmJob is one winner's confirm waiting for a batch.
type confirmJob struct {
	tok    string
	item   store.ConfirmItem
	rc     *runningConfirm
	single func(context.Context) (lua.Code, error) // the one-token confirm, for the retrier
}

// confirmWorkers bounds the batches in flight at once: while they wait
// for Redis the next winners' confirms gather into the next batches.
const confirmWorkers = 2

// confirmAfter settles a winner's confirm in the background, the buyer's
// answer written meanwhile. The guarantee is today's: the confirm is
// retried until Redis answers (settle → the store's retrier); a process
// killed between the answer and the confirm leaves a pending reservation,
// which the reconciler settles with verify.url — the same window as a kill
// between the shop's answer and the confirm. Shutdown waits for them.
// With a store that confirms in batches, the confirms that gather while
// one batch is in flight go in one script call per shard (issue 10).
func (s *Server) confirmAfter(tok, oid string, item store.ConfirmItem, f func(context.Context) (lua.Code, error)) {
	cm := s.batcher
	select {
	case s.confirms.slots <- struct{}{}:
	default:
		s.settle("confirm", f, tok)
		return
	}
	rc := &runningConfirm{done: make(chan struct{}), orderID: oid}
	s.confirms.remember(tok, rc)
	s.confirms.running.Add(1)
	if cm != nil {
		s.confirms.queue <- confirmJob{tok: tok, item: item, rc: rc, single: f} // a slot was free: never blocks
		s.confirms.spawn(s, cm)
		return
	}
	go func() {
		s.settle("confirm", func(c context.Context) (lua.Code, error) {
			code, err := f(c)
			rc.ok.Store(err == nil && (code == lua.OK || code == lua.Same))
			return code, err
		}, tok)
		s.confirms.finish(rc)
	}()
}

// finish marks one confirm done.
func (c *confirms) finish(rc *runningConfirm) {
	close(rc.done)
	<-c.slots
	c.running.Add(-1)
}

// spawn starts a batch worker unless confirmWorkers already run.
func (c *confirms) spawn(s *Server, cm confirmer) {
	for {
		n := c.workers.Load()
		if n >= confirmWorkers {
			return
		}
		if c.workers.CompareAndSwap(n, n+1) {
			go c.work(s, cm)
			return
		}
	}
}

// work confirms batches until the queue is empty, then exits (re-checking
// after it stopped counting itself, so no job waits for a worker).
func (c *confirms) work(s *Server, cm confirmer) {
	batch := make([]confirmJob, 0, 64)
	items := make([]store.ConfirmItem, 0, 64)
	for {
		select {
		case j := <-c.queue:
			batch, items = append(batch[:0], j), append(items[:0], j.item)
		fill:
			for len(batch) < store.MaxConfirmBatch {
				select {
				case j := <-c.queue:
					batch, items = append(batch, j), append(items, j.item)
				default:
					break fill
				}
			}
			s.confirmBatch(cm, batch, items)
		default:
			c.workers.Add(-1)
			if len(c.queue) == 0 {
				return
			}
			n := c.workers.Load()
			if n >= confirmWorkers || !c.workers.CompareAndSwap(n, n+1) {
				return // another worker has it
			}
		}
	}
}

// confirmBatch runs one batch; a confirm Redis did not answer goes on
// alone through settle's retrier, as an unbatched one would.
func (s *Server) confirmBatch(cm confirmer, batch []confirmJob, items []store.ConfirmItem) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	codes, errs := cm.ConfirmMany(ctx, items)
	cancel()
	for i, j := range batch {
		code, err := codes[i], errs[i]
		j.rc.ok.Store(err == nil && (code == lua.OK || code == lua.Same))
		f := j.single
		if err != nil {
			rc := j.rc // a retry that lands later still says so
			f = func(c context.Context) (lua.Code, error) {
				code, err := j.single(c)
				if err == nil && (code == lua.OK || code == lua.Same) {
					rc.ok.Store(true)
				}
				return code, err
			}
		}
		s.settledOrRetry("confirm", f, j.tok, code, err)
		s.confirms.finish(j.rc)
	}
}

// settledAs turns a PENDING answer about a token whose confirm this
// instance is running into ALREADY_PURCHASED once that confirm lands
// (waiting at most confirmWait); otherwise the answer stays PENDING.
//
// tok is the reservation's token whether or not the answer may show it:
// an unverified buyer (issue 9 §4) learns the new state, not the order id.
func (c *confirms) settledAs(tok string, ans *answer) {
	if rc := c.await(tok); rc != nil && rc.ok.Load() {
		ans.code = admission.AlreadyPurchased
		if ans.token != "" {
			ans.orderID = rc.orderID
		}
	}
}

// await waits (at most confirmWait) for the confirm of tok this instance
// started lately, if any; it returns it once done, or nil.
func (c *confirms) await(tok string) *runningConfirm {
	rc := c.lookup(tok)
	if rc == nil {
		return nil
	}
	select {
	case <-rc.done:
		return rc
	default:
	}
	t := time.NewTimer(confirmWait)
	defer t.Stop()
	select {
	case <-rc.done:
		return rc
	case <-t.C:
		return nil
	}
}

// WaitConfirms waits until the winners' confirms running after their
// answers are done (tests read the store's counters after it).
func (s *Server) WaitConfirms(ctx context.Context) error { return s.confirms.wait(ctx) }

// confirmWait is how long a repeat waits for its token's running confirm.
const confirmWait = 500 * time.Millisecond

// wait waits until no confirm runs, or for ctx.
func (c *confirms) wait(ctx context.Context) error {
	for c.running.Load() > 0 {
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%d confirms still running: %w", c.running.Load(), ctx.Err())
		}
	}
	return nil
}

// settle runs one reservation transition with its own deadline: the
// buyer's connection may already be gone, the reservation must not wait.
// When Redis does not answer (a stall, a failover), the transition is
// retried in the background until it does (the store's retrier: every
// transition is idempotent by token), so a shop-accepted order is
// confirmed moments after Redis recovers, not by the reconciler minutes
// later.
func (s *Server) settle(kind string, f func(context.Context) (lua.Code, error), tok string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	code, err := f(ctx)
	s.settledOrRetry(kind, f, tok, code, err)
}

// replayConfirmWithin bounds how long a winner's answer waits for the
// confirm that keeps its replay while Redis does not answer (a blip, a
// failover, a restart): within PendingMargin, the time the reconciler
// leaves the proxy's own confirm.
const replayConfirmWithin = 1500 * time.Millisecond

// settleBeforeAnswer runs f as settle does, retrying it while Redis does not
// answer for up to replayConfirmWithin, so a repeat of the request id on any
// instance finds the replay through a short outage (SPEC §9). Past that the
// buyer is answered anyway (the shop took the order; that is the truth) and
// the retrier lands f when Redis is back: a repeat meanwhile is answered
// PENDING, the reservation's state in Redis (README, "Replays").
func (s *Server) settleBeforeAnswer(kind string, f func(context.Context) (lua.Code, error), tok string) {
	deadline := time.Now().Add(replayConfirmWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		code, err := f(ctx)
		cancel()
		if err == nil || !store.Retryable(err) || time.Until(deadline) < replayConfirmPause {
			s.settledOrRetry(kind, f, tok, code, err)
			return
		}
		time.Sleep(replayConfirmPause)
	}
}

// replayConfirmPause is the pause between two attempts of settleBeforeAnswer.
const replayConfirmPause = 100 * time.Millisecond

// settledOrRetry records the first attempt's result of f, or hands f to
// the store's retrier when Redis did not answer it.
func (s *Server) settledOrRetry(kind string, f func(context.Context) (lua.Code, error), tok string, code lua.Code, err error) {
	if err != nil && store.Retryable(err) {
		if rb, ok := s.book.(interface{ Retrier() *store.Retrier }); ok {
			queued := rb.Retrier().Submit(kind, tok, func(c context.Context) error {
				code, err := f(c)
				if err == nil {
					s.settled(kind, tok, code, nil)
				}
				return err
			})
			if queued {
				s.log.Warn(kind+" did not reach Redis; retrying in the background", zap.String("token", tok), zap.Error(err))
				s.m.Settlements.WithLabelValues(kind, "retry").Inc()
				return
			}
		}
	}
	s.settled(kind, tok, code, err)
}

// settled records a transition's result.
func (s *Server) settled(kind, tok string, code lua.Code, err error) {
	result := code.String()
	if err != nil {
		result = "error"
		s.log.Error(kind+" failed; the reconciler will settle it", zap.String("token", tok), zap.Error(err))
	} else if kind == "confirm" {
		s.confirmLog.Settled("confirm", tok, code)
	}
	s.m.Settlements.WithLabelValues(kind, result).Inc()
}

// orderID finds the shop's order id in its 2xx answer: json:/pointer or
// header:NAME.
func orderID(resp *fasthttp.Response, from string) string {
	kind, name, _ := strings.Cut(from, ":")
	switch kind {
	case "header":
		return string(resp.Header.Peek(name))
	case "json":
		body := resp.Body()
		if len(body) == 0 || len(body) > 1<<20 {
			return ""
		}
		if ce := resp.Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
			// A shop that compresses its answers (the buyer's own
			// Accept-Encoding is forwarded): the id is in the decoded body.
			// An order answer is small; a large compressed one is not read.
			if len(body) > 64<<10 {
				return ""
			}
			var err error
			// Decoded with the bound, not checked after: 60 KiB of gzip
			// decode to 60 MiB (brotli, zstd: far more), built whole first.
			if body, err = resp.BodyUncompressedWithLimit(1 << 20); err != nil || len(body) > 1<<20 {
				return ""
			}
		}
		// A byte order mark before the document (ASP.NET's and many
		// Windows encoders' UTF-8): JSON parsers may ignore it (RFC 8259
		// §8.1), and with it the id was never found.
		return findOrderID(bytes.TrimPrefix(body, utf8BOM), name)
	}
	return ""
}

var utf8BOM = []byte("\xef\xbb\xbf")

// pass forwards an ordinary request to the shop as it is.
func (s *Server) pass(ctx *fasthttp.RequestCtx, st *state) {
	up := st.upstream
	up.prepare(ctx)
	t0 := time.Now()
	err := up.pass.DoTimeout(&ctx.Request, &ctx.Response, up.passTimeout)
	s.obs.passLatency.Observe(time.Since(t0).Seconds())
	if err == nil && ctx.Response.StatusCode() < 200 {
		// A 101: the shop switched its connection to another protocol,
		// although the proxy sends no Upgrade (hop.go), and fasthttp
		// pooled it. The proxy tunnels nothing: the answer is a 502 and
		// the idle connections go, so the next request is not written
		// into the switched one.
		up.pass.CloseIdleConnections()
		err = errSwitchedProtocols
	}
	if err != nil {
		answerUnreachable(ctx, err)
		s.obs.passError.Inc()
		return
	}
	if c := ctx.Response.StatusCode() / 100; c >= 1 && c <= 5 {
		s.obs.passClass[c].Inc()
	}
	if ctx.Response.IsBodyStream() && ctx.Response.Header.ContentLength() < 0 && ctx.UserValue(http10Key{}) != nil {
		// fasthttp writes a streamed body of unknown length chunked,
		// whatever the buyer's version; an HTTP/1.0 buyer cannot read that
		// (RFC 9112 §6.1), and the shop, asked in HTTP/1.1 (hop.go), may
		// well answer so. Its answer is read whole, up to pass10Max, and
		// goes with a Content-Length; a larger one is a 502 and a close.
		b, err := io.ReadAll(io.LimitReader(ctx.Response.BodyStream(), pass10Max+1))
		if err != nil || len(b) > pass10Max {
			writeAnswer(ctx, &answer{code: admission.UpstreamFailed, message: "the shop's answer is too large for an HTTP/1.0 client"})
			ctx.SetConnectionClose()
			s.obs.passError.Inc()
			return
		}
		ctx.Response.SetBody(b)
	}
}

// answerUnreachable answers, as a plain proxy does, a request the shop did
// not answer: 504 when it timed out, 502 otherwise. The body is SPEC §4's
// JSON (every answer the proxy gives itself is), with the codes of those
// statuses; no reservation is involved on an ordinary route.
func answerUnreachable(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrTimeout) {
		writeAnswer(ctx, &answer{code: admission.UpstreamTimeout, message: "the shop did not answer in time"})
	} else {
		writeAnswer(ctx, &answer{code: admission.UpstreamFailed, message: "the shop could not be reached"})
	}
}

// bufferBuyBody reads a buy's body into memory, at most maxBuyBody bytes:
// the server streams request bodies (StreamRequestBody), and a buy's
// fields (identity, SKU, qty) may be in its body. It reports false, having
// read no more than the bound, for a larger body, one cut short, or a
// chunked body that ended in trailer fields (see hasTrailers).
func bufferBuyBody(req *fasthttp.Request) bool {
	return readBuyBody(req) && !hasTrailers(&req.Header)
}

// hasTrailers reports whether a request announced trailer fields or its
// body, read so far, carried any. fasthttp keeps them apart from the header
// (where X-Seckill-* are stripped) and writes the proxy's own headers whose
// names are announced into the trailer section, so none is forwarded: a
// request with any is refused (BAD_REQUEST). One that arrives unannounced at
// the end of an ordinary request's streamed body is already on its way to
// the shop, in the trailer section only (README, "Request trailers").
func hasTrailers(h *fasthttp.RequestHeader) bool { return len(h.PeekTrailerKeys()) > 0 }

func readBuyBody(req *fasthttp.Request) bool {
	if !req.IsBodyStream() {
		return len(req.Body()) <= maxBuyBody
	}
	n := req.Header.ContentLength()
	switch {
	case n > maxBuyBody:
		return false
	case n == 0:
		req.SetBody(nil)
		return true
	case n > 0:
		bp := bufPool.Get().(*[]byte)
		b := slices.Grow((*bp)[:0], n)[:n]
		_, err := io.ReadFull(req.BodyStream(), b)
		if err == nil {
			req.SetBody(b) // copied
		}
		*bp = b[:0]
		bufPool.Put(bp)
		return err == nil
	}
	// Chunked: no length known before reading.
	b, err := io.ReadAll(io.LimitReader(req.BodyStream(), maxBuyBody+1))
	if err != nil || len(b) > maxBuyBody {
		return false
	}
	req.SetBody(b)
	return true
}

// observers are the metrics the proxy records on every request, resolved
// once (a label lookup per request costs a hash and, for built labels, an
// allocation).
type observers struct {
	upstreamOK, upstreamTimeout, passLatency prometheus.Observer
	passError                                prometheus.Counter
	passClass                                [6]prometheus.Counter // [1..5] = 1xx..5xx
}

func newObservers(m *metrics.Metrics) observers {
	o := observers{
		upstreamOK:      m.UpstreamLatency.WithLabelValues("ok"),
		upstreamTimeout: m.UpstreamLatency.WithLabelValues("timeout"),
		passLatency:     m.UpstreamLatency.WithLabelValues("passthrough"),
		passError:       m.Passthrough.WithLabelValues("error"),
	}
	for c := 1; c <= 5; c++ {
		o.passClass[c] = m.Passthrough.WithLabelValues(strconv.Itoa(c) + "xx")
	}
	return o
}
