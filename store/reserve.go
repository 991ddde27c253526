package store

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

var getenv = os.Getenv

// afterSteal, when set (tests only), runs once a steal has replied, before
// the reserve that deposits its units is written.
var afterSteal func()

// ReserveRequest is one buyer asking for units of one SKU.
type ReserveRequest struct {
	Activity string
	SKU      string
	User     string
	Qty      int64
	Limit    int64 // per-user limit
	Shards   int
	Queue    bool  // also write a stream entry for queue-mode workers
	NowMs    int64 // proxy clock, for the reservation's timestamp
	ExpireAt int64 // ms; every key the script creates expires then
	// Stock is the SKU's configured stock: it sizes the request-id bitset.
	Stock int64
	// RequestID is the buyer's idempotency key ("" = none): a repeat within
	// RequestIDTTL answers by the first copy's reservation, never reserving twice.
	RequestID string
	// MaxBacklog (queue mode) bounds the activity's queued entries not yet
	// handled: each shard's stream takes its share, ceil(MaxBacklog/Shards),
	// decided exactly in the script on the buyer's home shard. 0 = no bound.
	MaxBacklog int64
	// Keep (queue mode), called once the reservation is made and only then,
	// on the caller's goroutine, returns the buyer's request as the queue
	// worker is to send it: the stream entry carries it (nil: the worker
	// rebuilds one from the route).
	Keep func() []byte
	// Alias is the buyer's holder alias (HolderAlias of the session
	// credential they were identified by; "" = none): a win sets its bits
	// in the holders bitset beside the user's (MayHoldAlias).
	Alias string
}

// RequestIDTTL is how long a request id is remembered (SPEC §4: 5 minutes).
const RequestIDTTL = 5 * time.Minute

// ReserveResult is what Redis decided.
type ReserveResult struct {
	Code    lua.Code // OK, Empty (sold out), Pending, Purchased, NotReady, Released (repeated request id), Backlog
	Token   Token    // the new reservation (OK), or one the buyer holds (Pending, Purchased; zero: none known); Released: the request id's own
	OrderID string   // Purchased: the shop's order id where known
	// Replay is the shop's answer to the first copy of a repeated request
	// id, kept by ConfirmReplay (Purchased only; nil when none was kept).
	Replay *Replay
	// FromMemory is true when the answer came from client-side cached
	// sold-out flags, with no script run.
	FromMemory bool
	// FromMemo is true when a repeat of a buyer at their limit was
	// answered from the buyer memo (see buyerMemo), with no script run.
	FromMemo bool
	// FromGate is true (with FromMemory) when the buyer waited at the
	// reserve gate and the sold-out flags had shown by their turn: a call
	// that would have been written, and answered EMPTY, was not.
	FromGate bool
	// Moves counts stock moves between shards this request needed.
	Moves int
	// Backlog (code Backlog) estimates the activity's queued entries not
	// yet handled: the home shard's stream length times the shards.
	Backlog int64
}

// shardBacklog is each shard stream's share of max_backlog (queue mode).
// The stream is never trimmed: an entry in it is a buyer told QUEUED.
func shardBacklog(maxBacklog int64, shards int) string {
	if maxBacklog <= 0 {
		return "9223372036854775807"
	}
	return itoa((maxBacklog + int64(shards) - 1) / int64(shards))
}

