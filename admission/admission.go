// Package admission decides every buy request, cheapest check first: the
// activity window and SKU whitelist from config, the kill switch and
// readiness from client-side-cached flags, then one atomic Redis script.
// It knows no HTTP: the proxy hands it a Request and renders its Decision.
package admission

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Store is what admission needs of Redis; *store.Store implements it.
type Store interface {
	Flags(ctx context.Context, act string) (store.Flags, error)
	Reserve(ctx context.Context, q store.ReserveRequest) (store.ReserveResult, error)
	Repeat(ctx context.Context, q store.ReserveRequest) (store.ReserveResult, bool, error)
}

var _ Store = (*store.Store)(nil)

// Request is one buy request, already parsed and checked for shape by the proxy.
type Request struct {
	Activity  *config.Activity
	SKU       string
	Qty       int64
	User      string
	Device    string
	IP        netip.Addr
	RequestID string
	// Verified is set by the proxy when User was proven (a JWT or session
	// identity), not just sent: only then do PENDING and ALREADY_PURCHASED
	// answers carry the reservation's token and order id (an activity
	// with a required app signature counts as verified too).
	Verified bool
	// IPSpent: this request already took its per-IP token (the first
	// sight of its JWT, a session look-up): the per-IP stage takes no
	// second one, so a fresh buyer is not charged twice (red-team finding
	// fp13: buyers behind one address were refused at half the burst).
	IPSpent bool

	// Session is the buyer's session credential (identity.user.session),
	// copied out of the request; User stays empty until Identify, asked
	// after the local stages, has turned it into the shop's user id.
	Session  string
	Identify Identifier

	// Conn is the buyer's connection, set by the proxy for activities with
	// a fair_start window: a buy held there whose buyer has gone by its
	// release reserves nothing. Never read from or written to.
	Conn net.Conn

	// Signature fields, filled by the proxy only for activities that
	// require a signature (config: signature.keys).
	Method, Path string
	SigKeyID     string
	SigTimestamp string
	SigNonce     string
	Signature    string

	// Items, when not nil, make the request a bundle (issue 13 §3): every
	// item reserved all or none, SKU is store.BundleSKU and Qty the total.
	Items []store.BundleItem

	// Keep, set by the proxy in queue mode, returns the request as the
	// queue worker is to send it to the shop; called once, only for a
	// reservation made, before Decide returns (store.ReserveRequest.Keep).
	Keep func() []byte
}

// Decision is the outcome of admission.
type Decision struct {
	Code Code
	// Token is the reservation: the new one for Admitted and Queued, the
	// buyer's earlier one for Pending and AlreadyPurchased.
	Token   store.Token
	OrderID string
	// RetryAfter is set for codes that carry Retry-After.
	RetryAfter time.Duration
	// Shards is the activity's shard count as preheated (the key layout).
	Shards int
	// Replay is the shop's answer to the first copy of a repeated request
	// id, for AlreadyPurchased when it was kept: the proxy answers with it.
	Replay *store.Replay
	// Short is the SKU a bundle could not get enough of (SoldOut).
	Short string
	// Stamp is the reservation's time as Redis recorded it (Admitted): the
	// reconciler may settle it pending_timeout after, so a winner whose
	// reserve or durability wait ran late must not be sent too late
	// (proxy.lateToSend).
	Stamp time.Time
}

// retryAfterDefault is what buyers are told to wait on a retryable refusal
// with no better estimate.
const retryAfterDefault = time.Second

