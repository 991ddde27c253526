package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Durable winners (redis.durable_winners, issue 11 §2).
//
// Replication is asynchronous: a master that acknowledged a reserve and
// died before its replica received it takes the reservation with it, and
// the promoted replica sells the unit again (docs/decisions.md §10). With
// durable winners, a winner's reservation is checked onto the replicas
// before the shop sees it (sync mode) or the buyer hears QUEUED (queue
// mode), and before a queue worker sends it.
//
// WAIT counts the replication offset of the last write of the connection
// it runs on, and it blocks that connection. The reserve ran on the
// client's shared pipelined connection, where a WAIT would hold up every
// other buyer's call behind it, and a WAIT on any other connection covers
// nothing that connection did not write. So the check writes one small
// marker key in the shard's hash tag and WAITs right after it, both in one
// DoMulti: rueidis sends a batch holding a blocking command (WAIT,
// WAITAOF) on one dedicated connection of its blocking pool, and in a
// cluster to the node serving the marker's slot — the node that holds the
// shard. The reserve's effects entered the node's replication stream
// before its reply was sent, so they precede the marker: a replica that
// acknowledged the marker has the reservation. Only winners pay for it;
// no other answer waits.

// Durability is what MakeDurable found.
type Durability uint8

const (
	// DurableOff: durable winners are not configured; nothing waited.
	DurableOff Durability = iota
	// DurableOK: the reservation is on the configured number of replicas.
	DurableOK
	// DurableLate: not acknowledged in time, and on_timeout is forward:
	// the caller goes on (and counts it).
	DurableLate
	// DurableRefused: not acknowledged in time, and on_timeout is refuse:
	// the reservation was released (or its release is queued in the
	// retrier, for a Redis that does not answer); the buyer is told
	// STORE_UNAVAILABLE and holds nothing.
	DurableRefused
	// DurableTaken: as DurableRefused, but a queue worker had claimed the
	// queued reservation first: it is in the worker's hands (which waits
	// for the replicas too before sending), the buyer is told QUEUED.
	DurableTaken
)

func (d Durability) String() string {
	switch d {
	case DurableOff:
		return "off"
	case DurableOK:
		return "durable"
	case DurableLate:
		return "forwarded"
	case DurableRefused:
		return "refused"
	case DurableTaken:
		return "taken"
	}
	return "unknown"
}

// durableReason is the release reason of a winner refused for want of
// replicas.
const durableReason = "not_durable"

// durable is the store's redis.durable_winners state.
type durable struct {
	cfg     config.DurableWinners
	waitMs  int64
	waitaof atomic.Bool // fsync asked for and the server has WAITAOF (probed once connected)
	probed  atomic.Bool
}

// ErrNotDurable means the replicas did not acknowledge a write in time.
var ErrNotDurable = errors.New("replicas did not acknowledge the write in time")

// DurableWinners reports whether winners wait for replicas.
func (s *Store) DurableWinners() bool { return s.dur != nil }

// DurableRefuses reports whether a winner the replicas did not acknowledge
// in time is released (on_timeout: refuse) rather than sent on.
func (s *Store) DurableRefuses() bool {
	return s.dur != nil && s.dur.cfg.OnTimeout != config.DurableForward
}

func newDurable(cfg config.DurableWinners) *durable {
	if !cfg.Enabled() {
		return nil
	}
	return &durable{cfg: cfg, waitMs: max(cfg.Timeout.Milliseconds(), 1)}
}

// probeWaitAOF decides, once, whether fsync: true can use WAITAOF: the
// server must know the command (Redis 7.2+). It is asked of one node; a
// cluster is expected to run one version.
func (s *Store) probeWaitAOF(ctx context.Context, c rueidis.Client) {
	d := s.dur
	if d == nil || !d.cfg.FSync || d.probed.Load() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	arr, err := c.Do(cctx, c.B().CommandInfo().CommandName("WAITAOF").Build()).ToArray()
	if err != nil {
		return // asked again on the next winner
	}
	has := len(arr) == 1 && !arr[0].IsNil()
	d.waitaof.Store(has)
	if d.probed.CompareAndSwap(false, true) && !has {
		s.log.Error("redis.durable_winners.fsync: this Redis has no WAITAOF (it needs 7.2 or later); winners wait for replicas with WAIT (received, not yet fsynced)")
	}
}

// UsesWaitAOF reports whether the durability check is WAITAOF (fsync on
// the replicas) rather than WAIT; false until probed.
func (s *Store) UsesWaitAOF() bool { return s.dur != nil && s.dur.waitaof.Load() }