// Reserve runs the admission decision for one buyer: the per-user limit,
// duplicate detection, stock check, decrement, reservation record, pending
// marker and (queue mode) stream entry, in one script on the buyer's home
// shard. When the home shard is dry, units are moved from a donor shard
// (steal.lua) and deposited by the same reserve call that uses them, so no
// buyer is refused while another shard has stock.
func (s *Store) Reserve(ctx context.Context, q ReserveRequest) (result ReserveResult, rerr error) {
	if q.Qty < 1 || q.Qty > q.Limit || q.Shards < 1 {
		return ReserveResult{}, fmt.Errorf("%w: qty %d, limit %d, shards %d", ErrBadRequest, q.Qty, q.Limit, q.Shards)
	}
	c, err := s.Client()
	if err != nil {
		return ReserveResult{}, err
	}
	k, err := s.skuKeys(ctx, q.Activity, q.SKU, q.Shards)
	if err != nil {
		return ReserveResult{}, err
	}
	// Not SOLD_OUT while units of the SKU may come back: a settle of this
	// instance's is pending (transit.go), or another's (its mark,
	// fleetmark.go).
	defer func() {
		if rerr == nil && result.Code == lua.Empty && (s.inTransit(k, result.FromMemory) || s.fleetMarked(ctx, c, k, result.FromMemory)) {
			result, rerr = ReserveResult{}, errInTransit
		}
	}()
	home := HomeShard(q.User, q.Shards)
	// A call of this buyer that this instance could not settle (Redis
	// stalled) is settled first, so the buyer's retry is decided on what
	// they really hold, not on a phantom.
	if s.retry.Len() > 0 { // the key is built only when anything waits
		if err := s.retry.RunNow(ctx, buyerKey(q.Activity, q.User)); err != nil {
			return ReserveResult{}, err
		}
	}
	// One deadline for the flags (local memory but on a miss) and the
	// reserve call after them: a timer per Redis call was a visible share
	// of the contended path (issue 10). A steal renews it.
	cctx, cancel := s.ctx(ctx)
	defer func() { cancel() }()
	rid := ""
	var ridHash uint32
	if q.RequestID != "" {
		rid = ridKey(k.Shards[home], q.User, q.RequestID)
		ridHash = fnv32(rid)
		// Copies of one request on this instance go one after the other
		// (ridLocks), and one that waited for a copy answered SOLD_OUT is
		// answered the same: one outcome, never SOLD_OUT beside a win.
		l := s.rids.lock(rid, ridHash)
		if l.soldOut {
			s.rids.unlock(rid, ridHash, l)
			return ReserveResult{Code: lua.Empty, FromMemory: true}, nil
		}
		defer func() {
			if rerr == nil && result.Code == lua.Empty {
				l.soldOut = true // for the copies waiting now; a later repeat is decided afresh
			}
			s.rids.unlock(rid, ridHash, l)
		}()
	}
	out, err := s.outFlagsIn(cctx, c, k, rid != "")
	if err != nil {
		return ReserveResult{}, err
	}
	if allTrue(out) {
		if r, done, err := s.soldOutAnswer(cctx, c, k, home, q.User, rid, ridHash); done {
			return r, err
		}
	}
	if r, ok := s.memoAnswer(cctx, c, &k.Shards[home], &q); ok {
		return r, nil
	}
	// No more calls in flight than the shard has units (reserveGate): a
	// waiter reads the sold-out flags again when its turn comes.
	g := &k.gates[home]
	if !g.tryEnter(nil, q.Stock, q.Shards) {
		for {
			w, err := g.wait(cctx)
			if dl, _ := cctx.Deadline(); err == nil && !s.worthSending(dl) {
				// The turn came with the deadline (calls in flight timed
				// out: Redis stalls): a call written now would reach
				// Redis after its caller gave up, to be aborted.
				g.pass()
				err = context.DeadlineExceeded
			}
			if err != nil {
				return ReserveResult{}, fmt.Errorf("%w: waited for a turn: %v", ErrUnavailable, err)
			}
			if out, err = s.outFlagsIn(cctx, c, k, rid != ""); err != nil {
				g.pass()
				return ReserveResult{}, err
			}
			if allTrue(out) {
				if r, done, err := s.soldOutAnswer(cctx, c, k, home, q.User, rid, ridHash); done {
					// Sold out: every waiter behind this one is answered
					// the same way, none needs a turn.
					g.passAll()
					r.FromGate = r.FromMemory
					return r, err
				}
			}
			if g.tryEnter(w, q.Stock, q.Shards) {
				break
			}
		}
	}
	left, leftKnown := int64(0), false
	defer func() { g.leave(left, leftKnown) }()
	id := newID()
	tok := Token{Activity: q.Activity, SKU: q.SKU, Shard: home, ID: id}
	// ARGV[10..11] are read in queue mode only, ARGV[12] with a request id
	// only: nothing is built for them otherwise.
	args := []string{q.User, itoa(q.Qty), itoa(q.Limit), tok.Field(), itoa(q.NowMs), itoa(q.ExpireAt), "0", "0", "", "", "", ridTTLms, "0"}
	switch {
	case q.Queue:
		args[6], args[9], args[10] = "1", shardBacklog(q.MaxBacklog, q.Shards), tok.String()
	case s.memo == nil:
		args[6] = "2" // no buyer memo: PURCHASED need not read the epoch
	}
	keys := k.reserveKeys[home]
	if rid != "" {
		keys = k.Shards[home].reserveRidKeys(rid)
		args = append(args, strconv.FormatUint(uint64(ridHash), 10), ridBitsFor(q.Stock, q.Shards))
	}
	// The holder alias last: reserve.lua reads ARGV[#ARGV] as one when ARGV
	// has an even count (8 in the short call, 14 or 16 in the long one).
	short := args[:7]
	if q.Alias != "" {
		args = append(args, q.Alias)
		short = append(short[:7:7], q.Alias)
	}
	var res ReserveResult
	need := q.Qty
	// The home shard is known dry: move stock first. Not for a request id:
	// the script answers a copy of a request that already holds a unit by
	// its record (PENDING, the replay) before any steal, and a copy must
	// never steal, find nothing and say SOLD_OUT beside its own win.
	// Nor for a buyer this instance saw holding units (seenBuyers): their
	// reserve's limit check answers first, and only EMPTY steals.
	skipReserve := out[home] && !allTrue(out) && rid == "" && !s.seen.has(q.Activity, q.User)
	rechecks := 0    // looks at the flags again before SOLD_OUT after the donors were dry
	ranHome := false // the home shard's reserve ran in this call
	// Every steal is followed by a reserve that deposits it, so a move only
	// stays in transit when a call fails (SettleMoves finishes those).
	for {
		if !skipReserve {
			ranHome = true
			var r reserveReply
			var err error
			written := true
			if !q.Queue && rid == "" && args[8] == "" {
				// Nothing to deposit: reserve.lua's short ARGV and KEYS,
				// alone or batched with the shard's other buyers.
				r, written, err = s.reserveShort(cctx, c, k, home, short)
			} else {
				r, err = s.runReserve(cctx, c, keys, args)
			}
			if err == nil && res.Moves == 0 && (r.code == int64(lua.OK) || r.code == int64(lua.Empty)) {
				left, leftKnown = r.remaining, true // the home shard's units after this call
			}
			if err != nil {
				// The script may still run: settle the token id (and the
				// move it carried) once Redis answers, so the buyer, told
				// "unavailable", holds nothing.
				if written {
					s.abortLater(err, k, home, tok, q, rid, args[7], args[8], args[12])
				}
				return ReserveResult{}, err
			}
			switch lua.Code(r.code) {
			case lua.OK:
				s.seen.add(q.Activity, q.User)
				if q.Queue && s.dur == nil {
					// With durable winners the entry waits for the
					// replicas: MakeDurable writes it (red team chaos2).
					s.enqueue(ctx, c, k.Shards[home], tok, q)
				}
				return ReserveResult{Code: lua.OK, Token: tok, Moves: res.Moves}, nil
			case lua.Pending, lua.Purchased, lua.Released:
				// A reservation the buyer holds, of any SKU of the activity
				// (reserve.lua's lastAnswer: the most recent pending or
				// queued one for PENDING, else the most recent). A
				// PURCHASED that knows of none held names none (a users
				// hash value of an older build whose last was given back).
				last, ok := tokenOfField(q.Activity, home, r.token)
				if r.token == "" && r.code == int64(lua.Purchased) {
					last, ok = Token{}, true
				}
				if !ok {
					return ReserveResult{}, ErrInvalidResponse
				}
				s.remember(&q, &r, last) // only a reply with an epoch is remembered
				if r.code != int64(lua.Released) {
					s.seen.add(q.Activity, q.User)
				}
				return ReserveResult{Code: lua.Code(r.code), Token: last, OrderID: r.orderID, Replay: r.replay, Moves: res.Moves}, nil
			case lua.NotReady:
				return ReserveResult{Code: lua.NotReady}, nil
			case lua.Backlog:
				return ReserveResult{Code: lua.Backlog, Backlog: r.remaining * int64(q.Shards), Moves: res.Moves}, nil
			case lua.Aborted:
				// Only a token id this instance gave up on is aborted.
				return ReserveResult{}, fmt.Errorf("%w: reservation %s was aborted", ErrUnavailable, tok)
			case lua.Empty:
				need = max(q.Qty-r.remaining, 1)
				if res.Moves >= 2*q.Shards {
					// Every deposit went to other buyers first: the SKU is all but gone.
					return s.emptyOrPending(cctx, c, k, home, q, res.Moves), nil
				}
			default:
				return ReserveResult{}, ErrInvalidResponse
			}
		}
		skipReserve = false
		moved, moveID, gen, err := s.stealFrom(ctx, c, k, out, home, need, q)
		if err != nil {
			return ReserveResult{}, err
		}
		if moved == 0 {
			// Every donor was dry when asked. A buyer with qty > 1 may
			// have moved units it could not use onto its home shard just
			// now (a partial steal): they were in transit while this buyer
			// looked. The deposit reopened that shard, and Redis's
			// invalidation of its flag brings a fresh read: look once
			// more before saying SOLD_OUT (spec_b's qty test: 4 of 30
			// loaded runs left a unit unsold beside a qty-1 SOLD_OUT).
			if rechecks < 2 && s.clientCache {
				rechecks++
				if fresh, err := s.outFlagsIn(cctx, c, k, false); err == nil && !allTrue(fresh) {
					out, skipReserve = fresh, fresh[home] && rid == "" && !s.seen.has(q.Activity, q.User)
					args[7], args[8], args[12] = "0", "", "0" // what was moved is deposited
					continue
				}
			}
			if !ranHome {
				// The home shard's reserve was skipped (known dry) and never
				// ran: a buyer the reserve took units for there may hold one
				// whose reserve ran after they were told STORE_UNAVAILABLE,
				// not aborted yet (soldOutAnswer). The script answers them:
				// PENDING, not SOLD_OUT beside their held unit.
				// One whose holders check could not be read (Redis stalled,
				// the cache dropped) may hold one too: the script decides.
				if held, err := s.holds(cctx, c, k, home, q.User); held || err != nil {
					skipReserve = false
					args[7], args[8], args[12] = "0", "", "0"
					continue
				}
			}
			return s.emptyOrPending(cctx, c, k, home, q, res.Moves), nil
		}
		res.Moves++
		if afterSteal != nil {
			afterSteal()
		}
		args[7], args[8], args[12] = itoa(moved), moveID, itoa(gen)
		cancel()
		cctx, cancel = s.ctx(ctx)
	}
}

