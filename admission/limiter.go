package admission

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter is a set of per-key token buckets (per IP, device or user) in a
// fixed amount of memory. It is not a cache that may drop writes: every
// key's bucket is found or placed by the time Allow returns, and eviction
// is decided by the limiter itself, so a hot key cannot escape its limit
// under a flood of distinct keys (see victim).
//
// Buckets are GCRA: one int64 per key, the "theoretical arrival time" (TAT)
// in ns. A request at now is allowed when max(TAT, now) + interval <= now +
// burst*interval, and then moves TAT to max(TAT, now) + interval. TAT <= now
// means the bucket is full, exactly like a key never seen.
//
// The table is set-associative: a key hashes to one set of ways; sets are
// guarded by striped mutexes. Memory is sets*ways*16 bytes, fixed at New.
type Limiter struct {
	// p is the rate: swapped whole by SetRate (a fleet share changing)
	// while requests are decided, so it is read once per request.
	p     atomic.Pointer[limParams]
	seed  maphash.Seed
	sets  []limSet
	mask  uint64
	locks [limLocks]limLock
}

// limParams are a bucket's rate and depth, in ns.
type limParams struct {
	interval int64 // ns per token
	tau      int64 // burst*interval: how far TAT may run ahead of now
}

func newLimParams(rate, burst float64) *limParams {
	// Computed in float and capped before the conversions: a float beyond
	// int64 converts to an arbitrary value (on amd64 the most negative),
	// so a tiny rate (a fleet share of a small one) came out as one token
	// per nanosecond, no limit at all, and a deep bucket as a burst of 1.
	interval := min(float64(time.Second)/rate, maxLimDepth)
	if !(interval >= 1) {
		interval = 1
	}
	tau := min(burst*interval, maxLimDepth)
	return &limParams{interval: int64(interval), tau: max(int64(tau), int64(interval))}
}

// maxLimDepth caps a bucket's interval and depth (ns): about a century,
// which is "never refills" to anyone, and keeps now + tau inside int64.
const maxLimDepth = float64(100 * 365 * 24 * time.Hour)

const (
	limWays  = 8
	limLocks = 256
)

type limEntry struct {
	key uint64 // hash of the identity; 0 = empty way
	tat int64  // ns
}

type limSet [limWays]limEntry

// limLock is padded to a cache line so neighbouring stripes don't contend.
// hi is the latest now the stripe has decided at (see allow).
type limLock struct {
	sync.Mutex
	hi int64
	_  [48]byte
}

// limLag is how far behind its stripe's latest time a request may be and
// still be taken as late (it read the clock, then waited for the CPU or the
// lock) rather than as the host's clock stepping back.
const limLag = int64(time.Second)

// NewLimiter builds a limiter of rate per second and burst, holding at least
// capacity keys (rounded up to a power of two of sets). rate <= 0 means no
// limit (nil is returned, and a nil *Limiter allows everything).
func NewLimiter(rate float64, burst int, capacity int) *Limiter {
	if rate <= 0 || burst < 1 {
		return nil
	}
	nsets := 1
	for nsets*limWays < capacity {
		nsets <<= 1
	}
	l := &Limiter{
		seed: maphash.MakeSeed(),
		sets: make([]limSet, nsets),
		mask: uint64(nsets - 1),
	}
	l.p.Store(newLimParams(rate, float64(burst)))
	return l
}

// SetRate changes the rate (per second, > 0) and burst (tokens, at least 1;
// fractions allowed: a fleet share of a burst) of every bucket at once,
// keeping each key's state. The state is a time (TAT): a key that owed d ns
// still owes d ns, up to the new depth (burst*interval: a shrinking fleet
// raises this instance's share and shortens it, and debt beyond it is
// dropped, the key drained as far as it can be), and a full bucket stays
// full. Buckets are not rebuilt, so a hot key keeps its debt across a
// change of fleet size; the cost is one atomic store.
func (l *Limiter) SetRate(rate, burst float64) {
	if l == nil || rate <= 0 {
		return
	}
	l.p.Store(newLimParams(rate, max(burst, 1)))
}

// Bytes is the limiter's table size, the bound of its memory.
func (l *Limiter) Bytes() int {
	if l == nil {
		return 0
	}
	return len(l.sets) * limWays * 16
}

