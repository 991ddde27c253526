package reservation

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/store"
)

// durable is a queue worker's wait for replicas (redis.durable_winners)
// between the claim and the request to the shop: one WAIT on the shard's
// node covers the buyer's reserve and this claim, so the shop never sees a
// reservation a failover could take back. It reports whether to send the
// reservation.
//
// With on_timeout: refuse, a wait that fails defers the entry (deferEntry):
// nothing is sent and nothing released, the entry stays unacknowledged and
// comes back to this worker after a back-off (docs/decisions.md §56). The
// buyer was told QUEUED only once the replicas held the reservation (the
// stream entry is written after the buyer's own wait, §53), so what the
// failed wait could lose is this claim alone: sent now, a promoted replica
// would hold the reservation still queued and send it again. Released now
// (as before §56), a buyer told QUEUED lost a durable reservation to a
// replica resyncing for a second. The redelivery waits for the replicas
// before it claims again (preWait), so a claim that keeps failing never
// re-stamps the send time: the reconciler's pending_timeout, counted from
// the first claim, settles it if the replicas never come back (verify.url
// says absent: released).
func (aq *actQueue) durable(ctx context.Context, tok store.Token, j *job) bool {
	st := aq.q.st
	ok, err := aq.waitReplicas(ctx, tok, j)
	switch {
	case ok:
		aq.countDurable(store.DurableOK.String())
		return true
	case !st.DurableRefuses():
		aq.countDurable(store.DurableLate.String())
		aq.q.log.Warn("queue: the wait for replicas failed (not acknowledged in time, or Redis did not answer); sending anyway (on_timeout: forward)",
			zap.String("token", j.e.Token), zap.Error(err))
		return true
	}
	aq.deferEntry(j, err)
	return false
}

// preWait is the wait for the replicas before a worker claims a
// reservation that is pending already (a redelivered entry: one deferred
// by durable, or a dead worker's): the claim would re-stamp its send time,
// and a claim made only to be deferred again would push the reconciler's
// pending_timeout back for as long as the replicas stay away. It reports
// whether to go on to the claim (durable winners off or forwarding:
// always); when not, the entry is deferred.
func (aq *actQueue) preWait(ctx context.Context, j *job, res store.Reservation) bool {
	st := aq.q.st
	if !st.DurableWinners() || !st.DurableRefuses() || res.State != store.StatePending {
		return true
	}
	ok, err := aq.waitReplicas(ctx, res.Token, j)
	if ok {
		return true
	}
	aq.deferEntry(j, err)
	return false
}

// errBehind is a wait not made: another of the shard's failed moments ago.
var errBehind = errors.New("the shard's replicas did not acknowledge a wait moments ago; not asked again before its back-off ends")

// waitReplicas is store.WaitReplicas behind the shard's gate
// (actQueue.behind): with on_timeout: refuse, a wait that fails closes the
// gate of the token's shard for a back-off (deferFirst, doubling up to
// deferMax while the waits keep failing). Until it ends the shard's other
// entries are deferred without a WAIT of their own, and the reader does not
// hand out its deferred ones (notDeferred); then one worker probes, the
// others still defer. A WAIT blocking `timeout` for every deferred entry
// every second kept the workers busy failing, and on a cluster a node whose
// replica is away, with a backlog on its shards, would keep them from every
// other node's entries. With forward, every entry waits, as before.
func (aq *actQueue) waitReplicas(ctx context.Context, tok store.Token, j *job) (bool, error) {
	st := aq.q.st
	refuse := st.DurableRefuses()
	key := gateKey(tok)
	var prev *gate
	if v, found := aq.behind.Load(key); refuse && found {
		// Closed, or open for one probe: the worker that swaps in its
		// probe's gate makes the wait; the others defer meanwhile.
		prev = v.(*gate)
		if time.Now().Before(prev.until) ||
			!aq.behind.CompareAndSwap(key, prev, &gate{until: time.Now().Add(gateProbe), backoff: prev.backoff}) {
			return false, errBehind
		}
	}
	ok, _, err := st.WaitReplicas(ctx, tok, j.shards, aq.expireAt)
	switch {
	case ok:
		aq.behind.Delete(key)
	case refuse:
		b := deferFirst
		if prev != nil {
			b = min(2*prev.backoff, deferMax) // still failing: longer
		}
		aq.behind.Store(key, &gate{until: time.Now().Add(b), backoff: b})
	}
	return ok, err
}