// Pipeline runs the admission stages in order, cheapest first (SPEC §1):
//
//  1. window (server clock), SKU whitelist, qty          local
//  2. kill switch, readiness, sold-out marks             local snapshot
//     identity: session look-up (identify.go)            cache; else one HTTP call
//  3. signature (HMAC), eligibility, blocklists,         local
//     idempotency memo, per-IP/device/user rate limits
//  4. fleet admission rate                               local lease; Redis once per batch
//  5. signature nonce (SET NX), reserve script           Redis
//
// Every refusal is counted by layer and reason, and every request refused
// before step 5 counts as a Redis call saved.
type Pipeline struct {
	store Store
	ts    TrafficStore // nil when store does not implement it
	now   func() time.Time
	m     *metrics.Metrics
	log   *zap.Logger

	scriptObs      prometheus.Observer
	refusals       [numRefusals]refusalCounters
	savedMemo      prometheus.Counter
	savedLease     prometheus.Counter
	savedBuyerMemo prometheus.Counter
	savedGate      prometheus.Counter

	acts         atomic.Pointer[map[*config.Activity]*actState]
	byID         atomic.Pointer[map[string]*config.Activity] // the running config's (Apply), shadow copies too
	actsMu       sync.Mutex
	blocks       atomic.Pointer[blockSets]
	limits       atomic.Pointer[limiters]
	limMu        sync.Mutex // orders limiter swaps (Apply) and fleet rescales
	limiterKeys  int
	fleetN       atomic.Int64 // live instances sharing the limits (>= 1)
	fleetEvery   time.Duration
	fleetStale   time.Duration
	instanceID   string
	refreshEvery time.Duration
	running      atomic.Bool
	// dur is redis.durable_winners (durable.go); nil when off.
	dur *durableCheck
	// memo remembers recent script answers by request id, and nonces seen,
	// on this instance. It is a ristretto cache: a dropped or evicted entry
	// only means the request goes on to Redis, which decides the same.
	memo *ristretto.Cache[string, Decision]
	// fair holds buys in fair_start windows (fairstart.go).
	fair *fairPen
	// clock is the clock guard (clock.go, server.max_clock_skew).
	clock clockGuard
}

// Option tunes a Pipeline.
type Option func(*Pipeline)

// WithLimiterKeys sets how many keys each local limiter holds (default
// 1<<17 = 131,072 per limiter, 2 MiB each).
func WithLimiterKeys(n int) Option { return func(p *Pipeline) { p.limiterKeys = n } }

// WithRefreshEvery sets the refresher's period (default RefreshEvery).
func WithRefreshEvery(d time.Duration) Option { return func(p *Pipeline) { p.refreshEvery = d } }

// memoTTL is how long this instance answers a repeated request id from
// memory. Only final states are kept (a released reservation), so a memo
// answer is never older than the reservation's state; Redis has the truth
// for the full 5 minutes.
const memoTTL = time.Second

// New builds a Pipeline. now is the server clock (time.Now outside tests).
// Call Apply with the config for local rate limits, and Run in the
// background for the local snapshots.
func New(s Store, m *metrics.Metrics, log *zap.Logger, now func() time.Time, opts ...Option) *Pipeline {
	if now == nil {
		now = time.Now
	}
	p := &Pipeline{store: s, now: now, m: m, log: log, scriptObs: m.ScriptLatency.WithLabelValues("reserve"),
		limiterKeys: 1 << 17, refreshEvery: RefreshEvery, fleetEvery: FleetBeatEvery, fleetStale: FleetStale}
	p.fleetN.Store(1)
	p.clock.host, p.clock.every = time.Now, ClockCheckEvery
	p.fair = newFairPen(now, m.FairHeld, m.FairReleases)
	p.ts, _ = s.(TrafficStore)
	p.dur = newDurableCheck(s, m)
	for i := range p.refusals {
		rk := refusalKinds[i]
		p.refusals[i] = refusalCounters{
			rejected: m.Rejections.WithLabelValues(rk.layer, rk.reason),
			saved:    m.RedisSaved.WithLabelValues(rk.layer),
		}
	}
	p.savedMemo = m.RedisSaved.WithLabelValues("idempotency_memo")
	p.savedLease = m.RedisSaved.WithLabelValues("admission_lease")
	p.savedBuyerMemo = m.RedisSaved.WithLabelValues("buyer_memo")
	p.savedGate = m.RedisSaved.WithLabelValues("reserve_gate")
	for _, o := range opts {
		o(p)
	}
	if p.instanceID == "" {
		p.instanceID = newInstanceID()
	}
	memo, err := ristretto.NewCache(&ristretto.Config[string, Decision]{
		NumCounters: 1 << 18, MaxCost: 1 << 16, BufferItems: 64,
		// 65,536 entries of cost 1: without this ristretto adds ~56 to
		// each entry's cost and the memo held ~1,150 (store's buyer memo
		// had the same defect, TestBuyerMemoHoldsItsBound).
		IgnoreInternalCost: true,
	})
	if err != nil {
		log.Error("idempotency memo disabled", zap.Error(err))
	}
	p.memo = memo
	return p
}

