package admission

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TrafficStore is the Redis side of traffic control; *store.Store
// implements it. A Store without it still admits (no fleet rate, no shared
// lists, no nonces), so narrow test fakes keep working.
type TrafficStore interface {
	SoldOut(ctx context.Context, act, sku string, shards int) (bool, error)
	LeaseAdmission(ctx context.Context, act string, rate float64, burst int, want int64) (int64, time.Duration, error)
	BlockVersion(ctx context.Context) (string, error)
	Blocklist(ctx context.Context, kind string, now time.Time) (map[string]int64, error)
	EligibleVersion(ctx context.Context, act string) (string, error)
	Eligible(ctx context.Context, act string, now time.Time) (map[string]int64, error)
	ClaimNonce(ctx context.Context, keyID, nonce string, ttl time.Duration) (bool, error)
}

var _ TrafficStore = (*store.Store)(nil)

// SoldOutBatcher reads many SKUs' sold-out marks at once, each only when
// it may have changed (*store.Store implements it); without it the
// refresher asks SoldOut SKU by SKU.
type SoldOutBatcher interface {
	SoldOutMany(ctx context.Context, act string, skus []string, shards int, marks []store.OutMark) error
}

var _ SoldOutBatcher = (*store.Store)(nil)

// HolderChecker tells, from local memory, whether a buyer of a sold-out
// SKU may hold units of it (*store.Store implements it): such a buyer is
// answered by the reserve script (PENDING for a reservation still held),
// not SOLD_OUT from the sold-out mark. Without it every buyer is.
type HolderChecker interface {
	MayHold(ctx context.Context, act, sku string, shards int, user string) bool
}

var _ HolderChecker = (*store.Store)(nil)

// AliasHolderChecker tells, from local memory, whether a buyer known only
// by the holder alias of their session credential (store.HolderAlias) may
// hold units of a sold-out SKU (*store.Store implements it; decisions
// §62): such a buyer is looked up, then checked as any other. Without it
// such a buyer is answered SOLD_OUT from the sold-out mark.
type AliasHolderChecker interface {
	MayHoldAlias(ctx context.Context, act, sku string, shards int, alias string) (bool, error)
}

var _ AliasHolderChecker = (*store.Store)(nil)

// TransitChecker tells, from local memory, whether this instance holds a
// settle of a SKU's call that may put units back on sale (a late
// reservation to abort, a steal to settle; *store.Store implements it): a
// buyer of a sold-out SKU it says so of is answered STORE_UNAVAILABLE, not
// SOLD_OUT from the sold-out mark (decisions §54). Without it every buyer is.
type TransitChecker interface {
	InTransit(ctx context.Context, act, sku string, shards int) bool
}

var _ TransitChecker = (*store.Store)(nil)

// RefreshEvery is how often the background refresher re-reads flags,
// sold-out marks and list versions when the store cannot signal
// invalidations. Each read is a client-side-cache hit (no network) until
// Redis invalidates the key, so a change reaches every instance within one
// invalidation plus at most RefreshEvery.
const RefreshEvery = 5 * time.Millisecond

// IdleRefresh is the refresher's period when the store signals
// invalidations: a change wakes it at once, so the ticker only keeps
// snapshots younger than staleAfter and re-reads cache entries whose
// client-side TTL ran out. 200 passes a second became 4.
const IdleRefresh = 250 * time.Millisecond

// Invalidator is implemented by a store that signals client-side cache
// invalidations (*store.Store does).
type Invalidator interface {
	Invalidations() <-chan struct{}
}

// staleAfter is how old a snapshot may be before Decide stops trusting it
// and asks Redis itself (so a dead Redis still yields STORE_UNAVAILABLE).
const staleAfter = time.Second

