package store

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// The fleet's roll call: every instance beats into one sorted set (its own
// hash tag, so it lives on one cluster node), scored with Redis TIME, and
// shares the per-IP, per-device and per-user limits by the count.
//
//	<prefix>:{fleet}:instances   zset   instance id -> last beat ms (Redis clock)

var fleetBeat = rueidis.NewLuaScript(lua.Fleet)

func (s *Store) fleetKey() string { return s.prefix + ":{fleet}:instances" }

// FleetBeat records instance id's heartbeat and returns how many instances
// have beaten within stale (this one included, so at least 1). Members not
// seen within stale are dropped; the set expires when nobody beats.
func (s *Store) FleetBeat(ctx context.Context, id string, stale time.Duration) (int, error) {
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	staleMs := max(stale.Milliseconds(), 1)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := fleetBeat.Exec(cctx, c, []string{s.fleetKey()},
		[]string{id, itoa(staleMs), itoa(staleMs * 4)}).AsInt64()
	if err != nil {
		return 0, wrap(err)
	}
	if n < 1 {
		return 0, ErrInvalidResponse
	}
	return int(n), nil
}

// FleetLeave takes instance id off the roll call at once (a clean
// shutdown), so the others' shares grow without waiting for stale.
func (s *Store) FleetLeave(ctx context.Context, id string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrap(c.Do(cctx, c.B().Zrem().Key(s.fleetKey()).Member(id).Build()).Error())
}