// Close releases the pipeline's background resources (the memo's
// goroutines). Decide must not be called after Close.
func (p *Pipeline) Close() {
	p.fair.close()
	if p.memo != nil {
		p.memo.Close()
	}
}

// refusal names one way a request is refused: its code, the layer and
// reason it is counted under, and whether it saved a Redis call.
type refusal uint8

const (
	rNotStarted refusal = iota
	rEnded
	rUnknownItem
	rBadQty
	rNotReady
	rPaused
	rSoldOut
	rSigMalformed
	rSigUnknownKey
	rSigStale
	rSigBad
	rSigReplay
	rNotEligible
	rBlockedIP
	rBlockedDevice
	rBlockedUser
	rLimitIP
	rLimitDevice
	rLimitUser
	rBusy
	rBacklog
	rStoreDown
	rUnauthenticated
	rAuthDown
	rFairFull
	rFairGone
	rFairDrain
	rNotDurable
	rClockSkew
	numRefusals
)

var refusalKinds = [numRefusals]struct {
	code          Code
	layer, reason string
	local         bool // answered before any Redis call
}{
	rNotStarted:    {NotStarted, "window", "NOT_STARTED", true},
	rEnded:         {Ended, "window", "ENDED", true},
	rUnknownItem:   {UnknownItem, "whitelist", "UNKNOWN_ITEM", true},
	rBadQty:        {BadRequest, "request", "BAD_REQUEST", true},
	rNotReady:      {NotReady, "flags", "NOT_READY", true},
	rPaused:        {Paused, "flags", "PAUSED", true},
	rSoldOut:       {SoldOut, "sold_out", "SOLD_OUT", true},
	rSigMalformed:  {BadRequest, "signature", "malformed", true},
	rSigUnknownKey: {Blocked, "signature", "unknown_key", true},
	rSigStale:      {Blocked, "signature", "stale", true},
	rSigBad:        {Blocked, "signature", "bad_signature", true},
	rSigReplay:     {Blocked, "signature", "replay", false},
	rNotEligible:   {Blocked, "eligibility", "not_eligible", true},
	rBlockedIP:     {Blocked, "blocklist", "ip", true},
	rBlockedDevice: {Blocked, "blocklist", "device", true},
	rBlockedUser:   {Blocked, "blocklist", "user", true},
	rLimitIP:       {RateLimited, "rate_limit", "ip", true},
	rLimitDevice:   {RateLimited, "rate_limit", "device", true},
	rLimitUser:     {RateLimited, "rate_limit", "user", true},
	rBusy:          {Busy, "admission_rate", "BUSY", true},
	rBacklog:       {Busy, "queue_backlog", "BUSY", false},
	rStoreDown:     {StoreUnavailable, "redis", "STORE_UNAVAILABLE", false},
	// A session look-up asks the shop, not Redis: no Redis call was made.
	rUnauthenticated: {Unauthenticated, "identity", "UNAUTHENTICATED", true},
	rAuthDown:        {AuthUnavailable, "identity", "AUTH_UNAVAILABLE", true},
	// Fair start: the pen of held buys is full, a held buyer had gone, or
	// the instance is stopping (a held buy is refused, not let on early).
	rFairFull:  {Busy, "fair_start", "BUSY", true},
	rFairGone:  {Busy, "fair_start", "gone", true},
	rFairDrain: {Busy, "fair_start", "draining", true},
	// A winner the replicas did not acknowledge in time, released
	// (redis.durable_winners on_timeout: refuse).
	rNotDurable: {StoreUnavailable, "redis", "not_durable", false},
	// This host's clock is further from Redis's than server.max_clock_skew
	// (clock.go): its window and reservation stamps are not trusted.
	rClockSkew: {StoreUnavailable, "clock", "skew", true},
}