var enqueueScript = rueidis.NewLuaScript(lua.Enqueue)

// enqueue writes a queued reservation's stream entry (with the buyer's
// request, q.Keep), now that the buyer's call heard it was reserved
// (enqueue.lua: reserve.lua leaves it out, so a reserve that ran after its
// buyer was told STORE_UNAVAILABLE is never read by a worker before its
// abort releases it). The buyer is told QUEUED
// either way: the reservation exists. If Redis does not answer, the
// retrier writes the entry (idempotent: one entry per reservation); the
// buyer's next call runs it first. A record still without an entry a
// minute on (the instance stopped, or stayed cut off) is released by the
// reconciler's repair (ReleaseOrphans): it cannot be told from a late
// reserve whose buyer was told STORE_UNAVAILABLE.
func (s *Store) enqueue(ctx context.Context, c rueidis.Client, sk ShardKeys, tok Token, q ReserveRequest) {
	keys, args := []string{sk.Res, sk.Log, sk.Stock}, []string{tok.Field(), tok.String(), itoa(q.ExpireAt)}
	if q.Keep != nil {
		args = append(args, string(q.Keep()))
	}
	run := func(ctx context.Context) error {
		cctx, cancel := s.ctx(ctx)
		defer cancel()
		return wrap(enqueueScript.Exec(cctx, c, keys, args).Error())
	}
	if err := run(ctx); err != nil {
		if !Retryable(err) || !s.retry.Submit("enqueue", buyerKey(q.Activity, q.User), run) {
			s.log.Error("queued reservation has no stream entry; reconcile --repair writes it", zap.String("token", tok.String()), zap.Error(err))
		}
	}
}

// soldOutAnswer answers a buyer of a SKU whose every shard is sold out,
// before any turn at the reserve gate (done false: the script must answer).
// A buyer the reserve took units for on the home shard (its holders bitset,
// from local memory) is answered by the script: they may hold a unit of a
// reserve that ran after they were told STORE_UNAVAILABLE, whose abort has
// not run yet (it may be another instance's), and are owed PENDING, not
// SOLD_OUT beside their held unit (red team rv20: a SOLD_OUT so told left
// 22 of 50 units on sale after every buyer had heard SOLD_OUT); a winner
// hears ALREADY_PURCHASED. Otherwise, without a request id: SOLD_OUT from
// local memory. A repeat of a won
// request is still owed its answer (a replay): the shard's bitset of request
// ids with a record (bits), read from local memory (client-side caching),
// answers nearly every fresh request id (rid, hash h); only a possible
// repeat costs a GET of its record, and only a record makes the script read
// the reservation. Neither needs a turn: a turn is a place for a reserve
// call, and the buyers answered here would otherwise queue behind the calls
// in flight; behind calls stalled in Redis, until their deadline (503).
func (s *Store) soldOutAnswer(ctx context.Context, c rueidis.Client, k *SKUKeys, home int, user, rid string, h uint32) (ReserveResult, bool, error) {
	held, err := s.holds(ctx, c, k, home, user)
	if err != nil {
		// Not readable (Redis stalled with the entries not in local
		// memory): the buyer may hold a unit, so not SOLD_OUT; nothing
		// was reserved, they ask again (red team chaos: confirmed winners
		// clicking again during a stall were told SOLD_OUT).
		return ReserveResult{}, true, err
	}
	if held {
		return ReserveResult{}, false, nil
	}
	if rid == "" {
		return ReserveResult{Code: lua.Empty, FromMemory: true}, true, nil
	}
	if seen, known := s.ridSeen(ctx, c, k, home, h); known && !seen {
		return ReserveResult{Code: lua.Empty, FromMemory: true}, true, nil
	}
	err = c.Do(ctx, c.B().Get().Key(rid).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return ReserveResult{Code: lua.Empty}, true, nil
	}
	if err != nil {
		return ReserveResult{}, true, wrap(err)
	}
	return ReserveResult{}, false, nil
}

