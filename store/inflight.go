package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Issue 11 §1: the shop's in-flight budget (lua/inflight.lua) and the
// spill of a winner it has no room for into the queue (lua/spill.lua).

var (
	inflightScript = rueidis.NewLuaScript(lua.Inflight)
	spillScript    = rueidis.NewLuaScript(lua.Spill)
)

// InflightSync is one instance's call to the fleet's in-flight budget of an
// activity: what it holds, wants and would use (see lua/inflight.lua).
type InflightSync struct {
	// Instance names the caller; its lease expires TTL after its last call.
	Instance string
	// Floor is what the instance may have in use now: never taken from it.
	Floor int64
	// Want is what it asks to hold in all (at least Floor).
	Want int64
	// Demand is what it would use if it could (in use plus waiting).
	Demand int64
	// Limit is the fleet's limit; with SetLimit it becomes the one in
	// force, without it it is used only when none is stored.
	Limit    int64
	SetLimit bool
	// TTL is the lease: a crashed instance's slots come back after it.
	TTL time.Duration
}

// InflightGrant is the fleet's answer.
type InflightGrant struct {
	Held  int64 // slots the instance holds now
	Fair  int64 // its fair share of the limit among the instances that want slots
	Total int64 // slots the whole fleet holds
	Limit int64 // the limit in force
}

// InflightKeys are the budget's keys for activity act (one hash tag: the
// activity's, like its meta).
func (s *Store) InflightKeys(act string) [2]string {
	base := s.prefix + ":{" + act + "}:inflight"
	return [2]string{base, base + ":live"}
}

// SyncInflight reports one instance's use of the activity's in-flight
// budget and takes or gives back slots, in one script call.
func (s *Store) SyncInflight(ctx context.Context, act string, q InflightSync) (InflightGrant, error) {
	c, err := s.Client()
	if err != nil {
		return InflightGrant{}, err
	}
	set := "0"
	if q.SetLimit {
		set = "1"
	}
	ttl := max(q.TTL.Milliseconds(), 1)
	k := s.InflightKeys(act)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := ints(inflightScript.Exec(cctx, c, k[:], []string{q.Instance, itoa(q.Floor), itoa(max(q.Want, q.Floor)),
		itoa(q.Demand), itoa(q.Limit), set, itoa(ttl), itoa(max(10*ttl, time.Hour.Milliseconds()))}))
	if err != nil {
		return InflightGrant{}, err
	}
	if len(r) != 4 {
		return InflightGrant{}, ErrInvalidResponse
	}
	return InflightGrant{Held: r[0], Fair: r[1], Total: r[2], Limit: r[3]}, nil
}

// Spill turns a pending, unsent reservation into a queued one with a stream
// entry, for the queue workers to send when the shop has room (a sync-mode
// winner past upstream.max_inflight with upstream.overflow: queue). The
// shard's stream takes at most its share of maxBacklog. Replies: OK,
// Backlog (with the estimated activity backlog; nothing changed), Same
// (already queued), Released, Confirmed, Unknown.
func (s *Store) Spill(ctx context.Context, t Token, shards int, nowMs, maxBacklog, expireAt int64, request []byte) (lua.Code, int64, error) {
	c, err := s.Client()
	if err != nil {
		return 0, 0, err
	}
	if t.Shard >= shards {
		return lua.Unknown, 0, nil
	}
	k := s.keys.get(t.Activity, t.SKU, shards).Shards[t.Shard]
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := ints(spillScript.Exec(cctx, c, []string{k.Res, k.Pending, k.Log},
		[]string{t.Field(), t.String(), itoa(nowMs), shardBacklog(maxBacklog, shards), itoa(expireAt), string(request)}))
	if err != nil {
		return 0, 0, err
	}
	code := lua.Code(r[0])
	if code == lua.Backlog {
		if len(r) != 2 {
			return 0, 0, ErrInvalidResponse
		}
		return code, r[1] * int64(shards), nil
	}
	return code, 0, nil
}

// ForgetRequestID drops the record of a buyer's request id, so a repeat of
// the request is decided afresh: for a winner the proxy released before
// sending it (the shop was busy, 503 BUSY), whose repeat must be able to
// buy rather than be answered by the released reservation.
func (s *Store) ForgetRequestID(ctx context.Context, t Token, shards int, user, requestID string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if t.Shard >= shards || requestID == "" {
		return nil
	}
	k := s.keys.get(t.Activity, t.SKU, shards).Shards[t.Shard]
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrap(c.Do(cctx, c.B().Del().Key(ridKey(k, user, requestID)).Build()).Error())
}