// AllowString takes a token for key at now (ns); when refused, wait is how
// long until the next token.
func (l *Limiter) AllowString(key string, now int64) (ok bool, wait time.Duration) {
	if l == nil {
		return true, 0
	}
	return l.allow(maphash.String(l.seed, key), now, 1)
}

// AllowAddr is AllowString for an IP address, with no allocation.
func (l *Limiter) AllowAddr(a netip.Addr, now int64) (ok bool, wait time.Duration) {
	if l == nil {
		return true, 0
	}
	b := a.As16()
	return l.allow(maphash.Bytes(l.seed, b[:]), now, 1)
}

// AllowAddrN takes n tokens (n >= 1) for a at once, or none: work that
// costs n times a request's (a kid-less bearer token checked against n
// keys). n is capped at the burst, so work a bucket could never pay for at
// once is still possible at its rate.
func (l *Limiter) AllowAddrN(a netip.Addr, now int64, n int) (ok bool, wait time.Duration) {
	if l == nil {
		return true, 0
	}
	b := a.As16()
	return l.allow(maphash.Bytes(l.seed, b[:]), now, int64(max(n, 1)))
}

func (l *Limiter) allow(h uint64, now int64, n int64) (bool, time.Duration) {
	if h == 0 {
		h = 1 // 0 marks an empty way
	}
	p := l.p.Load()
	idx := h & l.mask
	mu := &l.locks[idx%limLocks]
	mu.Lock()
	own := now // the request's clock: its wait is counted from it
	// A request whose now is behind the stripe's latest is, up to limLag,
	// late (it read the clock before one decided already) and is decided at
	// the latest time: were it decided at its own now, the clamp below would
	// forgive the key the lag on every late request (red team rv16: twice
	// the rate). Further behind, the host's clock stepped back, and the
	// stripe's time follows it.
	if now < mu.hi && mu.hi-now <= limLag {
		now = mu.hi
	} else {
		mu.hi = now
	}
	set := &l.sets[idx]
	e := l.find(set, h, now)
	// TAT never runs more than tau ahead of now, unless now went back: the
	// host's clock stepped back (an NTP step, a date set by hand: more than
	// limLag, above) or the rate went up. Taken as it is, a step back of a
	// minute would refuse every key used before it for a minute; from now +
	// tau the key is drained, the most it could be (kept, so the next token
	// comes one interval later by the new clock).
	tat := max(e.tat, now)
	if tat > now+p.tau {
		tat, e.tat = now+p.tau, now+p.tau
	}
	cost := p.interval
	if n > 1 {
		// Capped at the burst (tau/interval tokens): never overflows.
		cost = min(n, max(p.tau/p.interval, 1)) * p.interval
	}
	next := tat + cost
	if next-now > p.tau {
		mu.Unlock()
		// From own, not hi: after a step back under limLag the token
		// comes hi-own later by the request's (the new) clock; for a late
		// request the difference is its lag, a few µs or ms.
		return false, time.Duration(next - p.tau - own)
	}
	e.tat = next
	mu.Unlock()
	return true, 0
}

// find returns key h's entry in set, placing it when absent. A placed entry
// starts full (TAT = now), the same as a key never seen.
//
// victim choice, and why a hot key stays put: the way evicted is an empty
// one, else one whose bucket is full again (TAT <= now: evicting it loses
// nothing), else the one with the smallest TAT, i.e. the least debt, the
// bucket closest to full. A newcomer, after its first request, has TAT =
// now + interval. A key being refused has TAT > now + tau - interval =
// now + (burst-1)*interval. So for burst >= 2 a refused (hot) key always
// holds more debt than any one-off key, and one-off keys evict each other,
// never it: it can be pushed out only when every other way of its set holds
// a key that is itself refused (8 hot keys hashed to one set). With
// burst = 1 a newcomer may tie with a refused key; the hot key would then
// restart with a full bucket of 1 token.
func (l *Limiter) find(set *limSet, h uint64, now int64) *limEntry {
	var v *limEntry
	for i := range set {
		e := &set[i]
		if e.key == h {
			return e
		}
		switch {
		case v == nil:
			v = e
		case v.key == 0 || v.tat <= now:
			// already an empty or full way: nothing to lose
		case e.key == 0 || e.tat < v.tat:
			v = e
		}
	}
	v.key, v.tat = h, now
	return v
}
