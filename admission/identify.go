package admission

import (
	"context"
	"errors"
	"time"

	"github.com/seckill-proxy/seckill-proxy/identity"
)

// Identifier turns a buyer's session credential into the shop's user id
// (identity.user.session); *identity.Session implements it. The proxy hands
// one over with each request, so a reload brings its own.
type Identifier interface {
	// Cached answers from memory only: ok is false when a look-up is needed.
	Cached(credential string) (user string, err error, ok bool)
	// Identify answers from memory or asks the shop, once for all
	// concurrent callers with the same credential. Its errors are
	// identity.ErrSessionRefused and identity.ErrSessionUnavailable.
	Identify(ctx context.Context, credential string) (string, error)
}

var _ Identifier = (*identity.Session)(nil)

// identify is the identity stage, between the local snapshot (stage 2) and
// the checks that need the user (stage 3). It refuses a session the shop
// does not know (401 UNAUTHENTICATED) or could not look up in time (503
// AUTH_UNAVAILABLE), reserving nothing. Cost: a cache read; on a miss one
// HTTP call to the shop's whoami, shared by every concurrent request of
// the same session, paid with the request's per-IP token taken now (before
// the look-up rather than at the per-IP stage), so one address cannot spend
// the look-up slots of everyone with made-up cookies faster than per_ip.
// On success r.User is the shop's user id and r.Verified is true.
func (p *Pipeline) identify(ctx context.Context, r *Request, now time.Time) (Decision, bool) {
	user, err, ok := r.Identify.Cached(r.Session)
	if !ok {
		if b := p.blocks.Load(); b != nil {
			if b.blockedIP(r.IP, now.UnixMilli()) {
				return p.refuse(rBlockedIP, 0), true
			}
		}
		if l := p.limits.Load(); l != nil {
			if r.Activity.IsShadowCopy() {
				l = l.shadow
			}
			if ok, wait := l.ip.AllowAddr(l.client(r.IP), now.UnixNano()); !ok {
				return p.refuse(rLimitIP, wait), true
			}
			r.IPSpent = true // the buy's own per-IP stage takes no second
		}
		user, err = r.Identify.Identify(ctx, r.Session)
	}
	switch {
	case err == nil:
		r.User, r.Verified = user, true
		return Decision{}, false
	case errors.Is(err, identity.ErrSessionUnavailable):
		return p.refuse(rAuthDown, retryAfterDefault), true
	default:
		return p.refuse(rUnauthenticated, 0), true
	}
}