// worthSending reports whether a reserve call whose caller gives up at
// deadline (zero: never) is still worth writing: at least a quarter of
// redis.timeout left. One written later would reach Redis after its caller
// gave up, only to be aborted. The reserve gate and the batcher both ask.
func (s *Store) worthSending(deadline time.Time) bool {
	return deadline.IsZero() || time.Until(deadline) >= s.timeout/4
}

// buyerKey groups the retrier's jobs of one buyer of one activity.
func buyerKey(act, user string) string { return act + "\x00" + user }

// mayHaveRun reports whether a call that failed may still reach Redis and
// run: anything but a connection that could not even be made, or a call
// Redis refused before it wrote anything (Refused: memory full, a failed
// RDB save, ...), which has nothing to settle and, retried while the
// refusal lasts, would fill the retrier with one abort per refused buyer.
func mayHaveRun(err error) bool {
	var op *net.OpError
	return (!errors.As(err, &op) || op.Op != "dial") && !Refused(err)
}

// abortReason is the release reason of a reservation whose reserve call
// the proxy gave up on (the buyer was told STORE_UNAVAILABLE).
const abortReason = "store_timeout"

// abortLater queues abort.lua for a reserve call that failed: it releases
// the reservation if the script ran after all, or leaves a tombstone so it
// takes nothing when it runs later; units the call carried from a donor
// are deposited on the way.
func (s *Store) abortLater(cause error, k *SKUKeys, home int, tok Token, q ReserveRequest, rid, units, moveID, gen string) {
	if !mayHaveRun(cause) && moveID == "" {
		return
	}
	sk := k.Shards[home]
	keys := []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Out, sk.MovesIn, sk.Epoch}
	if rid != "" {
		keys = append(keys, rid)
	}
	// A late reservation, or the units it carried, come back (transit.go).
	s.retry.SubmitThen("abort", buyerKey(q.Activity, q.User), func(ctx context.Context) error {
		c, err := s.Client()
		if err != nil {
			return err
		}
		cctx, cancel := s.ctx(ctx)
		defer cancel()
		r, err := ints(s.abort.Exec(cctx, c, keys, []string{tok.Field(), q.User, abortReason,
			itoa(time.Now().UnixMilli()), units, moveID, gen, itoa(q.ExpireAt), queueFlag(q.Queue)}))
		if err != nil {
			return err
		}
		switch code := lua.Code(r[0]); code {
		case lua.OK, lua.Aborted, lua.Same:
			return nil
		case lua.Confirmed:
			// A queue worker sent it to the shop before the abort ran:
			// the buyer has an order after all; the shop's answer settles it.
			s.log.Warn("aborted reserve was already taken to the shop", zap.String("token", tok.String()))
			return nil
		default:
			return fmt.Errorf("abort %s: %v", tok, code)
		}
	}, s.holdTransit(k, -1))
}

// emptyOrPending is the answer to a buyer the reserve found no unit for:
// EMPTY (SOLD_OUT), unless a reservation they hold on their home shard is
// still pending or queued: then PENDING with it. The script's limit check
// answers that only at the limit; a buyer under it (per_user_limit above
// their units) whose reservation ran after they were told
// STORE_UNAVAILABLE, its abort still to come, heard SOLD_OUT beside the
// unit they held, which the abort then put back on sale (red team chaos:
// §49 for per_user_limit > 1). Read only for a buyer the holders bitset
// (local memory after the first read) may name; not readable is EMPTY, as
// the script said.
func (s *Store) emptyOrPending(ctx context.Context, c rueidis.Client, k *SKUKeys, home int, q ReserveRequest, moves int) ReserveResult {
	if held, err := s.holds(ctx, c, k, home, q.User); err != nil || !held {
		return ReserveResult{Code: lua.Empty, Moves: moves}
	}
	if tok, ok := s.inFlightOf(ctx, c, &k.Shards[home], q.Activity, home, q.User); ok {
		return ReserveResult{Code: lua.Pending, Token: tok, Moves: moves}
	}
	return ReserveResult{Code: lua.Empty, Moves: moves}
}

// inFlightOf is a reservation of user's on home shard sk (a single buy's
// or a bundle's: the users field and records are the shard's, across
// SKUs) still pending or queued, read from Redis; ok is false when there
// is none or it cannot be read.
func (s *Store) inFlightOf(ctx context.Context, c rueidis.Client, sk *ShardKeys, act string, home int, user string) (Token, bool) {
	v, err := c.Do(ctx, c.B().Hget().Key(sk.Users).Field(user).Build()).ToString()
	if err != nil {
		return Token{}, false
	}
	_, list, _ := strings.Cut(v, "|")
	if list == "" {
		return Token{}, false
	}
	fields := strings.Split(list, "|")
	recs, err := c.Do(ctx, c.B().Hmget().Key(sk.Res).Field(fields...).Build()).ToArray()
	if err != nil {
		return Token{}, false
	}
	for i, r := range recs {
		rec, err := r.ToString()
		if err != nil || rec == "" || (rec[0] != 'p' && rec[0] != 'q') || i >= len(fields) {
			continue
		}
		if tok, ok := tokenOfField(act, home, fields[i]); ok {
			return tok, true
		}
	}
	return Token{}, false
}

// ridSeen reports whether the request-id bitset of k's sold-out shard i
// has h's bit set, from local memory after the first read; known is false
// when the bitset cannot be read (then the record decides). ctx carries
// the call's deadline.
func (s *Store) ridSeen(ctx context.Context, c rueidis.Client, k *SKUKeys, i int, h uint32) (seen, known bool) {
	return s.bitSeen(ctx, c, &k.ridbits[i], k.Shards[i].RidBits, k, h)
}

