package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// BenchmarkSoldOutReread: a sold-out SKU's flags (4 shards) read again
// after an invalidation of some key, as the snapshot is after every
// invalidation that reaches the instance: from the client-side cache, no
// round trip. Since §58 the read also brings the shards' transit marks
// (fleetmark.go), when every flag is set: its cost is here, not in the
// snapshot's hits (BenchmarkSoldOutFlags, BenchmarkRefused*).
func BenchmarkSoldOutReread(b *testing.B) {
	srv := redistest.Start(b)
	s := openStore(b, redisConfig([]string{srv.Addr}, false))
	act := newActivity("rereadb", 4, 4, 1)
	mustPreheat(b, s, act)
	for i := range 4 {
		mustReserve(b, s, act, "w"+strconv.Itoa(i), 1, lua.OK)
	}
	c := context.Background()
	sku := act.SKUs[0].ID
	eventually(b, 2*time.Second, "sold out", func() bool {
		out, err := s.SoldOut(c, act.ID, sku, act.Shards)
		return err == nil && out
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.BumpInvalGen()
		if out, err := s.SoldOut(c, act.ID, sku, act.Shards); err != nil || !out {
			b.Fatal(out, err)
		}
	}
}