// actState is what one instance knows about one activity, refreshed in the
// background and read by every request with no allocation.
type actState struct {
	a     *config.Activity
	flags atomic.Pointer[flagSnap]
	skus  map[string]*skuState
	elig  atomic.Pointer[members]
	lease lease
	sig   *sigKeys
	used  atomic.Int64 // unix s of the last request, for pruning

	eligVer string // refresher only
	// ids and marks are the SKUs' ids (sorted) and their last sold-out
	// reads, for SoldOutBatcher; refresher only.
	ids   []string
	marks []store.OutMark
}

type flagSnap struct {
	f     store.Flags
	at    time.Time // when the refresher read it (real clock)
	epoch uint64    // the store's cache epoch before the read
}

// Epocher is implemented by a store whose client-side cache can be dropped
// whole (*store.Store is): snapshots taken before a drop are not trusted.
type Epocher interface {
	CacheEpoch() uint64
}

func (p *Pipeline) epoch() uint64 {
	if e, ok := p.store.(Epocher); ok {
		return e.CacheEpoch()
	}
	return 0
}

type skuState struct {
	soldOut atomic.Bool
	// transit (with soldOut): an instance marks units of the SKU in
	// transit (store.OutMark.Transit, decisions §58): STORE_UNAVAILABLE,
	// not SOLD_OUT.
	transit atomic.Bool
}

// members is one immutable list snapshot: value -> expire-at ms.
type members map[string]int64

// has reports whether v is on the list at nowMs.
func (m *members) has(v string, nowMs int64) bool {
	if m == nil {
		return false
	}
	exp, ok := (*m)[v]
	return ok && exp > nowMs
}

// blockSets are the three blocklists as one snapshot.
type blockSets struct {
	// ip holds blocked prefixes: an entry CIDR as written, a bare address
	// cut to the per-IP limiter's client (limits.ipv6_prefix: an IPv6
	// subscriber owns a /64, and blocking one of its addresses must block
	// the rest, red-team finding; ipv4_prefix likewise).
	ip         map[netip.Prefix]int64
	bits4      []int // prefix lengths in ip, IPv4, shortest first
	bits6      []int
	cut4, cut6 int // the limiter's prefixes the bare addresses were cut to
	device     members
	user       members
	ver        string
}

// blockedIP reports whether a is inside a blocked prefix still in force.
func (b *blockSets) blockedIP(a netip.Addr, nowMs int64) bool {
	a = a.Unmap()
	lens := b.bits4
	if a.Is6() {
		lens = b.bits6
	}
	for _, n := range lens {
		if p, err := a.Prefix(n); err == nil {
			if exp, ok := b.ip[p]; ok && exp > nowMs {
				return true
			}
		}
	}
	return false
}

