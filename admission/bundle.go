package admission

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// BundleStore is what bundles need of Redis; *store.Store implements it.
type BundleStore interface {
	ReserveBundle(ctx context.Context, q store.BundleRequest) (store.BundleResult, error)
	MakeDurableBundle(ctx context.Context, q store.BundleRequest, tok store.Token) (store.Durability, error)
}

var _ BundleStore = (*store.Store)(nil)

// checkBundle is step 1 for a bundle: every SKU sold by the activity
// (UNKNOWN_ITEM), at most store.MaxBundleItems items, each qty at least 1,
// no SKU twice, and the total within max_qty (BAD_REQUEST).
func (p *Pipeline) checkBundle(r *Request) (Decision, bool) {
	a := r.Activity
	if len(r.Items) < 1 || len(r.Items) > store.MaxBundleItems {
		return p.refuse(rBadQty, 0), true
	}
	var total int64
	for i, it := range r.Items {
		if a.SKU(it.SKU) == nil {
			return p.refuse(rUnknownItem, 0), true
		}
		if it.Qty < 1 {
			return p.refuse(rBadQty, 0), true
		}
		for _, o := range r.Items[:i] {
			if o.SKU == it.SKU {
				return p.refuse(rBadQty, 0), true
			}
		}
		total += it.Qty
	}
	if total > a.MaxQty {
		return p.refuse(rBadQty, 0), true
	}
	return Decision{}, false
}

// bundleSoldOut answers SOLD_OUT, naming the SKU, when the local snapshot
// marks any item's SKU sold out, unless the buyer may hold units of one of
// the items (HolderChecker, local memory): a bundle of theirs may have run
// after they were told STORE_UNAVAILABLE, its abort still to come (perhaps
// another instance's), and bundle.lua answers them PENDING, not SOLD_OUT
// beside the units it holds (red team bh). held reports that case: the
// buy goes on, as a single buy of a sold-out SKU that may hold does.
func (p *Pipeline) bundleSoldOut(ctx context.Context, st *actState, r *Request, shards int) (d Decision, out, held bool) {
	for _, it := range r.Items {
		if k := st.skus[it.SKU]; k != nil && k.soldOut.Load() {
			v, unknown := p.holderView(r)
			if p.bundleMayHold(ctx, v, shards) {
				return Decision{}, false, true
			}
			if unknown {
				for _, item := range r.Items { // bundle.lua sets the alias in every item's bitset
					held, err := p.mayHoldAlias(ctx, r, item.SKU, shards)
					if err != nil {
						return p.storeDown(err), true, false
					}
					if held {
						return Decision{}, false, true
					}
				}
			}
			if k.transit.Load() || p.inTransit(ctx, r.Activity.ID, it.SKU, shards) {
				return p.storeDown(store.ErrUnavailable), true, false // §54, §58
			}
			d := p.refuse(rSoldOut, 0)
			d.Short = it.SKU
			return d, true, false
		}
	}
	return Decision{}, false, false
}

// bundleMayHold is mayHold for a bundle: any of its items' SKUs.
func (p *Pipeline) bundleMayHold(ctx context.Context, r *Request, shards int) bool {
	h, ok := p.ts.(HolderChecker)
	if !ok {
		return false
	}
	for _, it := range r.Items {
		if h.MayHold(ctx, r.Activity.ID, it.SKU, shards, r.User) {
			return true
		}
	}
	return false
}

// reserveBundle is step 5 for a bundle: bundle.lua on the buyer's home shard.
func (p *Pipeline) reserveBundle(ctx context.Context, r *Request, flags store.Flags, now time.Time) Decision {
	a := r.Activity
	bs, ok := p.store.(BundleStore)
	if !ok {
		return p.storeDown(store.ErrUnavailable)
	}
	t0 := time.Now()
	q := store.BundleRequest{
		Activity: a.ID, User: r.User, Items: r.Items, Limit: a.PerUserLimit, Shards: flags.Shards,
		NowMs: now.UnixMilli(), ExpireAt: store.ExpireAt(a), Alias: r.holderAlias(),
	}
	res, err := bs.ReserveBundle(ctx, q)
	if err != nil {
		return p.storeDown(err)
	}
	if res.FromMemory {
		p.refusals[rSoldOut].saved.Inc()
	} else {
		p.scriptObs.Observe(time.Since(t0).Seconds())
	}
	if res.Moves > 0 {
		p.m.StockMoves.WithLabelValues(a.ID).Add(float64(res.Moves))
	}
	d := Decision{Token: res.Token, OrderID: res.OrderID, Shards: flags.Shards, Stamp: now}
	switch res.Code {
	case lua.OK:
		if p.dur != nil {
			if refused, no := p.makeDurableBundle(ctx, bs, q, res.Token); no {
				return refused
			}
		}
		d.Code = Admitted
	case lua.Empty:
		d.Code, d.Short = SoldOut, res.Short
	case lua.Pending:
		d.Code = Pending
	case lua.Purchased:
		d.Code = AlreadyPurchased
	case lua.NotReady:
		d.Code, d.RetryAfter = NotReady, retryAfterDefault
	default:
		p.log.Error("bundle: unexpected script code", zap.Stringer("code", res.Code))
		return p.storeDown(store.ErrInvalidResponse)
	}
	return d
}

// makeDurableBundle is makeDurable for a bundle that won (durable.go).
func (p *Pipeline) makeDurableBundle(ctx context.Context, bs BundleStore, q store.BundleRequest, tok store.Token) (Decision, bool) {
	dc := p.dur
	t0 := time.Now()
	res, err := bs.MakeDurableBundle(ctx, q, tok)
	dc.wait.Observe(time.Since(t0).Seconds())
	if int(res) < len(dc.results) {
		dc.results[res].Inc()
	}
	if err != nil {
		if now, last := time.Now().UnixNano(), dc.lastLog.Load(); now-last > int64(time.Second) && dc.lastLog.CompareAndSwap(last, now) {
			p.log.Warn("bundle winner not acknowledged by the replicas", zap.String("token", tok.String()),
				zap.Stringer("result", res), zap.Error(err))
		}
	}
	if res == store.DurableRefused {
		return p.refuse(rNotDurable, retryAfterDefault), true
	}
	return Decision{}, false
}