// gateProbe closes a shard's gate while one worker's probe waits (its wait
// ends within redis.durable_winners.timeout plus redis.timeout, both at
// most a few seconds, and replaces the gate).
const gateProbe = time.Minute

// gate is a shard's state after a failed wait (actQueue.behind): no wait
// before until.
type gate struct {
	until   time.Time
	backoff time.Duration
}

func gateKey(tok store.Token) string { return tok.SKU + "/" + strconv.Itoa(tok.Shard) }

func (aq *actQueue) gateClosed(key string, now time.Time) bool {
	v, ok := aq.behind.Load(key)
	return ok && now.Before(v.(*gate).until)
}

func (aq *actQueue) countDurable(result string) {
	aq.q.m.DurableWinners.WithLabelValues("queue", result).Inc()
}

// Deferral back-off: a deferred entry is handed out again after
// deferFirst, doubling up to deferMax, so a replica back after its resync
// (1–1.6 s after a Redis restart, §53) sends the entry within about a
// second, while a replica that stays away costs about one WAIT a second
// per shard (the gate, waitReplicas), not a steady loop of them.
const (
	deferFirst = 100 * time.Millisecond
	deferMax   = time.Second
)

// deferral is a deferred entry's next turn (actQueue.deferred). at and
// backoff are set by the worker that deferred it (a new deferral each
// time); asked only by the reader.
type deferral struct {
	at      time.Time     // handed out again from then on
	backoff time.Duration // since the previous deferral
	last    time.Time     // when it was deferred
	asked   time.Time     // the reader's last re-read for it
}

// deferEntry leaves j unsent and unacknowledged for its next delivery:
// the reservation stays pending under its last claim's stamp, the entry in
// this consumer's pending list; the reader hands it out again once its
// back-off has passed (a re-read of this consumer's own entries).
func (aq *actQueue) deferEntry(j *job, err error) {
	aq.countDurable("deferred")
	key := aq.deferKey(j.e)
	b := deferFirst
	v, again := aq.deferred.Load(key)
	if again {
		b = min(2*v.(*deferral).backoff, deferMax)
	}
	now := time.Now()
	aq.deferred.Store(key, &deferral{at: now.Add(b), backoff: b, last: now})
	j.deferred = true
	if !again { // once per entry: a replica away for long would flood the log
		aq.q.log.Warn("queue: the wait for replicas failed (not acknowledged in time, or Redis did not answer); reservation left pending for its next delivery (on_timeout: refuse)",
			zap.String("token", j.e.Token), zap.Error(err))
	}
}

// deferDue reports whether a deferred entry's turn has come (the reader
// then re-reads this consumer's own entries), at most once per back-off
// for each entry should the re-read not find it. One not deferred again
// for ClaimIdle has gone to another consumer (a takeover) or away:
// forgotten.
func (aq *actQueue) deferDue() bool {
	due := false
	now := time.Now()
	prefix := aq.a.ID + "/"
	aq.deferred.Range(func(k, v any) bool {
		if !strings.HasPrefix(k.(string), prefix) {
			return true // another activity's
		}
		d := v.(*deferral)
		switch {
		case now.Sub(d.last) > aq.claimIdle:
			aq.deferred.Delete(k)
		case !now.Before(d.at) && now.Sub(d.asked) >= d.backoff:
			d.asked = now
			due = true
		}
		return true
	})
	return due
}

// deferKey is e's key in deferred.
func (aq *actQueue) deferKey(e store.QueueEntry) string { return aq.a.ID + "/" + entryKey(e) }

// notDeferred drops from es, entries read back as this consumer's own,
// the deferred ones whose turn has not come, or whose shard's gate is
// closed (waitReplicas); due counts the deferred ones kept.
func (aq *actQueue) notDeferred(es []store.QueueEntry) (out []store.QueueEntry, due int) {
	out = es[:0:0]
	now := time.Now()
	for _, e := range es {
		if v, ok := aq.deferred.Load(aq.deferKey(e)); ok {
			if now.Before(v.(*deferral).at) {
				continue
			}
			if tok, err := store.ParseToken(e.Token); err == nil && aq.gateClosed(gateKey(tok), now) {
				continue
			}
			due++
		}
		out = append(out, e)
	}
	return out, due
}
