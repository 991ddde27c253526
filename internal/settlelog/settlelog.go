// Package settlelog writes the lines an operator must read about a
// confirm that found no pending reservation to confirm: the shop holds an
// order that the stock does not count. Sync winners (proxy) and queue
// workers (reservation) write the same lines, each at most one a second per
// kind (a forced preheat or a lost Redis can make every confirm of a wave
// one of them), with how many were held back since the last.
package settlelog

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Confirms logs what a confirm's reply says about an order beside the
// stock. The zero value logs nothing; build it with New.
type Confirms struct {
	log            *zap.Logger
	released, gone gate
}

// New returns a Confirms writing to log.
func New(log *zap.Logger) *Confirms { return &Confirms{log: log} }

// Settled notes the reply code of a confirm of tok (the token's string):
// Released (the unit is back on sale while the shop holds its order) and
// Unknown (no record: a forced preheat, keys expired or a Redis that lost
// its data since the reserve; the order is counted nowhere) are logged,
// with the token's activity and SKU. Anything else costs nothing.
func (c *Confirms) Settled(who, tok string, code lua.Code) {
	if c == nil || c.log == nil {
		return
	}
	var g *gate
	var msg string
	switch code {
	case lua.Released:
		g, msg = &c.released, ": the shop confirmed a reservation that was already released: the shop holds an order for stock back on sale"
	case lua.Unknown:
		g, msg = &c.gone, ": the shop confirmed a reservation whose record is gone (a forced preheat, keys expired, a Redis that lost its data): the shop holds an order that no stock counter holds"
	default:
		return
	}
	ok, held := g.allow(time.Now())
	if !ok {
		return
	}
	t, _ := store.ParseToken(tok) // the proxy's own token; zero fields if not
	c.log.Error(who+msg, zap.String("activity", t.Activity), zap.String("sku", t.SKU), zap.String("token", tok),
		zap.Int64("held_back_since_last_line", held))
}

// gate lets one line a second through and counts the ones it holds back.
type gate struct {
	last atomic.Int64 // unix ns of the last line let through
	held atomic.Int64 // lines held back since
}

func (g *gate) allow(now time.Time) (bool, int64) {
	n, last := now.UnixNano(), g.last.Load()
	if n-last >= int64(time.Second) && g.last.CompareAndSwap(last, n) {
		return true, g.held.Swap(0)
	}
	g.held.Add(1)
	return false, 0
}