// MayHold reports whether the reserve may have taken units of act's SKU
// for user on their home shard: their bit in its holders bitset, from local
// memory after the first read (not readable: true). A buyer of a sold-out
// SKU it says so of is answered by the reserve path (soldOutAnswer, after
// the rate limits), not SOLD_OUT from memory. It is asked before every such
// SOLD_OUT without a request id, before any rate limit: for a buyer whose
// bit is clear (nearly all), the bitset's snapshot answers with no context
// and no call into the client. It reads the bit only: the users field that
// tells a holder from another buyer sharing the bit (about one made-up id
// in 64 on a SKU sold out to one-unit buyers) is read by soldOutAnswer,
// once the buy has paid its rate limits. Read here, it cost an HGET (and a
// client-side cache entry kept until the connection's cache is full) per
// such id, bought with no token (red team rte).
func (s *Store) MayHold(ctx context.Context, act, sku string, shards int, user string) bool {
	if shards < 1 {
		return false
	}
	c, err := s.Client()
	if err != nil {
		return false
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return false
	}
	if !s.clientCache {
		return false
	}
	home, h := HomeShard(user, shards), holderHash(user)
	if held, ok := s.bitSnapped(&k.holders[home], k, h); ok {
		return held
	}
	if _, ok := ctx.Deadline(); !ok {
		// A read from memory needs no deadline; a miss must not wait on
		// Redis for longer than any call.
		var cancel context.CancelFunc
		ctx, cancel = s.ctx(ctx)
		defer cancel()
	}
	held, err := s.bitRead(ctx, c, &k.holders[home], k.Shards[home].Holders, k, h)
	// Not readable is "may hold": the store's own sold-out answer reads
	// again and says STORE_UNAVAILABLE if it still cannot tell.
	return held || err != nil
}

// holds reports whether user may hold units of k's SKU on shard i: their
// bit in its holders bitset, then (a bit may be another buyer's) their
// users field with units, both from local memory after the first read of
// each, until Redis invalidates them. err is set when either could not be
// read (Redis stalled or unreachable, the entry not in local memory): the
// buyer may hold a unit, and a caller must not answer SOLD_OUT beside it
// (red team chaos; until then not readable counted as "holds nothing").
// Without client_cache nothing is read: false, SOLD_OUT from memory as
// before holders existed.
func (s *Store) holds(ctx context.Context, c rueidis.Client, k *SKUKeys, i int, user string) (bool, error) {
	return s.holdsHash(ctx, c, k, i, user, holderHash(user))
}

// holdsHash is holds with user's holderHash h.
func (s *Store) holdsHash(ctx context.Context, c rueidis.Client, k *SKUKeys, i int, user string, h uint32) (bool, error) {
	if !s.clientCache {
		return false, nil
	}
	held, err := s.bitRead(ctx, c, &k.holders[i], k.Shards[i].Holders, k, h)
	if err != nil || !held {
		return false, err
	}
	v, err := c.DoCache(ctx, c.B().Hget().Key(k.Shards[i].Users).Field(user).Cache(), flagTTL).ToString()
	if rueidis.IsRedisNil(err) {
		return false, nil // none
	}
	if err != nil {
		return false, wrap(err)
	}
	units, _, _ := strings.Cut(v, "|")
	return units != "0", nil
}

// holderHash is user's hash in a shard's holders bitset: the first 32 bits
// of SHA-1(user), as reserve.lua's markHolder computes it.
func holderHash(user string) uint32 {
	sum := sha1.Sum([]byte(user))
	return binary.BigEndian.Uint32(sum[:4])
}

// bitSnapped answers bitSeen from view's snapshot (see bitsView) when it
// is current: ok false when it is not (none yet, an invalidation since,
// older than outSnapTTL, a connection's cache dropped since, or k no
// longer tracked).
func (s *Store) bitSnapped(view *bitsView, k *SKUKeys, h uint32) (seen, ok bool) {
	v, ok := s.bitsSnapped(view, k)
	return ok && bitIn(v, h), ok
}

// bitsSnapped is view's snapshot of its bitset when it is current (see
// bitSnapped).
func (s *Store) bitsSnapped(view *bitsView, k *SKUKeys) (v string, ok bool) {
	sn := view.snap.Load()
	if sn == nil || sn.gen != view.gen.Load() || sn.epoch != s.epoch.Load() || !k.tracked.Load() {
		return "", false
	}
	// Unsigned: a snapshot "read in the future" (the clock stepped back
	// since) is as stale as an old one.
	if uint64(time.Now().UnixNano()-sn.at) >= uint64(outSnapTTL) {
		return "", false
	}
	return sn.v, true
}

// bitSeen reports whether the bitset at key (view's, of k) has h's bit set
// (h % its size), from view's snapshot or client-side cached memory after
// the first read; known is false when it cannot be read.
func (s *Store) bitSeen(ctx context.Context, c rueidis.Client, view *bitsView, key string, k *SKUKeys, h uint32) (seen, known bool) {
	if !s.clientCache {
		return false, false // every read would fetch the whole bitset
	}
	seen, err := s.bitRead(ctx, c, view, key, k, h)
	return seen, err == nil
}

// bitRead is bitSeen with the read's error (client_cache on): a bitset
// that is not there (no bit ever set on the shard) has no bit set.
func (s *Store) bitRead(ctx context.Context, c rueidis.Client, view *bitsView, key string, k *SKUKeys, h uint32) (bool, error) {
	v, err := s.bitsRead(ctx, c, view, key, k)
	return err == nil && bitIn(v, h), err
}

// bitsRead is the bitset at key (view's, of k): its snapshot when current,
// else read (client-side cached) and snapshotted; "" when it is not there.
func (s *Store) bitsRead(ctx context.Context, c rueidis.Client, view *bitsView, key string, k *SKUKeys) (string, error) {
	if v, ok := s.bitsSnapped(view, k); ok {
		return v, nil
	}
	// The generation before the read: an invalidation that lands during
	// it leaves the snapshot stale-marked, never a stale one current.
	gen, epoch, now := view.gen.Load(), s.epoch.Load(), time.Now().UnixNano()
	v, err := c.DoCache(ctx, c.B().Get().Key(key).Cache(), flagTTL).ToString()
	if rueidis.IsRedisNil(err) {
		v, err = "", nil // no bit ever set on this shard
	}
	if err != nil {
		return "", wrap(err)
	}
	view.snap.Store(&bitsSnap{gen: gen, epoch: epoch, at: now, v: v})
	return v, nil
}

