package store

import (
	"context"
	"sync"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// ConfirmItem is one reservation for ConfirmMany.
type ConfirmItem struct {
	Token   Token
	Shards  int
	OrderID string
}

// MaxConfirmBatch bounds the reservations one confirmbatch.lua call takes.
const MaxConfirmBatch = 256

// ConfirmMany confirms items as Confirm would, each once: the items of one
// SKU's shard in one script call (confirmbatch.lua), the calls of several
// shards pipelined. codes[i] (valid where errs[i] is nil) is what Confirm
// would have answered for items[i]; a call Redis did not answer leaves
// errs[i] set for its items, which may or may not be confirmed (confirming
// again is harmless).
func (s *Store) ConfirmMany(ctx context.Context, items []ConfirmItem) (codes []lua.Code, errs []error) {
	codes, errs = make([]lua.Code, len(items)), make([]error, len(items))
	c, err := s.Client()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return codes, errs
	}
	type group struct {
		idx  []int
		keys []string
		args []string
	}
	var groups []*group
	byStock := make(map[string]*group)
	for i, it := range items {
		if it.Token.Shard >= it.Shards || it.Token.Shard < 0 {
			codes[i] = lua.Unknown
			continue
		}
		if it.Token.SKU == BundleSKU {
			// A bundle's items are on several SKUs' stock: its own script.
			codes[i], errs[i] = s.Confirm(ctx, it.Token, it.Shards, it.OrderID)
			continue
		}
		k, err := s.skuKeys(ctx, it.Token.Activity, it.Token.SKU, it.Shards)
		if err != nil {
			errs[i] = err
			continue
		}
		sk := &k.Shards[it.Token.Shard]
		g := byStock[sk.Stock]
		if g == nil || len(g.idx) == MaxConfirmBatch {
			g = &group{keys: []string{sk.Stock, sk.Res, sk.Pending}}
			byStock[sk.Stock] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.args = append(g.args, it.Token.Field(), sanitize(it.OrderID))
	}
	if len(groups) == 0 {
		return codes, errs
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	run := func(g *group) {
		// Exec, not ExecMulti: ExecMulti loads the script on every node
		// on every call; Exec sends EVALSHA (EVAL once on NOSCRIPT).
		arr, err := s.confirmMany.Exec(cctx, c, g.keys, g.args).ToArray()
		if err == nil && len(arr) != len(g.idx) {
			err = ErrInvalidResponse
		}
		for n, i := range g.idx {
			if err != nil {
				errs[i] = wrap(err)
				continue
			}
			v, e := arr[n].AsInt64()
			if e != nil {
				errs[i] = ErrInvalidResponse
				continue
			}
			codes[i] = lua.Code(v)
		}
	}
	if len(groups) == 1 {
		run(groups[0])
		return codes, errs
	}
	// Shards live on different nodes (or connections): in parallel.
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(g)
		}()
	}
	wg.Wait()
	return codes, errs
}