type refusalCounters struct {
	rejected, saved prometheus.Counter
}

// Decide runs every stage for one request. It never blocks longer than the
// Redis command timeout per Redis call.
func (p *Pipeline) Decide(ctx context.Context, r *Request) Decision {
	a := r.Activity
	if p.clock.problem.Load() != nil {
		return p.refuse(rClockSkew, retryAfterDefault)
	}
	now := p.now()
	// 1. Window and whitelist: config only.
	if now.Before(a.Start) {
		return p.refuse(rNotStarted, 0)
	}
	if !now.Before(a.End) {
		if d, ok := p.repeatAfterEnd(ctx, r, now); ok {
			return d
		}
		return p.refuse(rEnded, 0)
	}
	var sku *config.SKU
	if r.Items != nil {
		if d, bad := p.checkBundle(r); bad {
			return d
		}
	} else {
		if sku = a.SKU(r.SKU); sku == nil {
			return p.refuse(rUnknownItem, 0)
		}
		if r.Qty < 1 || r.Qty > a.MaxQty {
			return p.refuse(rBadQty, 0)
		}
	}
	// 2. Activity state from the local snapshot.
	st := p.stateFor(a)
	st.used.Store(now.Unix())
	flags, fresh, err := p.flagsFor(ctx, st)
	if err != nil {
		return p.storeDown(err)
	}
	if (!flags.Ready || flags.Shards <= 0) && fresh {
		// Rare (before preheat): confirm with Redis rather than trust a
		// snapshot a few ms behind a preheat that just happened. The
		// snapshot's sold-out marks are as old as its flags: not trusted
		// either (they may even be from a Redis that was since restarted).
		if flags, err = p.store.Flags(ctx, a.ID); err != nil {
			return p.storeDown(err)
		}
		fresh = false
	}
	if !flags.Ready || flags.Shards <= 0 {
		return p.refuse(rNotReady, retryAfterDefault)
	}
	if flags.Paused {
		return p.refuse(rPaused, retryAfterDefault)
	}
	// A repeat of a won request (it carries a request id) may still be
	// owed the shop's answer after the sell-out: it goes on, through the
	// rate limits, to store.Reserve, whose request-id bitset (local memory)
	// answers a fresh id SOLD_OUT and reads the record of a possible
	// repeat; every other buy of a sold-out SKU is answered here.
	soldOut := false
	if fresh && r.Items != nil {
		d, out, held := p.bundleSoldOut(ctx, st, r, flags.Shards)
		if out {
			return d
		}
		soldOut = held
	}
	if fresh {
		if k := st.skus[r.SKU]; k != nil && k.soldOut.Load() {
			// A buyer the reserve took units for may hold one whose
			// reserve ran after they were told STORE_UNAVAILABLE, its
			// abort still to come (perhaps another instance's): the
			// script answers them PENDING, not SOLD_OUT beside their
			// held unit (red team rv20).
			v, unknown := p.holderView(r)
			held := false
			if r.RequestID == "" {
				held = p.mayHold(ctx, v, flags.Shards)
			}
			if !held && unknown {
				// A session no look-up of this instance's has answered:
				// its holder alias (decisions §62). Also with a request
				// id: a repeat of a win or of an answer at the limit made
				// with this session set it, and any other buy of a
				// sold-out SKU is SOLD_OUT without costing the shop a
				// look-up.
				if held, err = p.mayHoldAlias(ctx, r, r.SKU, flags.Shards); err != nil {
					return p.storeDown(err)
				}
			}
			if (r.RequestID == "" || unknown) && !held {
				// Units this instance's settles, or another's (its
				// mark), may put back on sale: come back rather than
				// SOLD_OUT (§54, §58).
				if k.transit.Load() || p.inTransit(ctx, r.Activity.ID, r.SKU, flags.Shards) {
					return p.storeDown(store.ErrUnavailable)
				}
				return p.refuse(rSoldOut, 0)
			}
			soldOut = true
		}
	}
	// Who the buyer is, when only the shop can tell (a session): asked
	// now, so nothing refused above cost a look-up.
	if r.Identify != nil {
		if d, done := p.identify(ctx, r, now); done {
			return d
		}
		// A look-up may have waited for the shop: the stages below judge
		// rates and windows by the time now, not by when the buy came in
		// (a clock hundreds of ms old would count as debt in the buckets).
		now = p.now()
	}
	// 3. Who is asking: signature, eligibility, blocklists, rate limits.
	sigSt := st // whose keys checked the signature
	if st.sig != nil {
		switch st.sig.check(r, now) {
		case sigMalformed:
			return p.refuse(rSigMalformed, 0)
		case sigUnknownKey:
			return p.refuse(rSigUnknownKey, 0)
		case sigStale:
			return p.refuse(rSigStale, 0)
		case sigBad:
			return p.refuse(rSigBad, 0)
		}
	}
	if d, refused := p.checkWho(st, r, now); refused {
		return d
	}
	if r.RequestID != "" && p.memo != nil {
		if d, ok := p.memo.Get(memoKey(a.ID, r.User, r.RequestID)); ok {
			p.savedMemo.Inc()
			return d
		}
	}
	if l := p.limits.Load(); l != nil {
		if a.IsShadowCopy() {
			l = l.shadow // what shadow mode reports must not cost real buys
		}
		ns := now.UnixNano()
		if r.IPSpent {
			// Paid at the credential's first sight.
		} else if ok, wait := l.ip.AllowAddr(l.client(r.IP), ns); !ok {
			return p.refuse(rLimitIP, wait)
		}
		if r.Device != "" {
			if ok, wait := l.device.AllowString(r.Device, ns); !ok {
				return p.refuse(rLimitDevice, wait)
			}
		}
		if ok, wait := l.user.AllowString(r.User, ns); !ok {
			return p.refuse(rLimitUser, wait)
		}
	}
	// Fair start: inside the window, held here (after every refusal that
	// needs no stock, before the admission rate and Redis) until a random
	// moment after it. After the window: this one comparison.
	if a.FairStart > 0 && now.Before(a.FairStartEnd().Add(a.FairStartSpread)) {
		if d, done := p.holdFair(ctx, r, flags.FairSeed); done {
			return d
		}
		now = p.now()
		// Held up to fair_start + spread: what the operator changed
		// meanwhile (pause, blocklists, the invite list, and by reload the
		// window, mode, SKUs) holds for the buys let on now as for any
		// other. The buy was read with the config of its arrival: judged
		// now by the running one (Apply).
		if cur := p.current(a); cur != a {
			if d, refused := p.recheckReloaded(r, cur, now); refused {
				return d
			}
			rc := *r // the proxy's request is left as it sent it
			rc.Activity = cur
			r, a = &rc, cur
			if r.Items == nil {
				sku = a.SKU(r.SKU)
			}
			// The signature was checked with the arrival's keys: its
			// nonce is claimed with them (sigSt, step 5).
			st = p.stateFor(a)
			st.used.Store(now.Unix())
		}
		if !now.Before(a.End) {
			return p.refuse(rEnded, 0)
		}
		if flags, _, err = p.flagsFor(ctx, st); err != nil {
			return p.storeDown(err)
		}
		if !flags.Ready || flags.Shards <= 0 {
			return p.refuse(rNotReady, retryAfterDefault)
		}
		if flags.Paused {
			return p.refuse(rPaused, retryAfterDefault)
		}
		if d, refused := p.checkWho(st, r, now); refused {
			return d
		}
	}
	// 4. Fleet admission rate, from the local lease (nothing to admit
	// when sold out).
	if !soldOut {
		switch res, wait := st.lease.take(ctx, p.ts, a.ID, p.now); res {
		case leaseBusy:
			return p.refuse(rBusy, wait)
		case leaseDown:
			return p.storeDown(store.ErrUnavailable)
		case leaseOK:
			if p.ts != nil && a.AdmissionRate.Rate > 0 {
				p.savedLease.Inc()
			}
		}
	}
	// 5. Redis: the nonce, then the reserve script.
	if sigSt.sig != nil {
		if d, done := p.claimNonce(ctx, sigSt, r); done {
			return d
		}
	}
	if r.Items != nil {
		return p.reserveBundle(ctx, r, flags, now)
	}
	return p.reserve(ctx, r, sku, flags, now)
}