// durableKey is the shard's marker key, in its hash tag: written right
// before each WAIT (see above). It holds the last winner checked.
func durableKey(sk ShardKeys) string {
	return strings.TrimSuffix(sk.Users, "users") + "durable"
}

// WaitReplicas waits, at most redis.durable_winners.timeout, until the
// configured number of replicas of the node holding t's shard have every
// write that node acknowledged so far (t's reserve, a worker's claim). It
// reports ok when they did; err says why not when Redis did not answer or
// refused the marker write. expireAt bounds the marker key's life.
func (s *Store) WaitReplicas(ctx context.Context, t Token, shards int, expireAt int64) (ok bool, acked int64, err error) {
	if s.dur == nil {
		return true, 0, nil
	}
	c, err := s.Client()
	if err != nil {
		return false, 0, err
	}
	if t.Shard < 0 || t.Shard >= shards {
		return false, 0, fmt.Errorf("%w: token %s outside %d shards", ErrBadRequest, t, shards)
	}
	s.probeWaitAOF(ctx, c)
	k, err := s.skuKeys(ctx, t.Activity, t.SKU, shards) // placed tags (placement.go)
	if err != nil {
		return false, 0, err
	}
	return s.waitShard(ctx, c, k.Shards[t.Shard], t.Field(), expireAt)
}

// waitShard writes the marker of one shard and WAITs after it, on one
// connection to the node that holds the shard.
func (s *Store) waitShard(ctx context.Context, c rueidis.Client, sk ShardKeys, value string, expireAt int64) (ok bool, acked int64, err error) {
	now := time.Now().UnixMilli()
	exp := max(expireAt, now+int64(time.Minute/time.Millisecond))
	return s.waitAfter(ctx, c, c.B().Set().Key(durableKey(sk)).Value(value).PxatMillisecondsTimestamp(exp).Build())
}

// waitAfter sends set (a write naming one key) and a WAIT right after it
// in one DoMulti: one connection to the node of set's key, whose
// replicas then have every write that node acknowledged before.
func (s *Store) waitAfter(ctx context.Context, c rueidis.Client, set rueidis.Completed) (ok bool, acked int64, err error) {
	d := s.dur
	var wait rueidis.Completed
	aof := d.waitaof.Load()
	if aof {
		wait = c.B().Waitaof().Numlocal(0).Numreplicas(int64(d.cfg.Replicas)).Timeout(d.waitMs).Build()
	} else {
		wait = c.B().Wait().Numreplicas(int64(d.cfg.Replicas)).Timeout(d.waitMs).Build()
	}
	// Redis ends the WAIT at its timeout; the call's deadline leaves the
	// command timeout on top for the round trip.
	cctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout+s.timeout)
	defer cancel()
	res := c.DoMulti(cctx, set, wait)
	if err := res[0].Error(); err != nil {
		return false, 0, wrap(err)
	}
	if aof {
		arr, err := res[1].AsIntSlice()
		if err != nil {
			return false, 0, wrap(err)
		}
		if len(arr) != 2 {
			return false, 0, ErrInvalidResponse
		}
		acked = arr[1]
	} else if acked, err = res[1].AsInt64(); err != nil {
		return false, 0, wrap(err)
	}
	if acked < int64(d.cfg.Replicas) {
		return false, acked, fmt.Errorf("%w: %d of %d replicas within %s", ErrNotDurable, acked, d.cfg.Replicas, d.cfg.Timeout)
	}
	return true, acked, nil
}

