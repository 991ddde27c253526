package store

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Bundles (issue 13 §3, seed 002 §4.3): several SKUs of one activity
// reserved for one buyer all or none, by lua/bundle.lua on the buyer's home
// shard (every SKU's keys of shard s share the shard's hash tag, so one
// script sees them all). A bundle is one reservation: its token's SKU is
// BundleSKU, its record is reserve.lua's with qty the bundle's total units,
// and its items are kept next to it in the shard's res hash under
// "<field>:i" ("a:1,b:2"). Confirm, Release and their fenced forms route
// bundle tokens to bundleconfirm.lua and bundlerelease.lua, which act on
// every item at once.

// BundleSKU is the SKU part of a bundle's token ("<act>.*.<shard>.<id>"):
// no configured SKU can be named so (ids match [A-Za-z0-9_-]).
const BundleSKU = "*"

// MaxBundleItems bounds the items of one bundle: each costs three keys
// (stock, out, holders) and four arguments of bundle.lua, and a steal round trip when its SKU's
// units are on another shard.
const MaxBundleItems = 16

// BundleItem is one line of a bundle.
type BundleItem struct {
	SKU string
	Qty int64
}

// FormatItems is the items' text form, "a:1,b:2": the record's, and
// X-Seckill-Items'.
func FormatItems(items []BundleItem) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(it.SKU)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(it.Qty, 10))
	}
	return b.String()
}

// ParseItems reads FormatItems' form.
func ParseItems(s string) ([]BundleItem, error) {
	if s == "" {
		return nil, ErrInvalidResponse
	}
	parts := strings.Split(s, ",")
	items := make([]BundleItem, 0, len(parts))
	for _, p := range parts {
		sku, q, ok := strings.Cut(p, ":")
		n, err := strconv.ParseInt(q, 10, 64)
		if !ok || sku == "" || err != nil || n < 1 {
			return nil, ErrInvalidResponse
		}
		items = append(items, BundleItem{SKU: sku, Qty: n})
	}
	return items, nil
}

// BundleRequest is one buyer asking for every item of a bundle.
type BundleRequest struct {
	Activity string
	User     string
	Items    []BundleItem
	Limit    int64 // per-user limit: counts every unit of every item
	Shards   int
	NowMs    int64
	ExpireAt int64
	Alias    string // the buyer's holder alias (ReserveRequest.Alias)
}

// BundleResult is what Redis decided for a bundle.
type BundleResult struct {
	Code    lua.Code // OK, Empty (Short names the SKU), Pending, Purchased, NotReady
	Token   Token    // the bundle's reservation (OK), or one the buyer holds (Pending, Purchased; zero: none known)
	OrderID string   // Purchased
	// Short is the SKU that had too few units (Empty).
	Short string
	// FromMemory: answered from client-side cached sold-out flags.
	FromMemory bool
	Moves      int
}

var (
	bundleScript         = rueidis.NewLuaScript(lua.Bundle)
	bundleReleaseScript  = rueidis.NewLuaScript(lua.BundleRelease)
	bundleConfirmScript  = rueidis.NewLuaScript(lua.BundleConfirm)
	fencedBundleRelease  = rueidis.NewLuaScript(lua.FencedBundleRelease)
	fencedBundleConfirm  = rueidis.NewLuaScript(lua.FencedBundleConfirm)
	errBundleItemsBroken = fmt.Errorf("%w: bundle items unreadable", ErrInvalidResponse)
)

// checkBundle validates a bundle's shape (the proxy checks it first and
// answers BAD_REQUEST; this is the store's backstop).
func checkBundle(items []BundleItem, limit int64) error {
	if len(items) < 1 || len(items) > MaxBundleItems {
		return fmt.Errorf("%w: a bundle has 1 to %d items, got %d", ErrBadRequest, MaxBundleItems, len(items))
	}
	var total int64
	for i, it := range items {
		if it.SKU == "" || strings.ContainsAny(it.SKU, ":,.*|") || it.Qty < 1 {
			return fmt.Errorf("%w: bundle item %q qty %d", ErrBadRequest, it.SKU, it.Qty)
		}
		for _, o := range items[:i] {
			if o.SKU == it.SKU {
				return fmt.Errorf("%w: sku %q twice in a bundle", ErrBadRequest, it.SKU)
			}
		}
		total += it.Qty
	}
	if total > limit {
		return fmt.Errorf("%w: bundle of %d units over the per-user limit %d", ErrBadRequest, total, limit)
	}
	return nil
}

