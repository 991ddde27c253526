package store

import (
	"context"
	"errors"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// ErrFenced means a newer holder of the reconciler lease has repaired the
// shard: this holder lost the lease and must stop repairing.
var ErrFenced = errors.New("fenced: the reconciler lease was taken over")

// Fence is what a reconciler's repairs carry: the fencing token its lease
// was granted with, and when the per-shard fence keys expire. A shard
// refuses a repair whose token is older than the newest it has seen.
type Fence struct {
	Token    int64
	ExpireAt int64 // ms
}

// wrap appends the fence key and arguments lua/fence.lua reads.
func (f *Fence) wrap(keys, args []string, k ShardKeys) ([]string, []string) {
	return append(keys, k.Fence), append(args, itoa(f.Token), itoa(f.ExpireAt))
}

// Lease is the state of a named lease after AcquireLease.
type Lease struct {
	Held  bool  // the caller holds it
	Token int64 // fencing token of the current holder
}

// fenceCounterTTL keeps the fencing counter of a lease well beyond any
// activity; when it does expire, lease.lua restarts it above every token
// handed out before (it restarts from Redis' clock).
const fenceCounterTTL = 90 * 24 * time.Hour

func (s *Store) leaseKeys(name string) []string {
	key := s.prefix + ":{lease}:" + name
	return []string{key, key + ":fence"}
}

// AcquireLease takes or renews a named lease for holder for ttl. A newly
// taken lease comes with a fencing token greater than any before.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	c, err := s.Client()
	if err != nil {
		return Lease{}, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := ints(s.lease.Exec(cctx, c, s.leaseKeys(name),
		[]string{holder, itoa(ttl.Milliseconds()), itoa(fenceCounterTTL.Milliseconds())}))
	if err != nil {
		return Lease{}, err
	}
	if len(r) != 2 {
		return Lease{}, ErrInvalidResponse
	}
	return Lease{Held: r[0] == 1, Token: r[1]}, nil
}

// ReleaseLease gives the lease up if holder has it, so the next pass (on
// any instance) need not wait for it to expire. A pass that stops because
// Redis does not answer releases in the same blip: each try gets
// redis.timeout, and the release (compare-and-delete, safe to repeat) is
// tried again until ctx ends (red team chaos: one try left the lease held
// for its TTL, and `reconcile --repair` was refused for two minutes after
// a 0.8 s pause). A ctx without a deadline gets one try.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	keys := s.leaseKeys(name)
	for {
		cctx, cancel := s.ctx(ctx)
		err = wrap(c.Do(cctx, c.B().Eval().Script(`local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then return redis.call('DEL', KEYS[1]) end
return 0`).Numkeys(1).Key(keys[0]).Arg(holder).Build()).Error())
		cancel()
		if err == nil || !Retryable(err) || ctx.Done() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ConfirmFenced is Confirm for the reconciler: refused (lua.Fenced) when a
// newer lease holder has repaired the shard.
func (s *Store) ConfirmFenced(ctx context.Context, t Token, shards int, orderID string, f Fence) (lua.Code, error) {
	return s.confirmAs(ctx, t, shards, orderID, &f, "", "", nil)
}

// ReleaseFenced is Release for the reconciler, under its fencing token.
// sentMs > 0 is the send stamp (the record's CreatedMs) the reconciler
// judged the reservation by: one sent again since (a queue worker's
// takeover) is left alone, reply lua.Restamped (see ReleaseSent).
func (s *Store) ReleaseFenced(ctx context.Context, t Token, shards int, reason string, nowMs int64, pendingOnly bool, sentMs int64, f Fence) (lua.Code, error) {
	return s.releaseAs(ctx, t, shards, reason, nowMs, pendingOnly, sentMs, &f)
}

// FenceShards raises the fence of every shard of a's SKUs to f.Token
// before a repair pass, so that from here on no older holder can repair
// any of them. It answers ErrFenced when a newer holder got there first.
func (s *Store) FenceShards(ctx context.Context, a *config.Activity, shards int, f Fence) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	for _, sku := range a.SKUs {
		k, err := s.skuKeys(ctx, a.ID, sku.ID, shards)
		if err != nil {
			return err
		}
		for _, sk := range k.Shards {
			cctx, cancel := s.ctx(ctx)
			keys, args := f.wrap(nil, nil, sk)
			r, err := ints(s.fenceOnly.Exec(cctx, c, keys, args))
			cancel()
			if err != nil {
				return err
			}
			if lua.Code(r[0]) == lua.Fenced {
				return ErrFenced
			}
		}
	}
	return nil
}