// durableSteal waits for the replicas of a donor shard's node after a
// steal took units from it (stealFrom), before a reserve deposits them on
// the buyer's home shard: a steal the donor's replicas never received
// would be undone by a failover while its units were deposited (and sold)
// elsewhere — units sold twice. When they do not acknowledge in time, the
// units stay in transit and the retrier settles the move once the donor's
// replicas have it (or, after a failover that lost the steal, finds no
// move and deposits nothing).
func (s *Store) durableSteal(ctx context.Context, c rueidis.Client, k *SKUKeys, donor int, moveID string, q ReserveRequest) error {
	ok, _, err := s.waitShard(ctx, c, k.Shards[donor], moveID, q.ExpireAt)
	if ok {
		return nil
	}
	s.retry.Submit("durable_move", "move\x00"+moveID, func(ctx context.Context) error {
		c, err := s.Client()
		if err != nil {
			return err
		}
		if ok, _, err := s.waitShard(ctx, c, k.Shards[donor], moveID, q.ExpireAt); !ok {
			// Tried again later (retryable), until the replicas have it
			// or the node is gone.
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.settleMoveLater(k, donor, moveID, q)
		return nil
	})
	return fmt.Errorf("%w: stock moved from shard %d: %w", ErrUnavailable, donor, err)
}

// MakeDurable is the winner's durability check, right after a reserve
// that answered OK for q (res): it waits for the replicas of the shard's
// node and, when they do not acknowledge in time, applies on_timeout.
// (Stock moved from a donor shard was checked onto the donor's replicas
// before the reserve used it: durableSteal.)
// With refuse, the reservation is released by its token (abort.lua, as
// for a reserve whose reply never came: queue mode releases it only while
// still queued) before the buyer is answered; a Redis that does not
// answer the release gets it from the retrier, which also settles it
// before the buyer's next call. The error, if any, says why the replicas
// did not acknowledge (for logs); the Durability decides.
func (s *Store) MakeDurable(ctx context.Context, q ReserveRequest, res ReserveResult) (Durability, error) {
	if s.dur == nil {
		return DurableOff, nil
	}
	tok := res.Token
	ok, _, err := s.WaitReplicas(ctx, tok, q.Shards, q.ExpireAt)
	if ok {
		s.enqueueDurable(ctx, q, tok)
		return DurableOK, nil
	}
	if !s.DurableRefuses() {
		s.enqueueDurable(ctx, q, tok)
		return DurableLate, err
	}
	code, aerr := s.releaseNotDurable(ctx, q, tok)
	if aerr != nil {
		return DurableRefused, errors.Join(err, aerr)
	}
	if code == lua.Confirmed && q.Queue {
		// Queue mode: a worker claimed it while we waited.
		return DurableTaken, err
	}
	return DurableRefused, err
}

// enqueueDurable writes a queued winner's stream entry once its wait for
// the replicas is over and the winner goes on (acknowledged, or
// on_timeout: forward). Reserve leaves it out when durable winners are
// on: an entry written before the wait could be read and claimed by a
// worker during it, and a refused winner whose release could not reach
// Redis at once (it goes to the retrier) — its buyer told
// STORE_UNAVAILABLE, nothing held — was then the worker's, and sent
// (red team chaos2, TestChaos2DurableQueueRefusalIsNeverSent). Without an
// entry no worker sees a refused winner; the release settles it, or the
// reconciler's repair does (ReleaseOrphans), as for a late reserve.
func (s *Store) enqueueDurable(ctx context.Context, q ReserveRequest, tok Token) {
	if !q.Queue {
		return
	}
	c, err := s.Client()
	if err != nil {
		s.log.Error("queued reservation has no stream entry; reconcile --repair releases it", zap.String("token", tok.String()), zap.Error(err))
		return
	}
	k, err := s.skuKeys(ctx, q.Activity, q.SKU, q.Shards)
	if err != nil || tok.Shard < 0 || tok.Shard >= len(k.Shards) {
		s.log.Error("queued reservation has no stream entry; reconcile --repair releases it", zap.String("token", tok.String()), zap.Error(err))
		return
	}
	s.enqueue(ctx, c, k.Shards[tok.Shard], tok, q)
}

// releaseNotDurable releases a winner's reservation the replicas did not
// acknowledge: now if Redis answers, else through the retrier (keyed by
// the buyer, so their next reserve settles it first).
func (s *Store) releaseNotDurable(ctx context.Context, q ReserveRequest, tok Token) (lua.Code, error) {
	k, err := s.skuKeys(ctx, q.Activity, q.SKU, q.Shards)
	if err != nil {
		return 0, err
	}
	sk := k.Shards[tok.Shard]
	// abort.lua's keys, as abortLater builds them (the epoch tells every
	// instance's buyer memo that the buyer's units went down).
	keys := []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Out, sk.MovesIn, sk.Epoch}
	if q.RequestID != "" {
		// A repeat of the request id is then decided afresh.
		keys = append(keys, ridKey(sk, q.User, q.RequestID))
	}
	queue := queueFlag(q.Queue)
	exp := itoa(q.ExpireAt)
	var got lua.Code
	job := func(ctx context.Context) error {
		c, err := s.Client()
		if err != nil {
			return err
		}
		cctx, cancel := s.ctx(ctx)
		defer cancel()
		r, err := ints(s.abort.Exec(cctx, c, keys, []string{tok.Field(), q.User, durableReason,
			itoa(time.Now().UnixMilli()), "0", "", "0", exp, queue}))
		if err != nil {
			return err
		}
		switch got = lua.Code(r[0]); got {
		case lua.OK, lua.Aborted, lua.Same, lua.Confirmed:
			return nil
		default:
			// Broken counters: nothing released; the reconciler settles
			// the pending reservation (the shop never saw it).
			return fmt.Errorf("release of not durable %s: %v", tok, got)
		}
	}
	err = job(ctx)
	if err != nil && Retryable(err) {
		if s.retry.Submit("abort", buyerKey(q.Activity, q.User), job) {
			s.log.Warn("release of a winner the replicas did not acknowledge did not reach Redis; retrying in the background",
				zap.String("token", tok.String()), zap.Error(err))
			return lua.OK, nil
		}
	}
	return got, err
}