// bitIn reports whether bitset v has h's bit set (h % its size); an empty
// v has none.
func bitIn(v string, h uint32) bool {
	if len(v) == 0 {
		return false
	}
	bit := uint64(h) % (uint64(len(v)) * 8)
	return v[bit/8]&(0x80>>(bit%8)) != 0
}

// ridBitsFor sizes a new request-id bitset: about 64 bits per unit of the
// shard's stock, between 64 Kib and 4 Mib (8 KiB to 512 KiB of Redis per
// SKU shard). Records are written for winners and for every buyer the
// script answered before the sell-out was known (on the 1000users preset
// about as many again as the stock), a bitset outlives a re-preheat, and
// FNV-1a's low bits cluster on ids that differ in a few digits: at 16 bits
// per unit (8 Kib) the preset's fresh ids read their records from Redis
// ~180 times per 3,000 buyers after a few sales of 100 units (MONITOR), in
// one burst as the sell-out became known (issue 10); at 64 Kib, a handful.
func ridBitsFor(stock int64, shards int) string {
	want := int64(64) * max(stock, 1) / int64(max(shards, 1))
	bits := int64(1) << 16
	for bits < want && bits < 1<<22 {
		bits <<= 1
	}
	return strconv.FormatInt(bits, 10)
}

// fnv32 is FNV-1a of s: the request id's bit in its shard's bitset.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func queueFlag(q bool) string {
	if q {
		return "1"
	}
	return "0"
}

var ridTTLms = strconv.FormatInt(RequestIDTTL.Milliseconds(), 10)

// ridKey is a request id's record on the buyer's home shard (same hash tag
// as the shard, so the reserve script reads and writes it atomically). '|'
// never occurs in a user id, so user and request id cannot run together.
func ridKey(sk ShardKeys, user, rid string) string {
	return strings.TrimSuffix(sk.Users, "users") + "rid:" + user + "|" + rid
}

type reserveReply struct {
	code      int64
	remaining int64
	token     string
	orderID   string
	replay    *Replay
	// units and epoch come with PURCHASED to a buyer without request id
	// (see buyerMemo); epoch is "" otherwise.
	units int64
	epoch string
}

// runReserve runs reserve.lua; ctx carries the call's deadline.
func (s *Store) runReserve(ctx context.Context, c rueidis.Client, keys, args []string) (reserveReply, error) {
	arr, err := s.reserve.Exec(ctx, c, keys, args).ToArray()
	if err != nil {
		return reserveReply{}, wrap(err)
	}
	return parseReserve(arr)
}

// parseReserve reads one reserve.lua reply (reservebatch.lua's replies are
// the same, one per buyer).
func parseReserve(arr []rueidis.RedisMessage) (reserveReply, error) {
	var err error
	if len(arr) == 0 {
		return reserveReply{}, ErrInvalidResponse
	}
	var r reserveReply
	if r.code, err = arr[0].AsInt64(); err != nil {
		return reserveReply{}, ErrInvalidResponse
	}
	switch lua.Code(r.code) {
	case lua.OK, lua.Empty, lua.Backlog:
		if len(arr) != 2 {
			return reserveReply{}, ErrInvalidResponse
		}
		if r.remaining, err = arr[1].AsInt64(); err != nil {
			return reserveReply{}, ErrInvalidResponse
		}
	case lua.Pending, lua.Released:
		if len(arr) != 2 {
			return reserveReply{}, ErrInvalidResponse
		}
		r.token, err = arr[1].ToString()
	case lua.Purchased:
		if len(arr) != 3 && len(arr) != 4 && len(arr) != 6 {
			return reserveReply{}, ErrInvalidResponse
		}
		if r.token, err = arr[1].ToString(); err == nil {
			r.orderID, err = arr[2].ToString()
		}
		if err == nil && len(arr) == 6 {
			if r.units, err = arr[4].AsInt64(); err == nil {
				r.epoch, err = arr[5].ToString()
			}
		} else if err == nil && len(arr) == 4 {
			// The request id's winner, with the shop's answer kept.
			var blob string
			if blob, err = arr[3].ToString(); err == nil {
				var ok bool
				if r.replay, ok = parseReplay(blob); !ok {
					err = ErrInvalidResponse
				}
			}
		}
	case lua.NotReady, lua.Aborted:
	default:
		return reserveReply{}, ErrInvalidResponse
	}
	if err != nil {
		return reserveReply{}, ErrInvalidResponse
	}
	return r, nil
}

// stealFrom moves units from the first donor shard that has any, starting
// after home so concurrent buyers of different shards spread over donors.
// It marks dry donors in out so one request asks each at most once. It
// returns the units moved, the move id and the stock generation of the
// units (the donor's preheat).
func (s *Store) stealFrom(ctx context.Context, c rueidis.Client, k *SKUKeys, out []bool, home int, need int64, q ReserveRequest) (int64, string, int64, error) {
	n := len(k.Shards)
	var failed error
	for i := 1; i < n; i++ {
		d := (home + i) % n
		if out[d] {
			continue
		}
		if s.donorUnsettled(k, d) {
			// A steal of this instance from d has not been settled (d's
			// node stalled, or just woke): a new one would pile up on
			// it and run late too (red team bh, §51). The buyer comes back.
			failed, out[d] = errInTransit, true
			continue
		}
		moveID := q.SKU + ":" + newID()
		sk := k.Shards[d]
		cctx, cancel := s.ctx(ctx)
		r, err := ints(s.steal.Exec(cctx, c, []string{sk.Stock, sk.Moves, sk.Out},
			[]string{itoa(need), moveID, strconv.Itoa(home), itoa(q.NowMs), itoa(q.ExpireAt)}))
		cancel()
		if err != nil {
			// A donor on a node that is down (a cluster failover) must not
			// stop the buyer: try the others. Had the steal run after all,
			// its units are settled to home once the donor answers.
			if mayHaveRun(err) {
				s.settleMoveLater(k, d, moveID, q)
			}
			failed, out[d] = err, true
			continue
		}
		switch {
		case lua.Code(r[0]) == lua.OK && len(r) == 3:
			if s.dur != nil {
				// Durable winners: the donor's replicas have the steal
				// before its units are used, or they stay in transit.
				if err := s.durableSteal(ctx, c, k, d, moveID, q); err != nil {
					failed, out[d] = err, true
					continue
				}
			}
			return r[1], moveID, r[2], nil
		case len(r) != 2:
			return 0, "", 0, ErrInvalidResponse
		}
		out[d] = true
	}
	// Nothing moved: sold out, unless a donor could not be asked; then
	// nobody can tell, and the buyer hears so rather than SOLD_OUT.
	return 0, "", 0, failed
}