// current is the running config's activity with a's id (Apply), nil when
// the running config has none; a itself when Apply was never called.
func (p *Pipeline) current(a *config.Activity) *config.Activity {
	m := p.byID.Load()
	if m == nil {
		return a
	}
	return (*m)[a.ID]
}

// recheckReloaded judges a buy held in a fair_start window, read with an
// activity a reload has since replaced by cur, by step 1 of cur: gone
// (ENDED: the sale is no longer configured), switched to another mode
// (NOT_READY: a retry takes the new path), cur's window, SKUs and max_qty.
// The flags, invite list and blocklists are checked after, as for any
// held buy.
func (p *Pipeline) recheckReloaded(r *Request, cur *config.Activity, now time.Time) (Decision, bool) {
	switch {
	case cur == nil:
		return p.refuse(rEnded, 0), true
	case cur.Mode != r.Activity.Mode:
		return p.refuse(rNotReady, retryAfterDefault), true
	case now.Before(cur.Start):
		return p.refuse(rNotStarted, 0), true
	case !now.Before(cur.End):
		return p.refuse(rEnded, 0), true
	}
	rc := *r
	rc.Activity = cur
	if r.Items != nil {
		return p.checkBundle(&rc)
	}
	if cur.SKU(r.SKU) == nil {
		return p.refuse(rUnknownItem, 0), true
	}
	if r.Qty > cur.MaxQty {
		return p.refuse(rBadQty, 0), true
	}
	return Decision{}, false
}