// DurableWarnings names the masters that cannot acknowledge a winner:
// fewer connected replicas than redis.durable_winners.replicas (every
// winner on their shards would be refused, or forwarded as not durable).
// It is asked at start, best effort: nil when durable winners are off or
// Redis does not answer.
func (s *Store) DurableWarnings(ctx context.Context) []string {
	if s.dur == nil {
		return nil
	}
	c, err := s.Client()
	if err != nil {
		return nil
	}
	want := s.dur.cfg.Replicas
	var out []string
	for addr, n := range c.Nodes() {
		cctx, cancel := s.ctx(ctx)
		info, err := n.Do(cctx, n.B().Info().Section("replication").Build()).ToString()
		cancel()
		if err != nil || !strings.Contains(info, "role:master") {
			continue
		}
		got := -1
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "connected_slaves:"); ok {
				fmt.Sscan(v, &got)
			}
		}
		if got >= 0 && got < want {
			out = append(out, fmt.Sprintf("redis.durable_winners: master %s has %d connected replica(s), %d wanted: every winner on its shards will be %s after %s",
				addr, got, want, map[bool]string{true: "refused (STORE_UNAVAILABLE)", false: "forwarded as not durable"}[s.DurableRefuses()], s.dur.cfg.Timeout))
		}
	}
	return out
}

// preheatDurable, with durable winners, waits until the replicas of every
// node preheat wrote to have the stock (red team chaosfo, docs/decisions.md
// §60): one marker and WAIT per shard (every SKU of a shard shares its
// hash tag, so its node), and one after the meta (meta: the meta key,
// re-expired at exp, a write in its slot). A preheat acknowledged only by
// a master a failover then replaced lost a shard's stock (the new master
// had none, and a plain preheat said "unchanged"), or the whole activity.
// Not acknowledged in time: the preheat fails with ErrNotDurable and the
// operator runs it again (a meta still loading is loaded again; one ready
// is checked again).
func (s *Store) preheatDurable(ctx context.Context, c rueidis.Client, a *config.Activity, place string, meta bool, exp int64) error {
	if s.dur == nil {
		return nil
	}
	s.probeWaitAOF(ctx, c)
	var ok bool
	var err error
	if meta {
		ok, _, err = s.waitAfter(ctx, c, c.B().Pexpireat().Key(s.MetaKey(a.ID)).MillisecondsTimestamp(exp).Build())
		if !ok {
			return fmt.Errorf("preheat %s: meta: %w", a.ID, err)
		}
		return nil
	}
	k := s.keys.getPlaced(a.ID, a.SKUs[0].ID, a.Shards, place)
	for i, sk := range k.Shards {
		if ok, _, err = s.waitShard(ctx, c, sk, "preheat", exp); !ok {
			return fmt.Errorf("preheat %s: shard %d: %w", a.ID, i, err)
		}
	}
	return nil
}

// opOnReplicas: with durable winners, an operator's write just answered by
// the master is reported done only once the replicas have it. again is that
// write, or one as harmless, sent once more with the WAIT on its connection
// (waitAfter): it must propagate, or the WAIT proves nothing. Nil without
// durable winners.
func (s *Store) opOnReplicas(ctx context.Context, c rueidis.Client, again rueidis.Completed, done string) error {
	if s.dur == nil {
		return nil
	}
	s.probeWaitAOF(ctx, c)
	if ok, _, err := s.waitAfter(ctx, c, again); !ok {
		return notOnReplicas(done, err)
	}
	return nil
}

// notOnReplicas is the error of an operator's write (done: "set",
// "released", "added", "removed") the master took and its replicas did not
// acknowledge in time (err): a failover could undo it, so it is run again.
func notOnReplicas(done string, err error) error {
	return fmt.Errorf("%s on the master, but not acknowledged by its replicas, so a failover could undo it: %w; run it again", done, err)
}
