// Package admission decides every buy request, cheapest check first: the
// activity window and SKU whitelist from config, the kill switch and
// readiness from client-side-cached flags, then one atomic Redis script.
// It knows no HTTP: the proxy hands it a Request and renders its Decision.
package admission

import (
	"context"
	"errors"
	"net/netip"
	"time"

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
}

// retryAfterDefault is what buyers are told to wait on a retryable refusal
// with no better estimate.
const retryAfterDefault = time.Second

// Pipeline runs the admission stages in order.
type Pipeline struct {
	store Store
	now   func() time.Time
	m     *metrics.Metrics
	log   *zap.Logger

	scriptObs prometheus.Observer
}

// New builds a Pipeline. now is the server clock (time.Now outside tests).
func New(s Store, m *metrics.Metrics, log *zap.Logger, now func() time.Time) *Pipeline {
	if now == nil {
		now = time.Now
	}
	return &Pipeline{store: s, now: now, m: m, log: log, scriptObs: m.ScriptLatency.WithLabelValues("reserve")}
}

// Decide runs every stage for one request. It never blocks longer than the
// Redis command timeout per script call.
func (p *Pipeline) Decide(ctx context.Context, r *Request) Decision {
	a := r.Activity
	now := p.now()
	if now.Before(a.Start) {
		return p.refuse("window", NotStarted, 0)
	}
	if !now.Before(a.End) {
		return p.refuse("window", Ended, 0)
	}
	if a.SKU(r.SKU) == nil {
		return p.refuse("whitelist", UnknownItem, 0)
	}
	if r.Qty < 1 || r.Qty > a.MaxQty {
		return p.refuse("request", BadRequest, 0)
	}
	flags, err := p.store.Flags(ctx, a.ID)
	if err != nil {
		return p.storeDown(err)
	}
	if !flags.Ready || flags.Shards <= 0 {
		return p.refuse("flags", NotReady, retryAfterDefault)
	}
	if flags.Paused {
		return p.refuse("flags", Paused, retryAfterDefault)
	}
	t0 := time.Now()
	res, err := p.store.Reserve(ctx, store.ReserveRequest{
		Activity: a.ID, SKU: r.SKU, User: r.User, Qty: r.Qty, Limit: a.PerUserLimit,
		Shards: flags.Shards, Queue: a.Mode == config.ModeQueue, NowMs: now.UnixMilli(), ExpireAt: store.ExpireAt(a),
	})
	if err != nil {
		return p.storeDown(err)
	}
	if res.FromMemory {
		p.m.RedisSaved.WithLabelValues("sold_out").Inc()
	} else {
		p.scriptObs.Observe(time.Since(t0).Seconds())
	}
	if res.Moves > 0 {
		p.m.StockMoves.WithLabelValues(a.ID).Add(float64(res.Moves))
	}
	d := Decision{Token: res.Token, OrderID: res.OrderID, Shards: flags.Shards}
	switch res.Code {
	case lua.OK:
		d.Code = Admitted
		if a.Mode == config.ModeQueue {
			d.Code = Queued
		}
	case lua.Empty:
		d.Code = SoldOut
	case lua.Pending:
		d.Code = Pending
	case lua.Purchased:
		d.Code = AlreadyPurchased
	case lua.NotReady:
		d.Code, d.RetryAfter = NotReady, retryAfterDefault
	default:
		p.log.Error("reserve: unexpected script code", zap.Stringer("code", res.Code))
		return p.storeDown(store.ErrInvalidResponse)
	}
	return d
}

func (p *Pipeline) refuse(layer string, c Code, retry time.Duration) Decision {
	p.m.Rejections.WithLabelValues(layer, c.String()).Inc()
	return Decision{Code: c, RetryAfter: retry}
}

func (p *Pipeline) storeDown(err error) Decision {
	if !errors.Is(err, store.ErrUnavailable) {
		p.log.Error("redis error on the buy path", zap.Error(err))
	}
	p.m.Rejections.WithLabelValues("redis", StoreUnavailable.String()).Inc()
	return Decision{Code: StoreUnavailable, RetryAfter: retryAfterDefault}
}