// checkWho refuses a buyer who is not invited (eligible_only) or is on a
// blocklist at now.
func (p *Pipeline) checkWho(st *actState, r *Request, now time.Time) (Decision, bool) {
	nowMs := now.UnixMilli()
	if st.a.EligibleOnly {
		el := st.elig.Load()
		if el == nil {
			// Not loaded yet: whether the user was invited cannot be told.
			return p.refuse(rStoreDown, retryAfterDefault), true
		}
		if !el.has(r.User, nowMs) {
			return p.refuse(rNotEligible, 0), true
		}
	}
	if b := p.blocks.Load(); b != nil {
		if b.blockedIP(r.IP, nowMs) {
			return p.refuse(rBlockedIP, 0), true
		}
		if r.Device != "" && b.device.has(r.Device, nowMs) {
			return p.refuse(rBlockedDevice, 0), true
		}
		if b.user.has(r.User, nowMs) {
			return p.refuse(rBlockedUser, 0), true
		}
	}
	return Decision{}, false
}

// claimNonce refuses a replayed signature nonce: first from the local memo,
// then by SET NX in Redis (shared by every instance).
func (p *Pipeline) claimNonce(ctx context.Context, st *actState, r *Request) (Decision, bool) {
	if p.ts == nil {
		return Decision{}, false
	}
	key := "n\x00" + r.SigKeyID + "\x00" + r.SigNonce
	if p.memo != nil {
		if _, seen := p.memo.Get(key); seen {
			return p.refuse(rSigReplay, 0), true
		}
	}
	ttl := 2 * st.sig.window
	fresh, err := p.ts.ClaimNonce(ctx, r.SigKeyID, r.SigNonce, ttl)
	if err != nil {
		return p.storeDown(err), true
	}
	if p.memo != nil {
		p.memo.SetWithTTL(key, Decision{}, 1, ttl)
	}
	if !fresh {
		return p.refuse(rSigReplay, 0), true
	}
	return Decision{}, false
}

// inTransit reports whether this instance holds a settle that may put
// units of act's SKU back on sale (TransitChecker); false without one.
func (p *Pipeline) inTransit(ctx context.Context, act, sku string, shards int) bool {
	t, ok := p.ts.(TransitChecker)
	return ok && t.InTransit(ctx, act, sku, shards)
}