// ReserveBundle reserves every item of q for q.User on the buyer's home
// shard, all or none, in one bundle.lua call. When an item's SKU lacks
// units there, units are moved from a donor shard of that SKU (stealFrom,
// as Reserve does) and the script runs again with the move to deposit;
// other buyers may take the deposit first, so it gives up (SOLD_OUT, Short
// the item) after 2×shards moves per item.
func (s *Store) ReserveBundle(ctx context.Context, q BundleRequest) (result BundleResult, rerr error) {
	if q.Shards < 1 {
		return BundleResult{}, fmt.Errorf("%w: shards %d", ErrBadRequest, q.Shards)
	}
	if err := checkBundle(q.Items, q.Limit); err != nil {
		return BundleResult{}, err
	}
	c, err := s.Client()
	if err != nil {
		return BundleResult{}, err
	}
	n := len(q.Items)
	ks := make([]*SKUKeys, n)
	for i, it := range q.Items {
		if ks[i], err = s.skuKeys(ctx, q.Activity, it.SKU, q.Shards); err != nil {
			return BundleResult{}, err
		}
	}
	// Not SOLD_OUT while units of an item's SKU may come back (transit.go,
	// fleetmark.go).
	defer func() {
		if rerr == nil && result.Code == lua.Empty {
			for _, k := range ks {
				if s.inTransit(k, result.FromMemory) || s.fleetMarked(ctx, c, k, result.FromMemory) {
					result, rerr = BundleResult{}, errInTransit
					return
				}
			}
		}
	}()
	home := HomeShard(q.User, q.Shards)
	if s.retry.Len() > 0 {
		if err := s.retry.RunNow(ctx, buyerKey(q.Activity, q.User)); err != nil {
			return BundleResult{}, err
		}
	}
	outs := make([][]bool, n)
	for i := range q.Items {
		if outs[i], err = s.outFlags(ctx, c, ks[i]); err != nil {
			return BundleResult{}, err
		}
		if allTrue(outs[i]) && !s.holdsAny(ctx, c, ks, home, q.User) {
			return BundleResult{Code: lua.Empty, Short: q.Items[i].SKU, FromMemory: true}, nil
		}
	}
	tok := Token{Activity: q.Activity, SKU: BundleSKU, Shard: home, ID: newID()}
	items := FormatItems(q.Items)
	hk := ks[0].Shards[home]
	keys := make([]string, 0, 4+3*n)
	keys = append(keys, hk.Users, hk.Res, hk.Pending, hk.MovesIn)
	args := make([]string, 0, 7+4*n)
	args = append(args, q.User, itoa(q.Limit), tok.Field(), itoa(q.NowMs), itoa(q.ExpireAt), items, strconv.Itoa(n))
	for i, it := range q.Items {
		sk := ks[i].Shards[home]
		keys = append(keys, sk.Stock, sk.Out)
		args = append(args, itoa(it.Qty), "0", "", "0")
	}
	// Every item's holders bitset last (bundle.lua KEYS[4+2n+i]): the
	// buyer's bit set in each, as reserve.lua sets it (red team bh).
	for i := range q.Items {
		keys = append(keys, ks[i].Shards[home].Holders)
	}
	if q.Alias != "" {
		args = append(args, q.Alias) // bundle.lua ARGV[8+4n]
	}
	var res BundleResult
	moves := make([]int, n)
	rechecks := 0 // looks at the flags again before SOLD_OUT after the donors were dry
	ends := 0     // end-game rounds (bundleLooksAgain)
	// lookAgain: the end game before an item is called gone; a new
	// round starts from scratch (no moves, no rechecks counted).
	lookAgain := func() bool {
		if !s.bundleLooksAgain(ctx, c, ks, outs, &ends) {
			return false
		}
		clear(moves)
		rechecks = 0
		return true
	}
	for {
		cctx, cancel := s.ctx(ctx)
		arr, err := bundleScript.Exec(cctx, c, keys, args).ToArray()
		cancel()
		if err != nil {
			err = wrap(err)
			s.abortBundleLater(err, q, ks, hk, tok, items, keys, args)
			return BundleResult{}, err
		}
		var code int64
		if len(arr) == 0 {
			return BundleResult{}, ErrInvalidResponse
		}
		if code, err = arr[0].AsInt64(); err != nil {
			return BundleResult{}, ErrInvalidResponse
		}
		switch lua.Code(code) {
		case lua.OK:
			return BundleResult{Code: lua.OK, Token: tok, Moves: res.Moves}, nil
		case lua.NotReady:
			return BundleResult{Code: lua.NotReady, Moves: res.Moves}, nil
		case lua.Aborted:
			return BundleResult{}, fmt.Errorf("%w: bundle %s was aborted", ErrUnavailable, tok)
		case lua.Pending, lua.Purchased:
			// A reservation the buyer holds (a bundle or a single buy):
			// pending or queued for PENDING, else the most recent. A
			// PURCHASED that knows of none held names none (a users hash
			// value of an older build whose last was given back).
			field, err := arr[1].ToString()
			last, ok := tokenOfField(q.Activity, home, field)
			if err == nil && field == "" && lua.Code(code) == lua.Purchased {
				last, ok = Token{}, true
			}
			if err != nil || !ok {
				return BundleResult{}, ErrInvalidResponse
			}
			r := BundleResult{Code: lua.Code(code), Token: last, Moves: res.Moves}
			if len(arr) >= 3 {
				r.OrderID, _ = arr[2].ToString()
			}
			return r, nil
		case lua.Empty:
			if len(arr) != 3 {
				return BundleResult{}, ErrInvalidResponse
			}
			idx, err1 := arr[1].AsInt64()
			rem, err2 := arr[2].AsInt64()
			if err1 != nil || err2 != nil || idx < 1 || int(idx) > n {
				return BundleResult{}, ErrInvalidResponse
			}
			i := int(idx) - 1
			it := q.Items[i]
			if moves[i] >= 2*q.Shards {
				// Every deposit went to other buyers first: all but gone.
				if lookAgain() {
					continue
				}
				return s.bundleEmptyOrPending(ctx, c, ks, home, q, it.SKU, res.Moves), nil
			}
			need := max(it.Qty-rem, 1)
			moved, moveID, gen, err := s.stealFrom(ctx, c, ks[i], outs[i], home, need,
				ReserveRequest{Activity: q.Activity, SKU: it.SKU, User: q.User, NowMs: q.NowMs, ExpireAt: q.ExpireAt})
			if err != nil {
				return BundleResult{}, err
			}
			if moved == 0 {
				// Every donor was dry when asked, by flags read before this
				// bundle's first run. Units of this SKU another bundle moved
				// onto its home shard and could not use (another item was
				// short there, or another buyer took it first) sit on a
				// shard those flags showed dry; its deposit reopened that
				// shard, and Redis's invalidation brings a fresh read: look
				// once more before saying SOLD_OUT, as Reserve does (red
				// team bh: 3 of 25 bundles left on sale after every buyer
				// was told SOLD_OUT, no stall involved).
				if rechecks < 2 && s.clientCache {
					rechecks++
					if fresh, err := s.outFlags(ctx, c, ks[i]); err == nil && !allTrue(fresh) {
						outs[i] = fresh
						continue
					}
				}
				if lookAgain() {
					continue
				}
				return s.bundleEmptyOrPending(ctx, c, ks, home, q, it.SKU, res.Moves), nil
			}
			moves[i]++
			res.Moves++
			at := 7 + 4*i
			args[at+1], args[at+2], args[at+3] = itoa(moved), moveID, itoa(gen)
		default:
			return BundleResult{}, ErrInvalidResponse
		}
	}
}

