package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Fleet shares of the per-IP, per-device and per-user limits (limits.fleet).
//
// Those buckets live in each instance's memory, so N instances behind a
// balancer that spreads a client's requests would let it through at N times
// the configured rate. Instead every instance beats into a roll call in
// Redis (store.FleetBeat) every FleetBeatEvery and enforces rate/N and
// burst/N (at least 1 token) of the N instances seen within FleetStale.
//
// Bound: a client spread over the fleet is admitted at most
// rate*T + burst over T seconds, plus one instance's share (rate/N*T' +
// burst/N) for the T' it takes the fleet to agree on a new N (at most
// FleetStale + FleetBeatEvery after an instance stops beating; one beat
// after one starts or leaves cleanly). A balancer that pins a client to one
// instance gives that client rate/N: set limits.fleet: false there.
//
// Redis down: the last N is kept (never 0, never a larger share than the
// last agreed one because of the outage itself).

// FleetBeatEvery is how often an instance beats and re-reads the fleet size.
const FleetBeatEvery = 500 * time.Millisecond

// FleetStale is how long an instance that stopped beating still counts.
const FleetStale = 1500 * time.Millisecond

// FleetStore is the roll call's Redis side; *store.Store implements it.
type FleetStore interface {
	FleetBeat(ctx context.Context, id string, stale time.Duration) (int, error)
	FleetLeave(ctx context.Context, id string) error
}

var _ FleetStore = (*store.Store)(nil)

// WithFleetTiming sets the heartbeat period and staleness (tests).
func WithFleetTiming(every, stale time.Duration) Option {
	return func(p *Pipeline) { p.fleetEvery, p.fleetStale = every, stale }
}

// WithInstanceID names this instance in the roll call (default: host,
// pid and a random suffix).
func WithInstanceID(id string) Option { return func(p *Pipeline) { p.instanceID = id } }

// FleetSize is the number of live instances this one shares its limits
// with (1 until the first heartbeat, and with limits.fleet: false).
func (p *Pipeline) FleetSize() int { return int(p.fleetN.Load()) }

func newInstanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// runFleet beats until ctx ends, then leaves the roll call.
func (p *Pipeline) runFleet(ctx context.Context, fs FleetStore) {
	t := time.NewTicker(p.fleetEvery)
	defer t.Stop()
	joined := false
	for {
		l := p.limits.Load()
		switch {
		case l != nil && l.cfg.Fleet:
			n, err := fs.FleetBeat(ctx, p.instanceID, p.fleetStale)
			if err != nil {
				// Keep the last N: an outage refuses buys at the script
				// anyway, and guessing 1 would multiply every share.
				p.log.Debug("fleet heartbeat", zap.Error(err))
				break
			}
			joined = true
			p.setFleetSize(n)
		case joined:
			// limits.fleet switched off by a reload: leave at once.
			p.leaveFleet(fs)
			joined = false
			p.setFleetSize(1)
		default:
			p.setFleetSize(1)
		}
		select {
		case <-ctx.Done():
			if joined {
				p.leaveFleet(fs)
			}
			return
		case <-t.C:
		}
	}
}

func (p *Pipeline) leaveFleet(fs FleetStore) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := fs.FleetLeave(ctx, p.instanceID); err != nil {
		p.log.Debug("fleet leave", zap.Error(err))
	}
}

// setFleetSize records n live instances and rescales the limiters when it
// changed.
func (p *Pipeline) setFleetSize(n int) {
	n = max(n, 1)
	p.m.FleetInstances.Set(float64(n))
	if int(p.fleetN.Load()) == n {
		return
	}
	p.limMu.Lock()
	defer p.limMu.Unlock()
	p.fleetN.Store(int64(n))
	if l := p.limits.Load(); l != nil {
		l.share(p.shareOf(l.cfg))
	}
}

// shareOf is the number of instances a config's limits are divided by.
func (p *Pipeline) shareOf(l config.Limits) int {
	if !l.Fleet {
		return 1
	}
	return int(max(p.fleetN.Load(), 1))
}

// newLimiters builds the limiters of a config, each already at this
// instance's share of the fleet.
func (p *Pipeline) newLimiters(l config.Limits, shadows bool) *limiters {
	mk := func() *limiters {
		return &limiters{
			cfg:    l,
			ip:     NewLimiter(l.PerIP.Rate, l.PerIP.Burst, p.limiterKeys),
			public: NewLimiter(l.PerIP.Rate, l.PerIP.Burst, p.limiterKeys),
			device: NewLimiter(l.PerDevice.Rate, l.PerDevice.Burst, p.limiterKeys),
			user:   NewLimiter(l.PerUser.Rate, l.PerUser.Burst, p.limiterKeys),
		}
	}
	ls := mk()
	ls.shadow = ls
	if shadows {
		ls.shadow = mk()
		ls.shadow.shadow = ls.shadow
	}
	ls.share(p.shareOf(l))
	return ls
}

// carryLimiters is newLimiters for a reload: a limiter whose key (the
// per-IP prefixes) and on/off state are unchanged keeps its buckets, only
// its rate and burst change (Limiter.SetRate), so a reload that changes
// one limit does not hand every client a full burst of the others
// (red-team rr14). cur may be nil.
func (p *Pipeline) carryLimiters(cur *limiters, l config.Limits, shadows bool) *limiters {
	next := p.newLimiters(l, shadows)
	if cur == nil || cur.cfg.IPv4Prefix != l.IPv4Prefix || cur.cfg.IPv6Prefix != l.IPv6Prefix {
		return next
	}
	carry := func(dst **Limiter, src *Limiter) {
		if *dst != nil && src != nil {
			*dst = src
		}
	}
	from := func(dst, src *limiters) {
		carry(&dst.ip, src.ip)
		carry(&dst.public, src.public)
		carry(&dst.device, src.device)
		carry(&dst.user, src.user)
	}
	from(next, cur)
	if next.shadow != next && cur.shadow != cur {
		from(next.shadow, cur.shadow)
	}
	next.share(p.shareOf(l))
	return next
}

// share sets every limiter to 1/n of its configured rate and burst (burst
// at least one token). Keys keep their state (Limiter.SetRate).
func (ls *limiters) share(n int) {
	if ls.shadow != ls {
		ls.shadow.share(n)
	}
	c, f := ls.cfg, float64(n)
	ls.ip.SetRate(c.PerIP.Rate/f, float64(c.PerIP.Burst)/f)
	ls.public.SetRate(c.PerIP.Rate/f, float64(c.PerIP.Burst)/f)
	ls.device.SetRate(c.PerDevice.Rate/f, float64(c.PerDevice.Burst)/f)
	ls.user.SetRate(c.PerUser.Rate/f, float64(c.PerUser.Burst)/f)
}
