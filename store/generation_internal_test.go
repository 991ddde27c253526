package store

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Issue 8 §7: a steal taken from the stock of one preheat must not deposit
// into the stock of a later, forced preheat (that would sell units the new
// stock never had).
func TestForcedPreheatRefusesOldMoves(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(config.Redis{Addrs: []string{srv.Addr}, Timeout: time.Second, KeyPrefix: "seckill"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	a := &config.Activity{ID: "act_gen", Start: now.Add(-time.Minute), End: now.Add(time.Hour), KeyTTLAfterEnd: time.Hour,
		SKUs: []config.SKU{{ID: "sku1", Stock: 2}}, Shards: 2, PerUserLimit: 1}
	if _, err := s.Preheat(ctx, a, false, now); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Client()
	k := s.keys.get(a.ID, "sku1", 2)
	donor, home := k.Shards[0], k.Shards[1]
	exp := itoa(ExpireAt(a))
	// The first step of a move: one unit leaves shard 0 of the old stock.
	arr, err := s.steal.Exec(ctx, c, []string{donor.Stock, donor.Moves, donor.Out},
		[]string{"1", "sku1:m1", "1", itoa(now.UnixMilli()), exp}).AsIntSlice()
	if err != nil || arr[0] != 1 || arr[1] != 1 {
		t.Fatalf("steal = %v, %v", arr, err)
	}
	gen := "0"
	if len(arr) == 3 {
		gen = itoa(arr[2])
	}
	if _, err := s.Preheat(ctx, a, true, now.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// The second step arrives after the forced preheat: its deposit is refused.
	tok := Token{Activity: a.ID, SKU: "sku1", Shard: 1, ID: newID()}
	args := []string{"u1", "1", "1", tok.Field(), itoa(now.UnixMilli()), exp, "0", "1", "sku1:m1", "100000", tok.String(), ridTTLms, gen}
	if _, err := s.reserve.Exec(ctx, c, k.reserveKeys[1], args).ToArray(); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	st, err := s.Status(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	got := st.SKUs[0]
	if !got.OK || got.Initial != 2 || got.Remaining+got.Pending+got.Confirmed != 2 || got.InTransit != 0 {
		t.Fatalf("status after a forced preheat between steal and deposit = %+v", got)
	}
	if i, _ := srv.Do("HGET", home.Stock, "i"); i != "1" {
		t.Fatalf("home shard initial = %s, want 1 (the old move refused)", i)
	}
}