// holderView is r as the holders check sees it: a session identity not
// looked up yet (the look-up comes after the sold-out check, so a sold-out
// SKU costs the shop none) takes the user this instance's session cache
// holds for it, from memory. Red team chaos3 (§57): a session buyer
// holding the last unit who clicked again heard SOLD_OUT beside it.
// unknown reports a session credential this instance's cache has no
// answer for (never looked up here, or expired): its holder alias tells
// (mayHoldAlias). A session the cache knows the shop refused stays
// without a user: no holder.
func (p *Pipeline) holderView(r *Request) (v *Request, unknown bool) {
	if r.Identify == nil || r.User != "" {
		return r, false
	}
	u, err, ok := r.Identify.Cached(r.Session)
	if !ok {
		return r, r.Session != ""
	}
	if err != nil || u == "" {
		return r, false
	}
	c := *r
	c.User = u
	return &c, false
}

// mayHoldAlias reports whether r's buyer, a session this instance has not
// looked up, may hold units of act's sold-out sku: the holder alias of
// their credential is set in one of its holders bitsets (decisions §62;
// AliasHolderChecker, local memory after the first read). Such a buyer is
// looked up and then checked by user id, as any other. err: a bitset
// could not be read; nothing tells whether the buyer holds a unit.
func (p *Pipeline) mayHoldAlias(ctx context.Context, r *Request, sku string, shards int) (bool, error) {
	h, ok := p.ts.(AliasHolderChecker)
	if !ok {
		return false, nil
	}
	return h.MayHoldAlias(ctx, r.Activity.ID, sku, shards, store.HolderAlias(r.Session))
}

// holderAlias is the holder alias a win of r's sets beside its user's bit:
// its session credential's (store.HolderAlias), "" for a buyer not
// identified by a session.
func (r *Request) holderAlias() string {
	if r.Identify == nil {
		return ""
	}
	return store.HolderAlias(r.Session)
}

// mayHold reports whether r's buyer may hold units of r's sold-out SKU
// (HolderChecker, local memory); false without one.
func (p *Pipeline) mayHold(ctx context.Context, r *Request, shards int) bool {
	h, ok := p.ts.(HolderChecker)
	return ok && h.MayHold(ctx, r.Activity.ID, r.SKU, shards, r.User)
}

func (p *Pipeline) reserve(ctx context.Context, r *Request, sku *config.SKU, flags store.Flags, now time.Time) Decision {
	a := r.Activity
	t0 := time.Now()
	q := store.ReserveRequest{
		Activity: a.ID, SKU: r.SKU, User: r.User, Qty: r.Qty, Limit: a.PerUserLimit,
		Shards: flags.Shards, Queue: a.Mode == config.ModeQueue, NowMs: now.UnixMilli(), ExpireAt: store.ExpireAt(a),
		RequestID: r.RequestID, MaxBacklog: a.Queue.MaxBacklog, Stock: sku.Stock, Keep: r.Keep,
		Alias: r.holderAlias(),
	}
	res, err := p.store.Reserve(ctx, q)
	if err != nil {
		return p.storeDown(err)
	}
	if res.FromGate {
		p.savedGate.Inc()
	} else if res.FromMemory {
		p.refusals[rSoldOut].saved.Inc()
	} else if res.FromMemo {
		p.savedBuyerMemo.Inc()
	} else {
		p.scriptObs.Observe(time.Since(t0).Seconds())
	}
	if res.Moves > 0 {
		p.m.StockMoves.WithLabelValues(a.ID).Add(float64(res.Moves))
	}
	d := Decision{Token: res.Token, OrderID: res.OrderID, Shards: flags.Shards, Replay: res.Replay, Stamp: now}
	switch res.Code {
	case lua.OK:
		if p.dur != nil {
			if refused, no := p.makeDurable(ctx, q, res); no {
				return refused
			}
		}
		d.Code = Admitted
		if a.Mode == config.ModeQueue {
			d.Code = Queued
		}
	case lua.Empty:
		d.Code = SoldOut
	case lua.Pending, lua.Purchased, lua.Released:
		d.Code, _ = repeatCode(res.Code)
	case lua.NotReady:
		d.Code, d.RetryAfter = NotReady, retryAfterDefault
	case lua.Backlog:
		// Queue mode: the shop is behind by max_backlog; come back when
		// the workers have worked the backlog off at queue.rate.
		return p.refuse(rBacklog, time.Duration(float64(res.Backlog)/a.Queue.Rate*float64(time.Second)))
	default:
		p.log.Error("reserve: unexpected script code", zap.Stringer("code", res.Code))
		return p.storeDown(store.ErrInvalidResponse)
	}
	// Only a state that cannot move on is memoised: a winner's reservation
	// goes from pending to confirmed while its repeats arrive, and a repeat
	// after the confirm must read the shop's answer (kept in Redis with the
	// request id), never the PENDING of before it. A released reservation
	// stays released.
	if r.RequestID != "" && p.memo != nil && d.Code == UpstreamFailed {
		p.memo.SetWithTTL(memoKey(a.ID, r.User, r.RequestID), d, 1, memoTTL)
	}
	return d
}