// settleMoveLater queues the settling of a steal whose reply never came:
// on the donor, settlemove.lua either finds the move (then its units are
// deposited on home, and the record forgotten) or leaves a tombstone so
// the steal takes nothing when it runs later.
func (s *Store) settleMoveLater(k *SKUKeys, donor int, moveID string, q ReserveRequest) {
	exp := itoa(q.ExpireAt)
	// Its units may be off the donor until it lands them; and no new steal
	// of this instance goes to the donor meanwhile (transit.go).
	s.retry.SubmitThen("move", buyerKey(q.Activity, q.User), func(ctx context.Context) error {
		c, err := s.Client()
		if err != nil {
			return err
		}
		d := k.Shards[donor]
		cctx, cancel := s.ctx(ctx)
		r, err := ints(s.settleMove.Exec(cctx, c, []string{d.Moves}, []string{moveID, itoa(time.Now().UnixMilli()), exp}))
		cancel()
		if err != nil {
			return err
		}
		if lua.Code(r[0]) != lua.OK {
			return nil // aborted now or before: nothing moved
		}
		if len(r) != 4 || r[1] < 0 || int(r[1]) >= len(k.Shards) {
			return ErrInvalidResponse
		}
		if s.DurableWinners() {
			// The steal ran late: its units are deposited only once the
			// donor's replicas have it (as durableSteal does for one that
			// answered in time); a failover that loses it then finds no
			// move here and deposits nothing, so no unit exists twice.
			if ok, _, err := s.waitShard(ctx, c, k.Shards[donor], moveID, q.ExpireAt); !ok {
				return fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
		}
		return s.depositMove(ctx, c, k, donor, int(r[1]), moveID, r[2], r[3], exp)
	}, s.holdTransit(k, donor))
}

// depositMove lands a move's units on home (deposit.lua, idempotent by
// move id) and then forgets the move on the donor.
func (s *Store) depositMove(ctx context.Context, c rueidis.Client, k *SKUKeys, donor, home int, moveID string, units, gen int64, exp string) error {
	h := k.Shards[home]
	cctx, cancel := s.ctx(ctx)
	r, err := ints(s.deposit.Exec(cctx, c, []string{h.Stock, h.Out, h.MovesIn}, []string{moveID, itoa(units), exp, itoa(gen)}))
	cancel()
	if err != nil {
		return err
	}
	switch lua.Code(r[0]) {
	case lua.OK, lua.Same:
	default:
		// Home is gone or re-preheated: the reconciler decides.
		return nil
	}
	cctx, cancel = s.ctx(ctx)
	defer cancel()
	return wrap(c.Do(cctx, c.B().Hdel().Key(k.Shards[donor].Moves).Field(moveID).Build()).Error())
}

// outFlags reads every shard's sold-out flag through client-side caching:
// after the first read, answers come from local memory until Redis
// invalidates a flag (a shard empties or gets stock back). A flag that
// cannot be read (its node is down, a cluster failover) counts as "not
// known to be empty": the script on the buyer's home shard decides, so
// buyers whose home shard is up are still served. Only when no flag at all
// can be read is the store unavailable.
func (s *Store) outFlags(ctx context.Context, c rueidis.Client, k *SKUKeys) ([]bool, error) {
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.outFlagsIn(cctx, c, k, false)
}

// outSnapTTL bounds how long a snapshot of a SKU's flags is used without
// asking the client-side cache again, should an invalidation ever be lost
// (on top of flagTTL, the cache's own bound).
var outSnapTTL = 100 * time.Millisecond // a var for a test (export_test.go)

// outSnap is a SKU's sold-out flags as read at invalidation generation gen.
type outSnap struct {
	gen uint64
	at  int64 // unix ns
	out []bool
	// marksRead: every flag was set and the fleet's transit marks were
	// read with them; marked: one is set, or could not be read
	// (fleetmark.go).
	marksRead, marked bool
}

// outFlagsIn is outFlags within cctx's deadline.
//
// With client-side caching the flags are kept per SKU as a snapshot, used
// while no invalidation of any key has reached this instance since it was
// read (Store.invalGen): the same staleness as the cache it was read from —
// rueidis drops an invalidated entry before it calls OnInvalidations, which
// bumps the generation — for about 50 ns instead of a DoCache per shard
// (1.1 µs, 2% of a winner's CPU in the proxy; issue 10).
//
// rid tells a caller with a request id: a sold-out answer to it reads its
// home shard's request-id bitset. When Redis has invalidated a shard's flag
// since the last read (it went dry, or reopened) and that flip may have
// sold the SKU out — every other shard was out in the last snapshot — the
// read brings every shard's bitset in the same round trip, so the sold-out
// answers that follow find them in memory. At a sell-out every buyer
// waiting at the gate needs both, and under a first wave each read from
// Redis waits 10-20 ms for the CPU (1000users preset): one read instead of
// two, one after the other. A flip that leaves units elsewhere brings no
// bitset (on a sharded SKU shards go dry one by one while the sale goes on).
func (s *Store) outFlagsIn(cctx context.Context, c rueidis.Client, k *SKUKeys, rid bool) ([]bool, error) {
	var gen uint64
	var now int64
	var sn *outSnap
	if s.clientCache {
		gen, now = s.invalGen.Load(), time.Now().UnixNano()
		// Unsigned: a snapshot "read in the future" (the clock stepped
		// back since) is as stale as an old one.
		if sn = k.snap.Load(); sn != nil && sn.gen == gen && uint64(now-sn.at) < uint64(outSnapTTL) {
			return slices.Clone(sn.out), nil // callers mark dry donors in theirs
		}
	}
	withBits := rid && s.clientCache && k.takeFlips(sn)
	out, nfailed, err := s.readOutFlags(cctx, c, k, withBits)
	if err == nil && nfailed == 0 && s.clientCache {
		n := &outSnap{gen: gen, at: now, out: slices.Clone(out)}
		if allTrue(out) {
			// Sold out by the flags: whether the fleet marks units in
			// transit (fleetmark.go), for the SOLD_OUT to come.
			n.marksRead, n.marked = true, s.readMarks(cctx, c, k)
		}
		k.snap.Store(n)
	}
	return out, err
}

// takeFlips clears the shards' flip marks (outInval) and reports whether
// any was set and, with the flipped shards taken as dry, every shard is out
// by sn, the last snapshot (none: unknown, taken as yes).
func (k *SKUKeys) takeFlips(sn *outSnap) bool {
	flipped, out := false, true
	for i := range k.outInval {
		f := k.outInval[i].Load() && k.outInval[i].Swap(false)
		flipped = flipped || f
		if !f && sn != nil && i < len(sn.out) && !sn.out[i] {
			out = false
		}
	}
	return flipped && out
}

// readOutFlags reads the flags through the client-side cache; nfailed is
// how many could not be read (taken as not sold out).
func (s *Store) readOutFlags(cctx context.Context, c rueidis.Client, k *SKUKeys, withBits bool) ([]bool, int, error) {
	out := make([]bool, len(k.outKeys))
	var failed error
	nfailed := 0
	read := func(i int, r rueidis.RedisResult) {
		err := r.Error()
		if err != nil && !rueidis.IsRedisNil(err) {
			failed = err
			nfailed++
			return
		}
		out[i] = err == nil
	}
	// With bitsets: the flags and every shard's bitset in one batch (see
	// outFlagsIn). Otherwise key by key while the answers come from local
	// memory: the shards' keys live on different connections of the
	// client, and DoMultiCache fans out to goroutines for that even when
	// every answer is cached — on the sold-out path (nearly every request
	// of a sale) that fan-out cost more than the rest of the request. At
	// the first miss (an invalidation, the flag TTL running out) the
	// remaining keys go in one batch.
	from := 0
	if !withBits {
		for ; from < len(k.outKeys); from++ {
			r := c.DoCache(cctx, c.B().Get().Key(k.outKeys[from]).Cache(), flagTTL)
			read(from, r)
			if !r.IsCacheHit() {
				from++
				break
			}
		}
	}
	if rest := k.outKeys[from:]; len(rest) > 0 || withBits {
		cmds := make([]rueidis.CacheableTTL, 0, len(rest)+len(k.Shards))
		for _, key := range rest {
			cmds = append(cmds, rueidis.CT(c.B().Get().Key(key).Cache(), flagTTL))
		}
		if withBits {
			for i := range k.Shards {
				cmds = append(cmds, rueidis.CT(c.B().Get().Key(k.Shards[i].RidBits).Cache(), flagTTL))
			}
		}
		for j, r := range c.DoMultiCache(cctx, cmds...)[:len(rest)] {
			read(from+j, r)
		}
	}
	if nfailed == len(out) {
		return nil, nfailed, wrap(failed)
	}
	return out, nfailed, nil
}

// SoldOut reports, from client-side cached flags, whether every shard of a
// SKU is empty.
func (s *Store) SoldOut(ctx context.Context, act, sku string, shards int) (bool, error) {
	c, err := s.Client()
	if err != nil {
		return false, err
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	if err != nil {
		return false, err
	}
	out, err := s.outFlags(ctx, c, k)
	if err != nil {
		return false, err
	}
	return allTrue(out), nil
}

func allTrue(b []bool) bool {
	for _, v := range b {
		if !v {
			return false
		}
	}
	return true
}

func netDialer(timeout time.Duration) (d net.Dialer) {
	d.Timeout = max(timeout, 500*time.Millisecond)
	d.KeepAlive = 10 * time.Second
	return d
}

// repeatScript answers a repeated request id as reserve.lua's repeat
// branch does, reserving nothing (see repeat.lua).
var repeatScript = rueidis.NewLuaScript(lua.Repeat)

// Repeat answers a repeat of a request (q.User, q.RequestID) by the
// reservation its first copy got, as Reserve would, without ever
// reserving: found is false when the request id has no record that names
// one (a new request). Admission asks it where a new request could only
// be refused (after the activity's end), so a winner whose answer was
// lost and who repeats a moment later hears its outcome, not ENDED.
func (s *Store) Repeat(ctx context.Context, q ReserveRequest) (res ReserveResult, found bool, err error) {
	if q.RequestID == "" || q.Shards < 1 {
		return ReserveResult{}, false, nil
	}
	c, err := s.Client()
	if err != nil {
		return ReserveResult{}, false, err
	}
	k, err := s.skuKeys(ctx, q.Activity, q.SKU, q.Shards)
	if err != nil {
		return ReserveResult{}, false, err
	}
	home := HomeShard(q.User, q.Shards)
	sk := k.Shards[home]
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	rid := ridKey(sk, q.User, q.RequestID)
	// A request id the shard's bitset never saw (client-side cached memory)
	// has no record: answered here, so a crowd of fresh ids after the end
	// costs Redis nothing (they come before the rate limits).
	if seen, known := s.ridSeen(cctx, c, k, home, fnv32(rid)); known && !seen {
		return ReserveResult{}, false, nil
	}
	arr, err := repeatScript.Exec(cctx, c, []string{rid, sk.Res}, nil).ToArray()
	if err != nil {
		return ReserveResult{}, false, wrap(err)
	}
	if len(arr) == 1 {
		if n, err := arr[0].AsInt64(); err == nil && n == 0 {
			return ReserveResult{}, false, nil
		}
	}
	r, err := parseReserve(arr)
	if err != nil {
		return ReserveResult{}, false, err
	}
	tok, ok := tokenOfField(q.Activity, home, r.token)
	if !ok {
		return ReserveResult{}, false, ErrInvalidResponse
	}
	return ReserveResult{Code: lua.Code(r.code), Token: tok, OrderID: r.orderID, Replay: r.replay}, true, nil
}