// bundleEndRounds bounds the end-game rounds of one bundle call
// (bundleLooksAgain): each waits a little longer, at random.
const bundleEndRounds = 3

// bundleEndSeen, when set (tests only), is told each end-game look's
// outcome: again true when every item was on sale somewhere.
var bundleEndSeen func(again bool)

// bundleLooksAgain is the end game of competing bundles (decisions §51
// "Left", §61). A bundle about to say SOLD_OUT has found the short item's
// donors dry; its own moves are all deposited by now. But near the end of
// a sale two bundles can chase each other's halves: X, homed on one shard
// with a there, steals b from Y's home while Y steals a from X's; each
// rerun finds the other item gone or in transit (on no shard, every flag
// of it set), each gives up, and the halves stay on two shards after
// every buyer heard SOLD_OUT. Every unit of theirs lands within a round
// trip, and a chase is a livelock of two calls in step: so before
// SOLD_OUT the call waits a few ms, at random and longer each round, and
// reads every item's flags again; if each item has a shard with units,
// it goes round again (steals, reruns) instead of answering, at most
// bundleEndRounds times. One call that runs alone takes a unit of every
// item (or finds one gone everywhere: SOLD_OUT, true then). No new write:
// only steal.lua and bundle.lua as before, so no unit is lost or made. A
// SKU sold out everywhere costs one wait and one flags read per item, and
// only on this path (bundles that reached the script and stole), never on
// the from-memory SOLD_OUT. ctx ends the wait (the caller's deadline).
func (s *Store) bundleLooksAgain(ctx context.Context, c rueidis.Client, ks []*SKUKeys, outs [][]bool, ends *int) bool {
	if *ends >= bundleEndRounds {
		return false
	}
	*ends++
	d := 2*time.Millisecond + time.Duration(mrand.Int64N(int64(4*time.Millisecond)<<(*ends-1)))
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
	}
	fresh := make([][]bool, len(ks))
	for i, k := range ks {
		var err error
		if fresh[i], err = s.outFlags(ctx, c, k); err != nil || allTrue(fresh[i]) {
			if bundleEndSeen != nil {
				bundleEndSeen(false)
			}
			return false // gone everywhere (or not known): SOLD_OUT
		}
	}
	copy(outs, fresh)
	if bundleEndSeen != nil {
		bundleEndSeen(true)
	}
	return true
}