// repeatAfterEnd answers a repeat of a request (same user, same request
// id) sent within store.RequestIDTTL of the end by the reservation its
// first copy got, as a repeat inside the window is answered (SPEC §4: the
// same outcome within 5 minutes): PENDING, the shop's kept answer,
// ALREADY_PURCHASED or UPSTREAM_FAILED. A winner whose answer was lost in
// the sale's last second was told ENDED when it asked again, and one whose
// buy was still at the shop too (red-team finding re15). Nothing is
// reserved; a request id that names no reservation is refused ENDED (ok
// false), as is any buy after that. A session identity is looked up only
// for buys that may reserve: its repeats after the end are ENDED.
func (p *Pipeline) repeatAfterEnd(ctx context.Context, r *Request, now time.Time) (Decision, bool) {
	a := r.Activity
	if r.RequestID == "" || r.Items != nil || r.User == "" || !now.Before(a.End.Add(store.RequestIDTTL)) || a.SKU(r.SKU) == nil {
		return Decision{}, false
	}
	flags, _, err := p.flagsFor(ctx, p.stateFor(a))
	if err != nil || !flags.Ready || flags.Shards <= 0 {
		return Decision{}, false // nothing was ever held here to answer by
	}
	res, found, err := p.store.Repeat(ctx, store.ReserveRequest{Activity: a.ID, SKU: r.SKU, User: r.User,
		RequestID: r.RequestID, Shards: flags.Shards})
	if err != nil {
		// It may be a winner's repeat: "unavailable, try again", not a
		// final ENDED it cannot take back.
		return p.storeDown(err), true
	}
	if !found {
		return Decision{}, false
	}
	d := Decision{Token: res.Token, OrderID: res.OrderID, Shards: flags.Shards, Replay: res.Replay, Stamp: now}
	var ok bool
	if d.Code, ok = repeatCode(res.Code); !ok {
		return Decision{}, false
	}
	return d, true
}

// repeatCode is the answer to a repeat (a buyer at their limit, or a
// repeated request id) by the state of the reservation it names.
func repeatCode(c lua.Code) (Code, bool) {
	switch c {
	case lua.Pending:
		return Pending, true
	case lua.Purchased:
		return AlreadyPurchased, true
	case lua.Released:
		// A repeated request id whose reservation was given back: the
		// shop refused it (or it was cancelled); nothing is held.
		return UpstreamFailed, true
	}
	return 0, false
}

func (p *Pipeline) refuse(r refusal, retry time.Duration) Decision {
	if retry > 0 && retry < time.Millisecond {
		retry = time.Millisecond // retry_after_ms is in whole ms
	}
	c := &p.refusals[r]
	c.rejected.Inc()
	if refusalKinds[r].local {
		c.saved.Inc()
	}
	return Decision{Code: refusalKinds[r].code, RetryAfter: retry}
}

func (p *Pipeline) storeDown(err error) Decision {
	if !errors.Is(err, store.ErrUnavailable) {
		p.log.Error("redis error on the buy path", zap.Error(err))
	}
	p.refusals[rStoreDown].rejected.Inc()
	return Decision{Code: StoreUnavailable, RetryAfter: retryAfterDefault}
}
