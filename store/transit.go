package store

import (
	"context"
	"fmt"
	"time"
)

// Units in transit, and SOLD_OUT from memory (decisions §54).
//
// A reserve or bundle call whose reply never came may still run (a late
// reservation its abort gives back), and a steal whose reply never came,
// or whose deposit's did not, moves units off its donor onto no shard until
// its settle lands them. Meanwhile every shard's sold-out flag may be set,
// and on a cluster where only one master stalls the other masters' flags
// go on being read from memory: before this, every buyer of the SKU heard
// SOLD_OUT for the whole stall while the units came back on sale after it,
// with nobody left asking (red team bh, §51). The instance whose call it
// was knows: its retrier holds the settle. While it does, and for
// transitGrace after (Redis's invalidation of the flag a settle cleared
// trails its reply, on another connection), this instance answers the
// SKU's buyers STORE_UNAVAILABLE instead of SOLD_OUT — nothing is held,
// come back — and writes no new steal to a donor whose steal it has not
// settled (the pile of late steals §51 found on a stopped master).
//
// Other instances, holding no settle of the SKU, learn of it from the
// marks this one writes meanwhile (fleetmark.go, §58): the fleet gap §54
// left.

// transitGrace is how long a finished settle still holds its SKU's
// SOLD_OUT from memory back.
const transitGrace = 100 * time.Millisecond

// errInTransit is the answer, instead of SOLD_OUT, to a buyer of a SKU with
// units in transit here.
var errInTransit = fmt.Errorf("%w: units of the SKU may come back (a settle is pending)", ErrUnavailable)

// holdTransit counts one settle of k's SKU, of a steal from shard donor
// (-1: none); the returned function, called once when the settle is
// finished, counts it out: at once from movesOut and transitLive, after
// transitGrace from transit.
func (s *Store) holdTransit(k *SKUKeys, donor int) func() {
	k.transit.Add(1)
	k.transitLive.Add(1)
	s.transitN.Add(1)
	if donor >= 0 {
		k.movesOut[donor].Add(1)
	}
	s.markTransit(k) // and across the fleet (fleetmark.go)
	return func() {
		if donor >= 0 {
			k.movesOut[donor].Add(-1)
		}
		k.transitLive.Add(-1)
		time.AfterFunc(transitGrace, func() {
			k.transit.Add(-1)
			s.transitN.Add(-1)
		})
	}
}

// inTransit reports whether units of k's SKU may be in transit or held by
// a late call of this instance (see above), for an answer from memory
// (with transitGrace) or from Redis (a script's EMPTY: until the settles
// are answered).
func (s *Store) inTransit(k *SKUKeys, fromMemory bool) bool {
	if s.transitN.Load() == 0 {
		return false
	}
	if fromMemory {
		return k.transit.Load() > 0
	}
	return k.transitLive.Load() > 0
}

// donorUnsettled reports whether a steal of this instance from k's shard d
// waits for its settle.
func (s *Store) donorUnsettled(k *SKUKeys, d int) bool {
	return s.transitN.Load() > 0 && k.movesOut[d].Load() > 0
}

// InTransit reports whether this instance holds a settle of act's SKU
// that may put units back on sale: a buyer it would answer SOLD_OUT from
// memory is answered STORE_UNAVAILABLE instead (admission's sold-out
// mark). One atomic load when nothing is pending, as nearly always.
func (s *Store) InTransit(ctx context.Context, act, sku string, shards int) bool {
	if s.transitN.Load() == 0 || shards < 1 {
		return false
	}
	k, err := s.skuKeys(ctx, act, sku, shards)
	return err == nil && k.transit.Load() > 0
}