// holdsAny reports whether user may hold units of one of a bundle's SKUs
// on their home shard (holds: the SKU's holders bitset, then the users
// field, from client-side cached memory): a bundle buyer of a sold-out SKU
// it says so of is answered by bundle.lua (PENDING for a late bundle whose
// abort is still to come), not SOLD_OUT from memory beside the units that
// bundle holds (red team bh). A check that cannot be read counts as "may
// hold" (red team chaos): the script decides, or the call fails
// STORE_UNAVAILABLE, never SOLD_OUT beside held units.
func (s *Store) holdsAny(ctx context.Context, c rueidis.Client, ks []*SKUKeys, home int, user string) bool {
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, k := range ks {
		if held, err := s.holds(cctx, c, k, home, user); held || err != nil {
			return true
		}
	}
	return false
}

// bundleEmptyOrPending is the answer to a bundle bundle.lua found short
// of short and no donor could fill: EMPTY (SOLD_OUT), unless the buyer
// may hold units of its SKUs and a reservation of theirs on the home
// shard (a bundle or a single buy) is still pending or queued: then
// PENDING with it. bundle.lua answers PENDING only at the limit; a buyer
// under it heard SOLD_OUT beside the units their own late bundle held
// (decisions §51, "a buyer below their limit"), as emptyOrPending does for
// single buys.
func (s *Store) bundleEmptyOrPending(ctx context.Context, c rueidis.Client, ks []*SKUKeys, home int, q BundleRequest, short string, moves int) BundleResult {
	empty := BundleResult{Code: lua.Empty, Short: short, Moves: moves}
	if !s.holdsAny(ctx, c, ks, home, q.User) {
		return empty
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	if tok, ok := s.inFlightOf(cctx, c, &ks[0].Shards[home], q.Activity, home, q.User); ok {
		return BundleResult{Code: lua.Pending, Token: tok, Moves: moves}
	}
	return empty
}

// abortBundleLater settles a bundle.lua call whose reply never came, as
// abortLater does for reserve.lua: the moves it carried are deposited
// (deposit.lua, idempotent by move id), then bundlerelease.lua in abort
// mode releases the bundle if the call ran, or leaves a tombstone so it
// takes nothing when it runs later.
func (s *Store) abortBundleLater(cause error, q BundleRequest, ks []*SKUKeys, hk ShardKeys, tok Token, items string, keys, args []string) {
	hasMove := false
	for i := range q.Items {
		hasMove = hasMove || args[7+4*i+2] != ""
	}
	if !mayHaveRun(cause) && !hasMove {
		return
	}
	n := len(q.Items)
	keys, args = append([]string(nil), keys...), append([]string(nil), args...)
	// Every item's SKU may get units back (transit.go).
	thens := make([]func(), len(ks))
	for i, k := range ks {
		thens[i] = s.holdTransit(k, -1)
	}
	then := func() {
		for _, f := range thens {
			f()
		}
	}
	s.retry.SubmitThen("abort", buyerKey(q.Activity, q.User), func(ctx context.Context) error {
		c, err := s.Client()
		if err != nil {
			return err
		}
		exp := itoa(q.ExpireAt)
		for i := 0; i < n; i++ {
			at := 7 + 4*i
			if args[at+2] == "" {
				continue
			}
			cctx, cancel := s.ctx(ctx)
			_, err := ints(s.deposit.Exec(cctx, c, []string{keys[4+2*i], keys[5+2*i], keys[3]},
				[]string{args[at+2], args[at+1], exp, args[at+3]}))
			cancel()
			if err != nil {
				return err
			}
		}
		// bundlerelease.lua's KEYS: users res pending epoch, then the items'
		// stock and out (not bundle.lua's holders after them).
		rk := append([]string{hk.Users, hk.Res, hk.Pending, hk.Epoch}, keys[4:4+2*n]...)
		cctx, cancel := s.ctx(ctx)
		defer cancel()
		r, err := ints(bundleReleaseScript.Exec(cctx, c, rk, []string{tok.Field(), abortReason,
			itoa(time.Now().UnixMilli()), "0", items, "1", q.User, exp}))
		if err != nil {
			return err
		}
		switch lua.Code(r[0]) {
		case lua.OK, lua.Aborted, lua.Same:
			return nil
		case lua.Confirmed:
			s.log.Warn("aborted bundle was already confirmed", zap.String("token", tok.String()))
			return nil
		default:
			return fmt.Errorf("abort bundle %s: %v", tok, lua.Code(r[0]))
		}
	}, then)
}

// bundleKeys reads a bundle reservation's items and builds the keys of its
// shard: the shared ones (users, res, pending, epoch, fence: any SKU's) and
// each item's stock and out. ok is false when there is no such bundle.
func (s *Store) bundleKeys(ctx context.Context, c rueidis.Client, t Token, shards int) (ShardKeys, []ShardKeys, string, bool, error) {
	hk, err := s.shardKeys(ctx, t.Activity, BundleSKU, shards, t.Shard)
	if err != nil {
		return ShardKeys{}, nil, "", false, err
	}
	cctx, cancel := s.ctx(ctx)
	items, err := c.Do(cctx, c.B().Hget().Key(hk.Res).Field(t.Field()+":i").Build()).ToString()
	cancel()
	if rueidis.IsRedisNil(err) {
		return hk, nil, "", false, nil
	}
	if err != nil {
		return ShardKeys{}, nil, "", false, wrap(err)
	}
	list, err := ParseItems(items)
	if err != nil || len(list) > MaxBundleItems {
		return ShardKeys{}, nil, "", false, errBundleItemsBroken
	}
	sks := make([]ShardKeys, len(list))
	for i, it := range list {
		if sks[i], err = s.shardKeys(ctx, t.Activity, it.SKU, shards, t.Shard); err != nil {
			return ShardKeys{}, nil, "", false, err
		}
	}
	return hk, sks, items, true, nil
}

// BundleItems returns a bundle reservation's items (nil when the token is
// no bundle's or names none).
func (s *Store) BundleItems(ctx context.Context, t Token, shards int) ([]BundleItem, error) {
	if t.SKU != BundleSKU || t.Shard < 0 || t.Shard >= shards {
		return nil, nil
	}
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	_, _, items, ok, err := s.bundleKeys(ctx, c, t, shards)
	if err != nil || !ok {
		return nil, err
	}
	return ParseItems(items)
}

// bundleTarget is what a bundle's confirm and release start from: the
// client, the home shard's keys and, while its record lists them, the
// items and their shards' keys (none, and items "", for no bundle or a
// tombstone: the script reads the record). ok is false for a token of no
// shard (answered lua.Unknown).
func (s *Store) bundleTarget(ctx context.Context, t Token, shards int) (c rueidis.Client, hk ShardKeys, sks []ShardKeys, items string, ok bool, err error) {
	if t.Shard < 0 || t.Shard >= shards {
		return nil, ShardKeys{}, nil, "", false, nil
	}
	if c, err = s.Client(); err != nil {
		return nil, ShardKeys{}, nil, "", false, err
	}
	hk, sks, items, found, err := s.bundleKeys(ctx, c, t, shards)
	if err != nil {
		return nil, ShardKeys{}, nil, "", false, err
	}
	if !found {
		sks, items = nil, ""
	}
	return c, hk, sks, items, true, nil
}

// bundleConfirm is confirmAs for a bundle token.
func (s *Store) bundleConfirm(ctx context.Context, t Token, shards int, orderID string, f *Fence) (lua.Code, error) {
	c, hk, sks, items, ok, err := s.bundleTarget(ctx, t, shards)
	if err != nil {
		return 0, err
	}
	if !ok {
		return lua.Unknown, nil
	}
	keys := []string{hk.Res, hk.Pending}
	for _, sk := range sks {
		keys = append(keys, sk.Stock)
	}
	args := []string{t.Field(), sanitize(orderID), items}
	return s.execTransition(ctx, c, bundleConfirmScript, fencedBundleConfirm, keys, args, f, hk)
}

// bundleRelease is releaseAs for a bundle token.
func (s *Store) bundleRelease(ctx context.Context, t Token, shards int, reason string, nowMs int64, pendingOnly bool, f *Fence) (lua.Code, error) {
	c, hk, sks, items, ok, err := s.bundleTarget(ctx, t, shards)
	if err != nil {
		return 0, err
	}
	if !ok {
		return lua.Unknown, nil
	}
	keys := []string{hk.Users, hk.Res, hk.Pending, hk.Epoch}
	for _, sk := range sks {
		keys = append(keys, sk.Stock, sk.Out)
	}
	args := []string{t.Field(), sanitize(reason), itoa(nowMs), queueFlag(pendingOnly), items, "0", "", "0"}
	return s.execTransition(ctx, c, bundleReleaseScript, fencedBundleRelease, keys, args, f, hk)
}

// MakeDurableBundle is MakeDurable for a bundle that won (tok): it waits
// for the replicas of the home shard's node (units moved from donors were
// checked onto theirs by stealFrom) and, when they do not acknowledge in
// time and on_timeout is refuse, releases the whole bundle before the
// buyer is answered (through the retrier, keyed by the buyer, when Redis
// does not answer the release).
func (s *Store) MakeDurableBundle(ctx context.Context, q BundleRequest, tok Token) (Durability, error) {
	if s.dur == nil {
		return DurableOff, nil
	}
	ok, _, err := s.WaitReplicas(ctx, tok, q.Shards, q.ExpireAt)
	if ok {
		return DurableOK, nil
	}
	if !s.DurableRefuses() {
		return DurableLate, err
	}
	job := func(ctx context.Context) error {
		code, err := s.bundleRelease(ctx, tok, q.Shards, durableReason, time.Now().UnixMilli(), true, nil)
		if err != nil {
			return err
		}
		switch code {
		case lua.OK, lua.Same, lua.Confirmed:
			return nil
		}
		return fmt.Errorf("release of not durable bundle %s: %v", tok, code)
	}
	if rerr := job(ctx); rerr != nil {
		if Retryable(rerr) && s.retry.Submit("abort", buyerKey(q.Activity, q.User), job) {
			return DurableRefused, err
		}
		return DurableRefused, errors.Join(err, rerr)
	}
	return DurableRefused, err
}