// blockPrefix reads a blocklist IP entry: a CIDR prefix, or an address cut
// to cut4 / cut6 bits (0 or out of range: the whole address).
func blockPrefix(s string, cut4, cut6 int) (netip.Prefix, bool) {
	if strings.IndexByte(s, '/') >= 0 {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	n := cut4
	if a.Is6() {
		n = cut6
	}
	if n <= 0 || n > a.BitLen() {
		n = a.BitLen()
	}
	p, err := a.Prefix(n)
	return p, err == nil
}

func newActState(a *config.Activity, log *zap.Logger) *actState {
	st := &actState{a: a, skus: make(map[string]*skuState, len(a.SKUs))}
	for _, k := range a.SKUs {
		if st.skus[k.ID] == nil {
			st.ids = append(st.ids, k.ID)
		}
		st.skus[k.ID] = &skuState{}
	}
	st.marks = make([]store.OutMark, len(st.ids))
	st.lease.init(a.AdmissionRate)
	if a.Signature.Enabled() {
		st.sig = &sigKeys{keys: map[string][]byte{}, window: a.Signature.Window}
		for id, env := range a.Signature.Keys {
			if k := os.Getenv(env); k != "" {
				st.sig.keys[id] = []byte(k)
			} else {
				log.Warn("signature key env var is empty: requests signed with this key id are refused",
					zap.String("activity", a.ID), zap.String("key_id", id), zap.String("env", env))
			}
		}
	}
	return st
}

// stateFor returns the activity's state, creating it on first sight (an
// activity from a config the pipeline was never told about).
func (p *Pipeline) stateFor(a *config.Activity) *actState {
	if m := p.acts.Load(); m != nil {
		if st, ok := (*m)[a]; ok {
			return st
		}
	}
	p.actsMu.Lock()
	defer p.actsMu.Unlock()
	old := p.acts.Load()
	if old != nil {
		if st, ok := (*old)[a]; ok {
			return st
		}
	}
	next := make(map[*config.Activity]*actState, 1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	st := newActState(a, p.log)
	st.used.Store(time.Now().Unix())
	next[a] = st
	p.acts.Store(&next)
	return st
}

// Apply tells the pipeline about a (re)loaded config: local rate limits,
// and the activities the refresher keeps snapshots of. Decide works without
// it (no local limits; activities are picked up on first request).
func (p *Pipeline) Apply(cfg *config.Config) {
	l := cfg.Limits
	p.limMu.Lock()
	shadows := false
	for i := range cfg.Activities {
		shadows = shadows || cfg.Activities[i].IsShadow()
	}
	if cur := p.limits.Load(); cur == nil || cur.cfg != l || (cur.shadow != cur) != shadows {
		p.limits.Store(p.carryLimiters(cur, l, shadows))
	}
	p.limMu.Unlock()
	p.fair.max.Store(int64(cfg.Server.FairStartMaxHeld))
	if p.clock.max.Store(int64(cfg.Server.MaxClockSkew)); cfg.Server.MaxClockSkew <= 0 {
		p.setClockProblem("") // turned off by a reload: at once
	}
	if keys := cfg.SigningKeys(); len(keys) > 0 {
		p.fair.setKey(keys[0].Secret())
	} else {
		p.fair.setKey("")
	}
	byID := make(map[string]*config.Activity, len(cfg.Activities))
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		byID[a.ID] = a
		// A shadow activity's buys are decided against its shadow copy.
		c := a.ShadowOrSelf()
		byID[c.ID] = c
		p.stateFor(c).used.Store(time.Now().Unix())
	}
	if prev := p.byID.Swap(&byID); prev != nil && p.fair.held.Load() > 0 && fairTimingChanged(*prev, byID) {
		p.fair.wakeToReslot() // after the store: the woken read the new config
	}
	// The states of the activities this config replaced go now: each
	// reload parses new *config.Activity values, and a replaced one's
	// state was refreshed on every pass until unused for 600 s (red-team
	// rr14: one dead state per reload). A buy still in flight with the old
	// activity keeps its *actState; one that asks again gets a new one.
	p.actsMu.Lock()
	if old := p.acts.Load(); old != nil {
		next := make(map[*config.Activity]*actState, len(byID))
		for k, v := range *old {
			if byID[k.ID] == k {
				next[k] = v
			}
		}
		p.acts.Store(&next)
	}
	p.actsMu.Unlock()
}

// fairTimingChanged reports whether a fair-started activity of prev is gone
// from next or has another start, fair_start or spread there.
func fairTimingChanged(prev, next map[string]*config.Activity) bool {
	for id, o := range prev {
		if o.FairStart <= 0 {
			continue
		}
		a := next[id]
		if a == nil || !o.Start.Equal(a.Start) || o.FairStart != a.FairStart || o.FairStartSpread != a.FairStartSpread {
			return true
		}
	}
	return false
}

// limiters are the three local limiters of one config.
type limiters struct {
	cfg              config.Limits
	ip, device, user *Limiter
	// public holds the proxy's public endpoints (reservation look-ups,
	// activity state, time) to per_ip, in buckets of their own so a buyer's
	// countdown polling does not spend the tokens of their buy.
	public *Limiter
	// shadow holds the buckets of shadow activities' decisions: the same
	// limits, counted apart (a buyer's shadowed buys must not refuse their
	// real ones). Itself when no activity is in shadow mode.
	shadow *limiters
}

// AllowPublic takes a token of the per-IP limit of the public endpoints
// for ip at nowNs; when refused, wait is how long until the next token.
func (p *Pipeline) AllowPublic(ip netip.Addr, nowNs int64) (bool, time.Duration) {
	l := p.limits.Load()
	if l == nil {
		return true, 0
	}
	return l.public.AllowAddr(l.client(ip), nowNs)
}

// AllowIP takes n tokens (at most the burst) of the buys' per-IP limit for
// ip at nowNs (of the shadow activities' buckets with shadow), before
// admission (which takes its own): the proxy spends one per signature check
// on a bearer token it has not verified yet (a kid-less token is checked
// against every key of its family: red team rte), as a session look-up
// spends one, so one address cannot buy signature checks faster than its
// rate.
func (p *Pipeline) AllowIP(ip netip.Addr, nowNs int64, shadow bool, n int) (bool, time.Duration) {
	l := p.limits.Load()
	if l == nil {
		return true, 0
	}
	if shadow {
		l = l.shadow // a shadowed buy never spends a real one's budget
	}
	return l.ip.AllowAddrN(l.client(ip), nowNs, n)
}

// client is the per-IP limiter's key for a: the address cut to the
// configured prefix (an IPv6 subscriber owns a /64: rotating the interface
// id must not buy new buckets).
func (l *limiters) client(a netip.Addr) netip.Addr {
	bits := l.cfg.IPv4Prefix
	if a.Is6() {
		bits = l.cfg.IPv6Prefix
	}
	if bits <= 0 || bits >= a.BitLen() {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}

// Run refreshes the local snapshots until ctx ends: activity flags (pause,
// ready, shards), per-SKU sold-out marks, eligibility lists and blocklists;
// and, with limits.fleet, beats in the fleet's roll call (fleet.go).
// Until Run is called, Decide reads flags from Redis on every request.
func (p *Pipeline) Run(ctx context.Context) {
	if fs, ok := p.store.(FleetStore); ok {
		done := make(chan struct{})
		go func() { defer close(done); p.runFleet(ctx, fs) }()
		defer func() { <-done }() // left the roll call before Run returns
	}
	if cs, ok := p.store.(ClockStore); ok {
		done := make(chan struct{})
		go func() { defer close(done); p.runClock(ctx, cs) }()
		defer func() { <-done }()
	}
	if p.ts == nil {
		<-ctx.Done()
		return
	}
	p.running.Store(true)
	defer p.running.Store(false)
	every := p.refreshEvery
	var wake <-chan struct{}
	if inv, ok := p.store.(Invalidator); ok && p.refreshEvery == RefreshEvery {
		wake, every = inv.Invalidations(), IdleRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}

// refresh is one pass of the refresher.
func (p *Pipeline) refresh(ctx context.Context) {
	now := time.Now()
	if m := p.acts.Load(); m != nil {
		var stale []*config.Activity
		for a, st := range *m {
			if now.Unix()-st.used.Load() > 600 {
				stale = append(stale, a)
				continue
			}
			p.refreshActivity(ctx, st, now)
		}
		if len(stale) > 0 {
			p.prune(stale)
		}
	}
	p.refreshBlocks(ctx, now)
}

func (p *Pipeline) prune(gone []*config.Activity) {
	p.actsMu.Lock()
	defer p.actsMu.Unlock()
	old := p.acts.Load()
	next := make(map[*config.Activity]*actState, len(*old))
	for k, v := range *old {
		next[k] = v
	}
	for _, a := range gone {
		delete(next, a)
	}
	p.acts.Store(&next)
}

func (p *Pipeline) refreshActivity(ctx context.Context, st *actState, now time.Time) {
	a := st.a
	epoch := p.epoch()
	f, err := p.store.Flags(ctx, a.ID)
	if err != nil {
		st.flags.Store(nil) // Decide falls back to asking Redis, and fails there
		p.log.Debug("refresh flags", zap.String("activity", a.ID), zap.Error(err))
		return
	}
	if sb, ok := p.ts.(SoldOutBatcher); ok && f.Ready && f.Shards > 0 {
		// One batch for the SKUs whose marks may have changed, none for
		// the rest: a pass costs an atomic load per SKU, not a read of
		// every shard's flag of every SKU (red team cat16).
		if err := sb.SoldOutMany(ctx, a.ID, st.ids, f.Shards, st.marks); err != nil {
			st.flags.Store(nil)
			return
		}
		for i, id := range st.ids {
			k := st.skus[id]
			k.transit.Store(st.marks[i].Transit) // before soldOut: never SOLD_OUT beside a mark just read
			k.soldOut.Store(st.marks[i].Out)
		}
	} else if f.Ready && f.Shards > 0 {
		for id, k := range st.skus {
			out, err := p.ts.SoldOut(ctx, a.ID, id, f.Shards)
			if err != nil {
				st.flags.Store(nil)
				return
			}
			k.soldOut.Store(out)
		}
	} else {
		// No stock in Redis (never preheated, expired, or a Redis that
		// restarted empty): marks from before mean nothing now.
		for _, k := range st.skus {
			k.soldOut.Store(false)
			k.transit.Store(false)
		}
		clear(st.marks)
	}
	if a.EligibleOnly {
		v, err := p.ts.EligibleVersion(ctx, a.ID)
		if err == nil && (v != st.eligVer || st.elig.Load() == nil) {
			if m, err := p.ts.Eligible(ctx, a.ID, now); err == nil {
				mm := members(m)
				st.elig.Store(&mm)
				st.eligVer = v
			}
		}
	}
	st.flags.Store(&flagSnap{f: f, at: now, epoch: epoch})
}

func (p *Pipeline) refreshBlocks(ctx context.Context, now time.Time) {
	v, err := p.ts.BlockVersion(ctx)
	if err != nil {
		return // keep the last lists: a Redis outage refuses buys anyway
	}
	cut4, cut6 := 0, 0
	if l := p.limits.Load(); l != nil {
		cut4, cut6 = l.cfg.IPv4Prefix, l.cfg.IPv6Prefix
	}
	if cur := p.blocks.Load(); cur != nil && cur.ver == v && cur.cut4 == cut4 && cur.cut6 == cut6 {
		return
	}
	next := &blockSets{ver: v, ip: map[netip.Prefix]int64{}, cut4: cut4, cut6: cut6}
	for _, kind := range store.BlockKinds {
		m, err := p.ts.Blocklist(ctx, kind, now)
		if err != nil {
			return
		}
		switch kind {
		case store.BlockIP:
			seen4, seen6 := map[int]bool{}, map[int]bool{}
			for s, exp := range m {
				pf, ok := blockPrefix(s, cut4, cut6)
				if !ok {
					continue
				}
				if old, ok := next.ip[pf]; !ok || exp > old {
					next.ip[pf] = exp
				}
				if pf.Addr().Is4() {
					seen4[pf.Bits()] = true
				} else {
					seen6[pf.Bits()] = true
				}
			}
			for n := range seen4 {
				next.bits4 = append(next.bits4, n)
			}
			for n := range seen6 {
				next.bits6 = append(next.bits6, n)
			}
			slices.Sort(next.bits4)
			slices.Sort(next.bits6)
		case store.BlockDevice:
			next.device = m
		case store.BlockUser:
			next.user = m
		}
	}
	p.blocks.Store(next)
}

// flagsFor returns the activity's flags from the snapshot when fresh, else
// from Redis (client-side cached), as before the refresher existed.
func (p *Pipeline) flagsFor(ctx context.Context, st *actState) (store.Flags, bool, error) {
	if p.running.Load() {
		if s := st.flags.Load(); s != nil && time.Since(s.at) < staleAfter && s.epoch == p.epoch() {
			return s.f, true, nil
		}
	}
	f, err := p.store.Flags(ctx, st.a.ID)
	return f, false, err
}

// memoKey is the local idempotency memo's key for a request id.
func memoKey(act, user, rid string) string { return act + "\x00" + user + "\x00" + rid }
