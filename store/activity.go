package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Flags are an activity's switches as every instance sees them.
type Flags struct {
	Ready  bool  // stock was preheated
	Paused bool  // kill switch is off
	Shards int   // shards preheated
	Ver    int64 // stock generation: the preheat time in ms, above every earlier preheat
	// FairSeed keys the buyers' fair_start moments (admission/fairstart.go):
	// drawn at random by the activity's first preheat and kept by every
	// later one, so every instance holds the same key whatever its signing
	// keys (a rotation at the opening drew every buyer a second moment:
	// red team rtf), and no buyer can read it. "" before a preheat by this
	// build: the moments are keyed by the signing secret, as before.
	FairSeed string
}

// Flags reads the activity's meta hash through client-side caching, so a
// pause reaches every instance by invalidation, with no polling of our own.
func (s *Store) Flags(ctx context.Context, act string) (Flags, error) {
	c, err := s.Client()
	if err != nil {
		return Flags{}, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	// Only the fields read here (HMGET, cached as such): the meta holds a
	// field per SKU, and HGETALL parsed all of them into a map on every
	// read — 2,000 SKUs made each refresher pass, and every buy whose
	// snapshot was stale, build a 2,000-entry map (red team cat16).
	vals, err := c.DoCache(cctx, c.B().Hmget().Key(s.MetaKey(act)).Field(flagFields[:]...).Cache(), flagTTL).ToArray()
	if err != nil {
		return Flags{}, wrap(err)
	}
	if len(vals) != len(flagFields) {
		return Flags{}, ErrInvalidResponse
	}
	m := make(map[string]string, len(flagFields))
	for i, v := range vals {
		if str, err := v.ToString(); err == nil {
			m[flagFields[i]] = str
		}
	}
	f := Flags{Ready: m["ready"] == "1", Paused: m["paused"] == "1"}
	f.Shards, _ = strconv.Atoi(m["shards"])
	// Every instance reads the flags (admission's refresher, on each
	// invalidation of the meta): the shards' placement rides along.
	s.learnPlacement(act, m)
	f.Ver, _ = strconv.ParseInt(m["ver"], 10, 64)
	f.FairSeed = m[metaFairSeed]
	return f, nil
}

// flagFields are the meta's fields Flags reads.
var flagFields = [...]string{"ready", "paused", "shards", "ver", placeField, metaFairSeed}

// metaFairSeed is the meta's field of Flags.FairSeed.
const metaFairSeed = "fair_seed"

// newFairSeed draws a FairSeed: 128 random bits, in hex.
func newFairSeed() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// SetPaused flips an activity's kill switch.
func (s *Store) SetPaused(ctx context.Context, act string, paused bool) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	v := "0"
	if paused {
		v = "1"
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	key := s.MetaKey(act)
	// A pause before preheat creates the meta hash: give it a lifetime
	// (NX: only when it has none), which preheat later replaces with
	// end + key_ttl_after_end.
	for _, r := range c.DoMulti(cctx,
		c.B().Hset().Key(key).FieldValue().FieldValue("paused", v).Build(),
		c.B().Pexpire().Key(key).Milliseconds(orphanMetaTTL.Milliseconds()).Nx().Build(),
	) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	// With durable winners the switch is set once the replicas have it, as
	// a winner or a preheat is: one the master acknowledged and a failover
	// then lost (its replica lagging, or the master stopped and answering
	// after its replica was promoted) left the sale on after `pause` said
	// paused. Written again on the WAIT's own connection (the same value:
	// nothing changes; an HSET always propagates).
	return s.opOnReplicas(ctx, c, c.B().Hset().Key(key).FieldValue().FieldValue("paused", v).Build(), "set")
}

// orphanMetaTTL bounds the life of a meta hash made by pause before any
// preheat.
const orphanMetaTTL = 7 * 24 * time.Hour

// PreheatOutcome says what Preheat did.
type PreheatOutcome int

// Preheat outcomes.
const (
	PreheatCreated     PreheatOutcome = iota + 1 // stock written for the first time
	PreheatUnchanged                             // stock already as configured: nothing done
	PreheatOverwritten                           // stock replaced (not running, or --force)
)

func (o PreheatOutcome) String() string {
	switch o {
	case PreheatCreated:
		return "created"
	case PreheatUnchanged:
		return "unchanged"
	case PreheatOverwritten:
		return "overwritten"
	}
	return "?"
}

// ExpireAt is when an activity's keys expire: key_ttl_after_end after its end.
func ExpireAt(a *config.Activity) int64 {
	return a.End.Add(a.KeyTTLAfterEnd).UnixMilli()
}

// Preheat loads an activity's stock into Redis. It is idempotent when stock
// is already as configured, and refuses (ErrRunning) to overwrite an
// activity that is inside its window or has reservations, unless force.
// Overwriting deletes every reservation of the activity's SKUs.
//
// Preheats of one activity run one at a time, fleet-wide, under a lease
// ("preheat:ID"): two at once (a scheduled preheat and a manual one, two
// operators) wrote their shards interleaved with different stock
// generations, and units a buyer took from a shard of one generation for
// a home of the other could never be deposited: lost to the sale while
// status still added up (red-team finding). A preheat that finds the lease
// taken waits for it, then reads the meta afresh (and so finds the stock
// as configured: unchanged).
func (s *Store) Preheat(ctx context.Context, a *config.Activity, force bool, now time.Time) (PreheatOutcome, error) {
	if err := ended(a, now); err != nil {
		return 0, err // before the lease: a refusal writes nothing
	}
	name, holder := PreheatLease(a.ID), newID()
	ttl := 10*s.timeout + 10*time.Second // above preheat's own bound
	giveUp := time.Now().Add(ttl)
	// One call outlasting redis.timeout (a busy Redis, a fork, a GC pause)
	// does not fail an operator's preheat: it is tried again for a while
	// (the same holder renews, so a lost reply is harmless); a Redis that
	// stays away is reported as unavailable, soon.
	errUntil := time.Now().Add(max(2*time.Second, 10*s.timeout))
	failed := false // a lock call failed: it may still run, after the give-up
	giveBack := func() {
		if !failed {
			return
		}
		// Lock calls that failed may still run when Redis answers again
		// (a stall), taking the lock for a preheat that has returned: it
		// would stay held for its whole TTL (red-team finding sb13). A
		// release from here is not enough (it may be dropped with its
		// own deadline, or run before them on a new connection), so one
		// goroutine releases until Redis has answered three times, the
		// last a second after the first, within the lock's TTL. Only
		// this holder's lock goes: nobody else holds its name.
		go func() {
			bg := context.WithoutCancel(ctx)
			var first time.Time
			for n, until := 0, time.Now().Add(ttl); n < 3 && time.Now().Before(until); time.Sleep(250 * time.Millisecond) {
				c, cancel := context.WithTimeout(bg, max(s.timeout, time.Second))
				err := s.ReleaseLease(c, name, holder)
				cancel()
				if err != nil {
					continue
				}
				if n == 0 {
					first = time.Now()
				}
				if n < 2 || time.Since(first) >= time.Second {
					n++
				}
			}
		}()
	}
	for {
		l, err := s.AcquireLease(ctx, name, holder, ttl)
		failed = failed || err != nil
		switch {
		case err != nil && (!errors.Is(err, ErrUnavailable) || time.Now().After(errUntil)):
			giveBack()
			return 0, err
		case err != nil:
		case l.Held:
		case time.Now().After(giveUp):
			giveBack()
			return 0, fmt.Errorf("%w: another preheat of %s has held its lock for %s", ErrUnavailable, a.ID, ttl)
		}
		if err == nil && l.Held {
			break
		}
		select {
		case <-ctx.Done():
			giveBack()
			if err != nil {
				return 0, err
			}
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() { _ = s.ReleaseLease(context.WithoutCancel(ctx), name, holder) }()
	return s.PreheatLocked(ctx, a, force, now)
}

// PreheatLease names the lease every preheat of act runs under (the
// scheduled preheat takes it itself, then calls PreheatLocked).
func PreheatLease(act string) string { return "preheat:" + act }

// ErrEnded means preheat refused an activity whose keys would expire at
// once (end + key_ttl_after_end already past). It is a refusal, like
// ErrRunning: errors.Is(err, ErrRunning) holds too, so the callers that
// report refusals (the CLI, the admin API) go on with other activities.
var ErrEnded = errors.New("activity is over: its keys would expire at once")

// endedError is ErrEnded with the dates that make it so.
type endedError struct{ msg string }

func (e *endedError) Error() string { return e.msg }

func (e *endedError) Is(target error) bool { return target == ErrEnded || target == ErrRunning }

// ended refuses a preheat whose keys would all be written with an expiry
// in the past: Redis deletes them at once, and "created" would be a lie.
func ended(a *config.Activity, now time.Time) error {
	if exp := ExpireAt(a); exp <= now.UnixMilli() {
		return &endedError{msg: fmt.Sprintf("%v: %s ended at %s, and end + key_ttl_after_end (%s) is already past; nothing preheated (check start and end in the config)",
			ErrEnded, a.ID, a.End.UTC().Format(time.RFC3339), time.UnixMilli(exp).UTC().Format(time.RFC3339))}
	}
	return nil
}

// runningError is ErrRunning with a message of its own: a plain preheat
// refused because Redis holds a sale it would harm (an earlier sale of the
// id, a running sale's other stock, lost shards); the message says what
// and what to do.
type runningError struct{ msg string }

func (e *runningError) Error() string { return e.msg }

func (e *runningError) Is(target error) bool { return target == ErrRunning }

// earlierSale refuses a plain preheat of unchanged stock when a's window
// starts at or after the end the meta records and that sale sold units: a
// new sale reusing the id of one that ended, whose keys live on for
// key_ttl_after_end. Answered "unchanged", it opened on the old stock —
// SOLD_OUT for everyone, the old buyers at their limit — with status OK
// (red-team finding re15); a different stock was already refused. A
// preheat of the same sale (its start before its recorded end: run again,
// `end` extended) is not affected.
func (s *Store) earlierSale(ctx context.Context, a *config.Activity, meta map[string]string) error {
	end := atoi(meta[metaSaleEnd])
	if end <= 0 || a.Start.UnixMilli() < end {
		return nil
	}
	held := *a
	held.SKUs = metaSKUs(meta)
	st, err := s.Status(ctx, &held)
	if err != nil {
		return err
	}
	var sold, pending, remaining, initial int64
	for _, k := range st.SKUs {
		sold += k.Confirmed + k.Released
		pending += k.Pending
		remaining += k.Remaining
		initial += k.Initial
	}
	if sold+pending == 0 {
		return nil
	}
	return &runningError{msg: fmt.Sprintf("%v: %s holds the stock of a sale of that id that ended at %s (%d of %d units left, %d pending, %d confirmed or released), and this file's window starts at %s, after it: preheated as is, the new sale would open on that stock with its buyers at their limit. "+
		"Settle the old sale first (reconcile --repair, then status: nothing pending), then preheat --force to load the new stock; or give the new sale another id",
		ErrRunning, a.ID, time.UnixMilli(end).UTC().Format(time.RFC3339), remaining, initial, pending, sold, a.Start.UTC().Format(time.RFC3339))}
}

// refuseChange says why a plain preheat does not load a's stock over the
// sale Redis holds (meta; sold: units pending, confirmed, released), and
// what --force would cost. ErrRunning's own words, "use --force to
// overwrite its stock", sent an operator who raised a running sale's
// stock to a --force that deleted every reservation: the confirmed units
// went on sale again while the shop kept their orders, their buyers could
// buy again, and the pending buys were forgotten (red team rtb).
func refuseChange(a *config.Activity, meta map[string]string, running bool, sold [3]int64) error {
	what := fmt.Sprintf("%s is on sale (until %s)", a.ID, a.End.UTC().Format(time.RFC3339))
	if !running {
		what = a.ID + " has sold units"
	}
	diffs := stockDiffs(meta, a)
	if len(diffs) == 0 {
		diffs = []string{"shards or SKUs"}
	}
	return &runningError{msg: fmt.Sprintf("%s, and the config differs from the stock Redis holds for it (%s); Redis holds %d unit(s) reserved or sold (%d pending, %d confirmed) and %d released. "+
		"A sale's stock is not changed in place once it runs or sold units: --force deletes every reservation, so the confirmed units go on sale again while the shop keeps their orders, their buyers may buy again, and nothing settles the pending ones. "+
		"To keep the sale as it is, restore the file to what was preheated (preflight lists the differences)",
		what, strings.Join(diffs, "; "), sold[0]+sold[1], sold[0], sold[1], sold[2])}
}

// lostShards refuses to call a's stock unchanged when shard keys of it are
// missing while the meta says it is loaded: a cluster master restarted
// without persistence, a key evicted or deleted. "unchanged", exit 0, told
// an operator all was loaded over a sale that had lost a shard's units,
// holdings and reservations (red team rtb); a plain preheat cannot put
// them back (what the shard sold is the shop's to say), --force reloads
// everything.
func (s *Store) lostShards(ctx context.Context, a *config.Activity) error {
	st, err := s.Status(ctx, a)
	if err != nil {
		return err
	}
	var lost []string
	for _, k := range st.SKUs {
		if k.Preheated && k.MissingShards > 0 {
			lost = append(lost, fmt.Sprintf("sku %s: %d of %d shards missing", k.ID, k.MissingShards, a.Shards))
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return &runningError{msg: fmt.Sprintf("%s is preheated as configured, but Redis lost part of its stock (%s): a Redis node restarted without persistence, or keys evicted or deleted; the units, holdings and reservations those shards held are gone, and their buyers are answered NOT_READY. "+
		"Compare the shop's orders with status (reconcile, with verify.count_url); preheat --force reloads the whole activity, deleting every reservation it still holds",
		a.ID, strings.Join(lost, "; "))}
}

// metaLoading is the meta field a preheat sets (to its generation), with
// ready=0, before it touches a shard, and removes when it sets ready=1: a
// meta that has it is a preheat that never finished (a crash, a timeout,
// a refused command), whose old stock may be partly wiped. The SKU,
// shards and place fields keep describing the old stock until then, so
// the next preheat (plain or forced) wipes it again and loads the stock.
const metaLoading = "loading"

// PreheatLocked is Preheat for a caller that holds PreheatLease(a.ID).
func (s *Store) PreheatLocked(ctx context.Context, a *config.Activity, force bool, now time.Time) (PreheatOutcome, error) {
	if err := ended(a, now); err != nil {
		return 0, err
	}
	exp := ExpireAt(a)
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*s.timeout+5*time.Second)
	defer cancel()
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(a.ID)).Build()).AsStrMap()
	if err != nil {
		return 0, wrap(err)
	}
	outcome := PreheatCreated
	oldPlace := meta[placeField]
	// The stock generation: every shard's stock hash carries it (field g),
	// steals stamp their moves with it, and a move's units are deposited
	// only into stock of the same generation, so a steal taken from the
	// stock a forced preheat replaced never lands in the new stock.
	gen := max(now.UnixMilli(), atoi(meta["ver"])+1, atoi(meta[metaLoading])+1)
	if meta["ready"] != "1" && meta[metaLoading] != "" && len(metaSKUs(meta)) > 0 {
		// An earlier preheat stopped midway over older stock: what its
		// wipe left is no stock to keep (that preheat had already decided
		// to replace it). Finish the job: wipe what the meta names, load.
		outcome = PreheatOverwritten
	}
	if meta["ready"] == "1" {
		// Forced means "start over": even with the stock unchanged, the
		// reservations go (a rehearsal before the sale, a bench re-run).
		if sameStock(meta, a) && !force {
			if err := s.earlierSale(ctx, a, meta); err != nil {
				return 0, err
			}
			if err := s.lostShards(ctx, a); err != nil {
				return 0, err
			}
			// The window may have moved (an `end` extended after preheat):
			// keys must never expire before end + key_ttl_after_end.
			// The placement stays too: an activity preheated before
			// placement keeps its original tags until a forced preheat.
			if err := s.extendExpiry(cctx, c, a, oldPlace); err != nil {
				return 0, err
			}
			if err := s.recordSale(cctx, c, a, meta, exp); err != nil {
				return 0, err
			}
			if meta[metaFairSeed] == "" && now.Before(a.Start) {
				// Preheated by an older build: the fair_start key now,
				// never once the window may be open (a new key would
				// draw the held buyers new moments).
				if err := c.Do(cctx, c.B().Hsetnx().Key(s.MetaKey(a.ID)).Field(metaFairSeed).Value(newFairSeed()).Build()).Error(); err != nil {
					return 0, wrap(err)
				}
			}
			// Durable winners: an earlier preheat's stock and ready meta
			// on the replicas too (it may have failed in its own wait).
			if err := s.preheatDurable(cctx, c, a, oldPlace, false, exp); err != nil {
				return 0, err
			}
			if err := s.preheatDurable(cctx, c, a, oldPlace, true, exp); err != nil {
				return 0, err
			}
			s.learnPlacement(a.ID, meta)
			return PreheatUnchanged, nil
		}
		if !force {
			// Look for sales in the SKUs Redis holds, not the new config's:
			// a SKU dropped from the config would otherwise be wiped unseen.
			held := *a
			held.SKUs = metaSKUs(meta)
			st, err := s.Status(ctx, &held)
			if err != nil {
				return 0, err
			}
			running := !now.Before(a.Start) && now.Before(a.End)
			var sold [3]int64 // pending, confirmed, released
			for _, k := range st.SKUs {
				sold[0], sold[1], sold[2] = sold[0]+k.Pending, sold[1]+k.Confirmed, sold[2]+k.Released
			}
			if running || sold[0]+sold[1]+sold[2] > 0 {
				return 0, refuseChange(a, meta, running, sold)
			}
		}
		outcome = PreheatOverwritten
	}
	// On a cluster, the shards' tags are chosen now, before anything is
	// deleted: a cluster that cannot say its topology leaves all as it was.
	place, err := s.placement(cctx, c, a)
	if err != nil {
		return 0, err
	}
	// Not ready before any shard is touched: a preheat that stops midway
	// leaves a meta that says so (every proxy answers NOT_READY, as for
	// any activity not preheated, and the next preheat loads the stock),
	// never ready=1 over wiped shards. Only the fields preheat owns are
	// written, here and below: a pause landing meanwhile stays.
	for _, r := range c.DoMulti(cctx,
		c.B().Hset().Key(s.MetaKey(a.ID)).FieldValue().FieldValue("ready", "0").FieldValue(metaLoading, itoa(gen)).Build(),
		// The fair_start key: drawn once, kept by every later preheat
		// (a --force one in the window included: moments already drawn
		// stay the buyers' moments).
		c.B().Hsetnx().Key(s.MetaKey(a.ID)).Field(metaFairSeed).Value(newFairSeed()).Build(),
		// A meta made here has no lifetime yet (NX: only then).
		c.B().Pexpireat().Key(s.MetaKey(a.ID)).MillisecondsTimestamp(exp).Nx().Build(),
	) {
		if err := r.Error(); err != nil {
			return 0, wrap(err)
		}
	}
	if outcome == PreheatOverwritten {
		if err := s.wipe(cctx, c, a.ID, meta, place); err != nil {
			return 0, err
		}
	}
	// Every SKU's shards in pipelines of up to statusBatch commands, not a
	// round trip per shard of each SKU: 2,000 SKUs of 8 shards over a
	// Redis 1 ms away outlasted preheat's bound (cctx) and never loaded
	// (red team cat16).
	var cmds rueidis.Commands
	flush := func(atLeast int) error { return sendBatch(cctx, c, &cmds, atLeast) }
	for _, sku := range a.SKUs {
		k := s.keys.getPlaced(a.ID, sku.ID, a.Shards, place)
		for i, sk := range k.Shards {
			share := sku.Stock / int64(a.Shards)
			if int64(i) < sku.Stock%int64(a.Shards) {
				share++
			}
			cmds = append(cmds,
				c.B().Del().Key(sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Holders).Build(),
				c.B().Hset().Key(sk.Stock).FieldValue().FieldValue("r", itoa(share)).FieldValue("i", itoa(share)).
					FieldValue("p", "0").FieldValue("c", "0").FieldValue("x", "0").FieldValue("g", itoa(gen)).Build(),
				c.B().Pexpireat().Key(sk.Stock).MillisecondsTimestamp(exp).Build(),
				// A new epoch per preheat (ms << ~20 bits): a buyer remembered
				// at their limit in the stock this replaces is never matched
				// (see Store.memo), however many releases the old one saw.
				c.B().Set().Key(sk.Epoch).Value(itoa(gen)+"000000").Pxat(time.UnixMilli(exp)).Build(),
			)
			if share == 0 {
				cmds = append(cmds, c.B().Set().Key(sk.Out).Value("1").Pxat(time.UnixMilli(exp)).Build())
			}
			if err := flush(statusBatch); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(0); err != nil {
		return 0, err
	}
	// Durable winners: the stock on the replicas before ready=1 (§60).
	if err := s.preheatDurable(cctx, c, a, place, false, exp); err != nil {
		return 0, err
	}
	// The meta's fields, rewritten in place (never DEL + HSET: "paused",
	// set by a pause meanwhile, is not preheat's to write). First, while
	// ready is still 0, the fields of the old stock that the new one has
	// not (SKUs dropped, the placement of a single node) and the
	// scheduler's mark (the stock is then not the scheduler's, see
	// MarkScheduledPreheat); then ready=1 with the new stock's fields.
	stale := []string{metaScheduledBy}
	inConfig := make(map[string]bool, len(a.SKUs))
	for _, sku := range a.SKUs {
		inConfig[sku.ID] = true
	}
	for f := range meta {
		if id, ok := strings.CutPrefix(f, "sku:"); ok && !inConfig[id] {
			stale = append(stale, f)
		}
	}
	fv := c.B().Hset().Key(s.MetaKey(a.ID)).FieldValue().FieldValue("shards", strconv.Itoa(a.Shards)).
		FieldValue("ver", itoa(gen)).FieldValue("ready", "1")
	for _, sku := range a.SKUs {
		fv = fv.FieldValue("sku:"+sku.ID, itoa(sku.Stock))
	}
	// The sale as this preheat loads it (RecordedSales): a new stock
	// starts a new record, routes included.
	sale, unset := saleFields(a, nil)
	for i := 0; i < len(sale); i += 2 {
		fv = fv.FieldValue(sale[i], sale[i+1])
	}
	stale = append(stale, unset...)
	if place != "" {
		fv = fv.FieldValue(placeField, place)
	} else {
		stale = append(stale, placeField)
	}
	for _, r := range c.DoMulti(cctx,
		c.B().Hdel().Key(s.MetaKey(a.ID)).Field(stale...).Build(),
		fv.Build(),
		c.B().Hdel().Key(s.MetaKey(a.ID)).Field(metaLoading).Build(),
		c.B().Pexpireat().Key(s.MetaKey(a.ID)).MillisecondsTimestamp(exp).Build(),
		// The registry of preheated activities (DroppedActivities).
		c.B().Zadd().Key(s.activitiesKey()).ScoreMember().ScoreMember(float64(exp), a.ID).Build(),
		c.B().Zremrangebyscore().Key(s.activitiesKey()).Min("-inf").Max("("+itoa(now.UnixMilli())).Build(),
		c.B().Pexpireat().Key(s.activitiesKey()).MillisecondsTimestamp(exp).Nx().Build(),
		c.B().Pexpireat().Key(s.activitiesKey()).MillisecondsTimestamp(exp).Gt().Build(),
	) {
		if err := r.Error(); err != nil {
			return 0, wrap(err)
		}
	}
	if err := s.preheatDurable(cctx, c, a, place, true, exp); err != nil {
		return 0, err
	}
	s.keys.setPlace(a.ID, place)
	if strings.HasSuffix(a.ID, config.ShadowSuffix) {
		// A shadow copy's new stock starts a new report (shadow.go).
		if err := s.resetShadow(cctx, c, a.ID); err != nil {
			return 0, err
		}
	}
	s.awaitOwnPreheat(cctx, a.ID)
	// The sale's first burst finds its scripts compiled on every node
	// (seed 002 §4.2): not one EVAL of the whole script per buy in flight.
	if err := s.LoadScripts(cctx); err != nil {
		s.log.Warn("preheat: scripts not loaded; buys load them on first use", zap.String("activity", a.ID), zap.Error(err))
	}
	return outcome, nil
}

// awaitOwnPreheat waits (at most a second) until this client's
// client-side cached flags show the preheat it just wrote: Redis sends the
// invalidation of a key a connection tracks after that connection's own
// write is answered, so for a moment this process (a proxy whose serve
// ran the scheduled preheat, a test) would still read "not preheated" and
// answer NOT_READY.
func (s *Store) awaitOwnPreheat(ctx context.Context, act string) {
	deadline := time.Now().Add(time.Second)
	for {
		if f, err := s.Flags(ctx, act); err != nil || f.Ready || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// placement chooses the tags of a's shards on a cluster and returns the
// meta's "place" field for them; "" on a single node (original tags, and
// no round trip).
func (s *Store) placement(ctx context.Context, c rueidis.Client, a *config.Activity) (string, error) {
	t, err := s.clusterTopology(ctx, c)
	if errors.Is(err, errNotCluster) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.Join(placeShards(s.prefix, a.ID, a.Shards, t), ","), nil
}

// metaSKUs is the SKUs a meta hash names (its "sku:<id>" fields) with
// their preheated stock, sorted by id.
func metaSKUs(meta map[string]string) []config.SKU {
	var out []config.SKU
	for f, v := range meta {
		if id, ok := strings.CutPrefix(f, "sku:"); ok {
			out = append(out, config.SKU{ID: id, Stock: atoi(v)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// droppedSKUs is the SKUs a ready meta names that a's config does not.
func droppedSKUs(meta map[string]string, a *config.Activity) []config.SKU {
	if meta["ready"] != "1" {
		return nil
	}
	var out []config.SKU
	for _, k := range metaSKUs(meta) {
		if a.SKU(k.ID) == nil {
			out = append(out, k)
		}
	}
	return out
}

// WithHeldSKUs returns a copy of a whose SKUs are the config's and then
// those Redis still holds for the activity that the config no longer
// names (dropped after preheat), with the ids of the latter. Their
// reservations must still be settled: the reconciler walks this list.
// a itself is returned when nothing was dropped.
func (s *Store) WithHeldSKUs(ctx context.Context, a *config.Activity) (*config.Activity, []string, error) {
	c, err := s.Client()
	if err != nil {
		return a, nil, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(a.ID)).Build()).AsStrMap()
	if err != nil {
		return a, nil, wrap(err)
	}
	dropped := droppedSKUs(meta, a)
	if len(dropped) == 0 {
		return a, nil, nil
	}
	held := *a
	held.SKUs = append(append([]config.SKU(nil), a.SKUs...), dropped...)
	ids := make([]string, len(dropped))
	for i, k := range dropped {
		ids[i] = k.ID
	}
	return &held, ids, nil
}

// StockDrift compares what was preheated for a (its meta hash) with a's
// config and says each difference (stock, shards, SKUs added or
// dropped); nil when they agree or a is not preheated. A plain preheat
// would answer "unchanged" only when this is nil.
func (s *Store) StockDrift(ctx context.Context, a *config.Activity) ([]string, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(a.ID)).Build()).AsStrMap()
	if err != nil {
		return nil, wrap(err)
	}
	if meta["ready"] != "1" || sameStock(meta, a) {
		return nil, nil
	}
	return stockDiffs(meta, a), nil
}

// stockDiffs says each difference between a preheated meta and a's
// config: stock, shards, SKUs added or dropped.
func stockDiffs(meta map[string]string, a *config.Activity) []string {
	var out []string
	if meta["shards"] != strconv.Itoa(a.Shards) {
		out = append(out, fmt.Sprintf("shards: %d in the config, %s preheated", a.Shards, meta["shards"]))
	}
	for _, sku := range a.SKUs {
		v, ok := meta["sku:"+sku.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("sku %s: in the config (stock %d), not preheated", sku.ID, sku.Stock))
		case v != itoa(sku.Stock):
			out = append(out, fmt.Sprintf("sku %s: stock %d in the config, %s preheated", sku.ID, sku.Stock, v))
		}
	}
	for _, k := range droppedSKUs(meta, a) {
		out = append(out, fmt.Sprintf("sku %s: preheated (stock %d), not in the config", k.ID, k.Stock))
	}
	return out
}

// The meta's record of the sale, written by every preheat: what a serve
// that starts needs to judge whether its file opens a running sale's buy
// path to the shop (proxy.OpenedSalesAtStart), having no earlier config to
// compare with. A meta without them was preheated by an older build.
const (
	metaSaleEnd    = "sale_end"    // end, unix ms
	metaSaleUntil  = "sale_until"  // end + pending_timeout, unix ms: the sale runs until then
	metaSaleMode   = "sale_mode"   // mode (sync, queue)
	metaSaleShadow = "sale_shadow" // "1": the copy of a shadow activity
	metaSaleRoute  = "sale_route"  // buy route: "METHOD CASE PATH", CASE 1 if case_sensitive else 0
	metaSaleBundle = "sale_bundle" // bundle route, as sale_route; absent without one
)

// saleFields returns the meta fields (name, value pairs) recording a's
// sale and the fields to delete (a bundle route no longer there). With
// meta, the record of an earlier preheat of the same stock (a plain
// preheat finding it unchanged): its routes and mode stay as recorded
// (they are the running sale's, while a reload or restart refuses to move
// them: a preheat with a file that moved them must not erase the old
// path), and its end moves only later.
func saleFields(a *config.Activity, meta map[string]string) (set, unset []string) {
	end, until := a.End.UnixMilli(), a.End.Add(a.PendingTimeout).UnixMilli()
	if meta[metaSaleRoute] != "" {
		end, until = max(end, atoi(meta[metaSaleEnd])), max(until, atoi(meta[metaSaleUntil]))
		return []string{metaSaleEnd, itoa(end), metaSaleUntil, itoa(until)}, nil
	}
	shadow := "0"
	if a.IsShadowCopy() || a.IsShadow() || strings.HasSuffix(a.ID, config.ShadowSuffix) {
		shadow = "1"
	}
	route := func(method, path string, caseSensitive bool) string {
		cs := "0"
		if caseSensitive {
			cs = "1"
		}
		return method + " " + cs + " " + path
	}
	set = []string{metaSaleEnd, itoa(end), metaSaleUntil, itoa(until), metaSaleMode, a.Mode, metaSaleShadow, shadow,
		metaSaleRoute, route(a.Route.Method, a.Route.Path, a.Route.CaseSensitive)}
	if b := &a.BundleRoute; b.Enabled() {
		set = append(set, metaSaleBundle, route(b.Method, b.Path, b.CaseSensitive))
	} else {
		unset = []string{metaSaleBundle}
	}
	return set, unset
}

// recordSale writes saleFields(a, meta) for a plain preheat that found
// the stock unchanged, and raises the registry's score to the keys' new
// expiry (an end moved later).
func (s *Store) recordSale(ctx context.Context, c rueidis.Client, a *config.Activity, meta map[string]string, exp int64) error {
	set, unset := saleFields(a, meta)
	fv := c.B().Hset().Key(s.MetaKey(a.ID)).FieldValue()
	for i := 0; i < len(set); i += 2 {
		fv = fv.FieldValue(set[i], set[i+1])
	}
	cmds := rueidis.Commands{fv.Build(),
		c.B().Zadd().Key(s.activitiesKey()).Gt().ScoreMember().ScoreMember(float64(exp), a.ID).Build(),
		c.B().Pexpireat().Key(s.activitiesKey()).MillisecondsTimestamp(exp).Nx().Build(),
		c.B().Pexpireat().Key(s.activitiesKey()).MillisecondsTimestamp(exp).Gt().Build(),
	}
	if len(unset) > 0 {
		cmds = append(cmds, c.B().Hdel().Key(s.MetaKey(a.ID)).Field(unset...).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// RecordedSales returns, sorted by id, the activities of the registry
// (preheated, keys not expired, ready) as their last preheat recorded
// their sale: id, mode, route, bundle route, end and pending_timeout, the
// rest zero. Shadow copies are left out (a shadow run admits nothing, so
// no sale of theirs opens). unrecorded names those preheated by an older
// build, whose meta holds no such record.
func (s *Store) RecordedSales(ctx context.Context, now time.Time) (sales []config.Activity, unrecorded []string, err error) {
	c, err := s.Client()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := c.Do(cctx, c.B().Zrange().Key(s.activitiesKey()).Min("("+itoa(now.UnixMilli())).Max("+inf").Byscore().Build()).AsStrSlice()
	if err != nil {
		return nil, nil, wrap(err)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if strings.HasSuffix(id, config.ShadowSuffix) {
			continue
		}
		mctx, mcancel := s.ctx(ctx)
		meta, err := c.Do(mctx, c.B().Hgetall().Key(s.MetaKey(id)).Build()).AsStrMap()
		mcancel()
		if err != nil {
			return sales, unrecorded, wrap(err)
		}
		if meta["ready"] != "1" || meta[metaSaleShadow] == "1" {
			continue // expired, never finished, or a shadow copy
		}
		method, rest, ok1 := strings.Cut(meta[metaSaleRoute], " ")
		cs, path, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || meta[metaSaleUntil] == "" {
			unrecorded = append(unrecorded, id)
			continue
		}
		end := time.UnixMilli(atoi(meta[metaSaleEnd]))
		a := config.Activity{ID: id, Mode: meta[metaSaleMode], End: end,
			PendingTimeout: time.UnixMilli(atoi(meta[metaSaleUntil])).Sub(end),
			Route:          config.Route{Method: method, Path: path, CaseSensitive: cs == "1"}}
		if bm, rest, ok := strings.Cut(meta[metaSaleBundle], " "); ok {
			if cs, path, ok := strings.Cut(rest, " "); ok {
				a.BundleRoute = config.BundleRoute{Method: bm, Path: path, CaseSensitive: cs == "1"}
			}
		}
		sales = append(sales, a)
	}
	return sales, unrecorded, nil
}

// activitiesKey is a sorted set of every activity preheated, scored by
// when its keys expire (ExpireAt): how DroppedActivities finds the
// activities a config no longer names without scanning the keyspace.
func (s *Store) activitiesKey() string { return s.prefix + ":{activities}:preheated" }

// DroppedActivities returns, sorted, the activities whose stock Redis
// still holds (preheated, keys not expired) that known does not name; a
// shadow activity's id and its copy's count as one. Only activities
// preheated by this version or later are known to Redis this way.
func (s *Store) DroppedActivities(ctx context.Context, known []string, now time.Time) ([]*config.Activity, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := c.Do(cctx, c.B().Zrange().Key(s.activitiesKey()).Min("("+itoa(now.UnixMilli())).Max("+inf").Byscore().Build()).AsStrSlice()
	if err != nil {
		return nil, wrap(err)
	}
	skip := map[string]bool{}
	for _, id := range known {
		base := strings.TrimSuffix(id, config.ShadowSuffix)
		skip[base], skip[config.ShadowID(base)] = true, true
	}
	var out []*config.Activity
	sort.Strings(ids)
	for _, id := range ids {
		if skip[id] {
			continue
		}
		mctx, mcancel := s.ctx(ctx)
		meta, err := c.Do(mctx, c.B().Hgetall().Key(s.MetaKey(id)).Build()).AsStrMap()
		mcancel()
		if err != nil {
			return out, wrap(err)
		}
		shards, _ := strconv.Atoi(meta["shards"])
		if meta["ready"] != "1" || shards <= 0 {
			continue // expired, or never finished: no reservations to settle
		}
		out = append(out, &config.Activity{ID: id, Shards: shards, SKUs: metaSKUs(meta)})
	}
	return out, nil
}

func sameStock(meta map[string]string, a *config.Activity) bool {
	if meta["shards"] != strconv.Itoa(a.Shards) {
		return false
	}
	n := 0
	for f := range meta {
		if strings.HasPrefix(f, "sku:") {
			n++
		}
	}
	if n != len(a.SKUs) {
		return false
	}
	for _, sku := range a.SKUs {
		if meta["sku:"+sku.ID] != itoa(sku.Stock) {
			return false
		}
	}
	return true
}

// wipe deletes every shard key of the SKUs an earlier preheat wrote (with
// the placement that preheat chose). When the new preheat places the
// shards elsewhere (place differs), the old shards' request-id bitsets and
// fences go too, each fence's token carried to the new shard first, so a
// reconciler that lost its lease stays fenced off after the move.
func (s *Store) wipe(ctx context.Context, c rueidis.Client, act string, meta map[string]string, place string) error {
	shards, _ := strconv.Atoi(meta["shards"])
	moved := meta[placeField] != place
	var dels rueidis.Commands // pipelined, as preheat's writes (red team cat16)
	flush := func(atLeast int) error { return sendBatch(ctx, c, &dels, atLeast) }
	for f := range meta {
		sku, ok := strings.CutPrefix(f, "sku:")
		if !ok || shards <= 0 {
			continue
		}
		for _, sk := range s.keys.getPlaced(act, sku, shards, meta[placeField]).Shards {
			del := c.B().Del().Key(sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Epoch, sk.Holders).Build()
			if moved {
				del = c.B().Del().Key(sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Epoch, sk.RidBits, sk.Holders).Build()
			}
			if dels = append(dels, del); len(dels) >= statusBatch {
				if err := flush(statusBatch); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(0); err != nil {
		return err
	}
	if moved {
		return s.moveFences(ctx, c, act, shards, meta[placeField], place)
	}
	return nil
}

// moveFences carries each old shard's reconciler fence (the highest
// fencing token it saw) to the new shard of the same index, never
// lowering one there, and deletes the old fence. Shards whose tag stays
// keep their fence as it is.
func (s *Store) moveFences(ctx context.Context, c rueidis.Client, act string, shards int, from, to string) error {
	oldSalts, newSalts := parsePlace(from, shards), parsePlace(to, -1)
	saltOf := func(salts []string, i int) string {
		if i < len(salts) {
			return salts[i]
		}
		return ""
	}
	for i := 0; i < shards; i++ {
		old := shardBase(s.prefix, act, i, saltOf(oldSalts, i)) + "fence"
		nk := shardBase(s.prefix, act, i, saltOf(newSalts, i)) + "fence"
		if old == nk {
			continue
		}
		v, err := c.Do(ctx, c.B().Get().Key(old).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return wrap(err)
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(old).Build()).AsInt64()
		if err != nil {
			return wrap(err)
		}
		if err := c.Do(ctx, c.B().Eval().Script(raiseFence).Numkeys(1).Key(nk).Arg(v, itoa(ttl)).Build()).Error(); err != nil {
			return wrap(err)
		}
		if err := c.Do(ctx, c.B().Del().Key(old).Build()).Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// raiseFence sets a fence key to ARGV[1] unless it holds a higher token,
// expiring in ARGV[2] ms (none when not positive).
const raiseFence = `local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > seen then
  if tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
end
return 1`

// SKUStatus is one SKU's stock as Redis holds it. Released units are
// already inside Remaining.
type SKUStatus struct {
	ID        string `json:"id"`
	Initial   int64  `json:"initial"`
	Remaining int64  `json:"remaining"`
	Pending   int64  `json:"pending"`
	Confirmed int64  `json:"confirmed"`
	Released  int64  `json:"released"`
	// InTransit counts units moving between shards (inside Remaining).
	InTransit int64 `json:"in_transit"`
	// MissingShards counts shards whose stock key is gone while the meta
	// says preheated (expired, evicted, a node restarted empty).
	MissingShards int  `json:"missing_shards,omitempty"`
	Preheated     bool `json:"preheated"`
	// NotInConfig marks a SKU Redis holds (preheated) that the config no
	// longer names: its reservations are still settled by the reconciler.
	NotInConfig bool `json:"not_in_config,omitempty"`
	OK          bool `json:"ok"`
	// Problem says what breaks the invariant when OK is false.
	Problem string `json:"problem,omitempty"`
}

// ActivityStatus is every SKU of one activity.
type ActivityStatus struct {
	ID     string      `json:"id"`
	Paused bool        `json:"paused"`
	SKUs   []SKUStatus `json:"skus"`
	// Placement is the shards per master on a cluster (see WithPlacement;
	// Status leaves it out), PlacementError why it could not be read.
	Placement      *Placement `json:"placement,omitempty"`
	PlacementError string     `json:"placement_error,omitempty"`
}

// OK reports whether every SKU keeps the stock invariant.
func (a ActivityStatus) OK() bool {
	for _, s := range a.SKUs {
		if !s.OK {
			return false
		}
	}
	return true
}

// Status reads every shard's counters and checks, per SKU,
// initial = remaining + pending + confirmed, per shard and in total, and
// that nothing is negative or confirmed beyond initial. The SKUs are the
// config's, then those Redis holds that the config no longer names
// (NotInConfig).
func (s *Store) Status(ctx context.Context, a *config.Activity) (ActivityStatus, error) {
	c, err := s.Client()
	if err != nil {
		return ActivityStatus{}, err
	}
	// A few round trips (one per node): answer within seconds, so the
	// dashboard, /admin/status and the CLI say "unavailable" promptly when
	// Redis is down instead of waiting out read retries.
	cctx, cancel := context.WithTimeout(ctx, max(10*s.timeout, 2*time.Second))
	defer cancel()
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(a.ID)).Build()).AsStrMap()
	if err != nil {
		return ActivityStatus{}, wrap(err)
	}
	out := ActivityStatus{ID: a.ID, Paused: meta["paused"] == "1"}
	shards, _ := strconv.Atoi(meta["shards"])
	skus := a.SKUs
	if dropped := droppedSKUs(meta, a); len(dropped) > 0 {
		skus = append(append([]config.SKU(nil), a.SKUs...), dropped...)
	}
	if len(skus) > 0 {
		out.SKUs = make([]SKUStatus, len(skus))
	}
	var read []int // indexes of the SKUs to read
	keys := make([]*SKUKeys, len(skus))
	for i, sku := range skus {
		st := SKUStatus{ID: sku.ID, OK: true, NotInConfig: i >= len(a.SKUs)}
		init, preheated := meta["sku:"+sku.ID]
		if meta["ready"] == "1" && preheated && shards > 0 {
			st.Preheated = true
			st.Initial = atoi(init)
			keys[i] = s.keys.getPlaced(a.ID, sku.ID, shards, meta[placeField])
			read = append(read, i)
		}
		out.SKUs[i] = st
	}
	// Each shard is read atomically, the shards one after the other (on
	// a cluster, per node in parallel): a steal lowers its donor before
	// the deposit raises the taker, but a read may see the taker after
	// its deposit and the donor before its steal, and count a unit
	// twice (in transit below zero) in a healthy sale (red-team
	// finding: 7–16 of 500 reads during steals on a cluster). That
	// cannot be, so it is read again; only what persists is a problem.
	//
	// Every SKU's shards go in one pipeline (per statusBatch reads), not
	// one round trip per SKU: 3,000 SKUs over a Redis 1 ms away took
	// longer than the bound above, and status, the dashboard, /metrics'
	// stock gauges and the public activity page never completed (red
	// team cat16).
	for try := 0; len(read) > 0; try++ {
		got, err := s.skusCounters(cctx, c, keys, out.SKUs, read)
		if err != nil {
			return ActivityStatus{}, err
		}
		again := read[:0:0]
		for _, i := range read {
			if got[i].InTransit >= 0 || try == 4 {
				out.SKUs[i] = got[i]
			} else {
				again = append(again, i)
			}
		}
		if read = again; len(read) > 0 {
			time.Sleep(time.Duration(try+1) * 5 * time.Millisecond)
		}
	}
	return out, nil
}

// sendBatch sends *cmds in one pipeline once it holds at least atLeast
// commands (any, for 0), and empties it: the first error reply or failed
// call is returned.
func sendBatch(ctx context.Context, c rueidis.Client, cmds *rueidis.Commands, atLeast int) error {
	if len(*cmds) < atLeast || len(*cmds) == 0 {
		return nil
	}
	for _, r := range c.DoMulti(ctx, *cmds...) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	*cmds = (*cmds)[:0]
	return nil
}

// statusBatch bounds the reads of one DoMulti call of Status.
const statusBatch = 4096

// skusCounters reads the SKUs at indexes read (keys[i], sts[i] with ID and
// Initial set) in batches and returns them, by index, checked (see Status).
func (s *Store) skusCounters(ctx context.Context, c rueidis.Client, keys []*SKUKeys, sts []SKUStatus, read []int) (map[int]SKUStatus, error) {
	got := make(map[int]SKUStatus, len(read))
	for len(read) > 0 {
		n, size := 0, 0
		for n < len(read) && (n == 0 || size+len(keys[read[n]].Shards) <= statusBatch) {
			size += len(keys[read[n]].Shards)
			n++
		}
		cmds := make(rueidis.Commands, 0, size)
		for _, i := range read[:n] {
			for _, sk := range keys[i].Shards {
				cmds = append(cmds, c.B().Hmget().Key(sk.Stock).Field("r", "i", "p", "c", "x").Build())
			}
		}
		res := c.DoMulti(ctx, cmds...)
		for _, i := range read[:n] {
			st, err := skuCounters(res[:len(keys[i].Shards)], sts[i])
			if err != nil {
				return nil, err
			}
			got[i] = st
			res = res[len(keys[i].Shards):]
		}
		read = read[n:]
	}
	return got, nil
}

// skuCounters adds up one SKU's shards, read into res, into st (ID,
// Initial set) and checks them (see Status).
func skuCounters(res []rueidis.RedisResult, st SKUStatus) (SKUStatus, error) {
	var sumI int64
	for i, r := range res {
		arr, err := r.ToArray()
		if err != nil {
			return st, wrap(err)
		}
		var v [5]int64
		for j := range arr {
			if j < 5 {
				v[j], _ = arr[j].AsInt64()
			}
		}
		st.Remaining += v[0]
		sumI += v[1]
		st.Pending += v[2]
		st.Confirmed += v[3]
		st.Released += v[4]
		if arr[1].IsNil() {
			st.OK, st.Problem = false, "shard "+strconv.Itoa(i)+" is missing (expired or deleted)"
			st.MissingShards++
		}
		if v[0] < 0 || v[2] < 0 || v[3] < 0 || v[0]+v[2]+v[3] != v[1] {
			st.OK, st.Problem = false, "shard "+strconv.Itoa(i)+": remaining+pending+confirmed != initial"
		}
	}
	st.InTransit = st.Initial - sumI
	st.Remaining += st.InTransit
	if st.InTransit < 0 {
		st.OK, st.Problem = false, "shards hold more than the initial stock"
	}
	if st.Confirmed > st.Initial {
		st.OK, st.Problem = false, "oversold: confirmed > initial"
	}
	if st.Initial != st.Remaining+st.Pending+st.Confirmed && st.Problem == "" {
		st.OK, st.Problem = false, "initial != remaining+pending+confirmed"
	}
	return st, nil
}

// SettleMoves finishes stock moves older than age whose deposit never ran,
// and forgets the ones that landed. It returns how many it deposited.
func (s *Store) SettleMoves(ctx context.Context, a *config.Activity, age time.Duration, now time.Time) (int, error) {
	return s.settleMoves(ctx, a, age, now, nil)
}

// SettleMovesFenced is SettleMoves under the reconciler's fencing token:
// deposits stop with ErrFenced once a newer lease holder has repaired.
func (s *Store) SettleMovesFenced(ctx context.Context, a *config.Activity, age time.Duration, now time.Time, f Fence) (int, error) {
	return s.settleMoves(ctx, a, age, now, &f)
}

func (s *Store) settleMoves(ctx context.Context, a *config.Activity, age time.Duration, now time.Time, f *Fence) (int, error) {
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	deposit := s.deposit
	if f != nil {
		deposit = s.fencedDeposit
	}
	exp := itoa(ExpireAt(a))
	n := 0
	// A shard's moves hash is shared by the activity's SKUs: read once per
	// shard for all of them, not once per SKU (SKUs × shards HGETALLs of
	// every SKU's moves per repairing pass; red team cat16's left item).
	keys := make(map[string]*SKUKeys, len(a.SKUs))
	var first *SKUKeys
	for _, sku := range a.SKUs {
		k, err := s.skuKeys(ctx, a.ID, sku.ID, a.Shards)
		if err != nil {
			return n, err
		}
		keys[sku.ID], first = k, k
	}
	if first == nil {
		return 0, nil
	}
	for shard := range first.Shards {
		cctx, cancel := s.ctx(ctx)
		moves, err := c.Do(cctx, c.B().Hgetall().Key(first.Shards[shard].Moves).Build()).AsStrMap()
		cancel()
		if err != nil {
			return n, wrap(err)
		}
		for id, v := range moves {
			// "<sku>:<move id>"; moves of SKUs no longer configured stay.
			skuID, _, _ := strings.Cut(id, ":")
			k := keys[skuID]
			if k == nil {
				continue
			}
			donor := k.Shards[shard]
			// "<home>|<units>|<ms>|<generation>" ("<home>|<units>|<ms>"
			// before generations); home -1 is a settled steal's tombstone.
			parts := strings.Split(v, "|")
			if len(parts) != 3 && len(parts) != 4 {
				continue
			}
			home, _ := strconv.Atoi(parts[0])
			if home >= len(k.Shards) || now.UnixMilli()-atoi(parts[2]) < age.Milliseconds() {
				continue
			}
			gen := ""
			if len(parts) == 4 {
				gen = parts[3]
			}
			if home < 0 {
				// A tombstone outlived any late steal it was left for.
				cctx, cancel := s.ctx(ctx)
				err := c.Do(cctx, c.B().Hdel().Key(donor.Moves).Field(id).Build()).Error()
				cancel()
				if err != nil {
					return n, wrap(err)
				}
				continue
			}
			if s.DurableWinners() {
				// Deposited only once the donor's replicas hold the steal
				// (see settleMoveLater); left for a later pass otherwise.
				if ok, _, _ := s.waitShard(ctx, c, donor, id, ExpireAt(a)); !ok {
					continue
				}
			}
			hk := k.Shards[home]
			cctx, cancel := s.ctx(ctx)
			keys, args := []string{hk.Stock, hk.Out, hk.MovesIn}, []string{id, parts[1], exp, gen}
			if f != nil {
				keys, args = f.wrap(keys, args, hk)
			}
			r, err := ints(deposit.Exec(cctx, c, keys, args))
			cancel()
			if err != nil {
				return n, err
			}
			if lua.Code(r[0]) == lua.Fenced {
				return n, ErrFenced
			}
			if lua.Code(r[0]) == lua.OK {
				n++
			}
			if lua.Code(r[0]) == lua.NotReady || lua.Code(r[0]) == lua.Stale {
				continue
			}
			cctx, cancel = s.ctx(ctx)
			err = c.Do(cctx, c.B().Hdel().Key(donor.Moves).Field(id).Build()).Error()
			cancel()
			if err != nil {
				return n, wrap(err)
			}
		}
	}
	return n, nil
}

// extendExpiry moves every key of the activity (its shards placed as
// place says) to expire at ExpireAt(a) when that is later than its
// current expiry (PEXPIREAT GT: never sooner).
//
// The meta goes last: KeepKeysFor reads its expiry as "every key moved".
func (s *Store) extendExpiry(ctx context.Context, c rueidis.Client, a *config.Activity, place string) error {
	exp := ExpireAt(a)
	var cmds rueidis.Commands
	for _, sku := range a.SKUs {
		for _, sk := range s.keys.getPlaced(a.ID, sku.ID, a.Shards, place).Shards {
			for _, key := range []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Fence, sk.Epoch, sk.RidBits, sk.Holders} {
				cmds = append(cmds, c.B().Pexpireat().Key(key).MillisecondsTimestamp(exp).Gt().Build())
			}
		}
	}
	cmds = append(cmds, c.B().Pexpireat().Key(s.MetaKey(a.ID)).MillisecondsTimestamp(exp).Gt().Build())
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// KeepKeysFor moves the keys of a's preheated stock (as its meta says it
// was loaded: shards, placement, SKUs) to expire no sooner than
// ExpireAt(a), and the recorded sale's end no sooner than a's, as a plain
// preheat of unchanged stock does. A reload or restart that moved `end` or
// key_ttl_after_end later left them expiring by the file of the preheat:
// before a reservation pending at the new end could be settled, or in the
// middle of the longer sale (red-team finding re15: the stock, the
// reservations and the buyers' holdings gone, status "not preheated").
// Never sooner (PEXPIREAT GT); an activity not preheated is left alone.
// One PTTL when nothing is to move.
func (s *Store) KeepKeysFor(ctx context.Context, a *config.Activity) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, max(10*s.timeout, 2*time.Second))
	defer cancel()
	exp := ExpireAt(a)
	ttl, err := c.Do(cctx, c.B().Pttl().Key(s.MetaKey(a.ID)).Build()).AsInt64()
	if err != nil {
		return wrap(err)
	}
	if ttl == -2 || (ttl >= 0 && time.Now().UnixMilli()+ttl >= exp) {
		return nil // no meta, or every key already lives that long
	}
	meta, err := c.Do(cctx, c.B().Hgetall().Key(s.MetaKey(a.ID)).Build()).AsStrMap()
	if err != nil {
		return wrap(err)
	}
	shards, _ := strconv.Atoi(meta["shards"])
	if meta["ready"] != "1" || shards <= 0 {
		return nil
	}
	held := *a
	held.Shards, held.SKUs = shards, metaSKUs(meta)
	if err := s.extendExpiry(cctx, c, &held, meta[placeField]); err != nil {
		return err
	}
	return s.recordSale(cctx, c, a, meta, exp)
}

// SettingsWarnings checks the Redis settings a sale depends on, on every
// node, and says what is risky: an eviction policy that may drop stock or
// reservation keys, and (on a cluster) full-coverage mode, which stops
// live masters while a failed one is replaced. Nodes that refuse CONFIG
// (managed Redis) are skipped: not knowing is not a warning.
func (s *Store) SettingsWarnings(ctx context.Context) []string {
	c, err := s.Client()
	if err != nil {
		return nil
	}
	var out []string
	for addr, n := range c.Nodes() {
		cctx, cancel := s.ctx(ctx)
		m, err := n.Do(cctx, n.B().ConfigGet().Parameter("maxmemory", "maxmemory-policy", "cluster-enabled", "cluster-require-full-coverage").Build()).AsStrMap()
		cancel()
		if err != nil {
			continue
		}
		for _, w := range []string{EvictionWarning(addr, m), FullCoverageWarning(addr, m)} {
			if w != "" {
				out = append(out, w)
			}
		}
	}
	sort.Strings(out)
	return out
}
