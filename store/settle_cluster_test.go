package store

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// The settling scripts touch only keys of one shard's hash tag: on a real
// cluster an abort (with a request id record) and a move settle run
// without CROSSSLOT.
func TestSettleScriptsRunInOneSlot(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s, err := Open(config.Redis{Addrs: c.Addrs(), Cluster: true, Timeout: time.Second, KeyPrefix: "seckill"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var failed []string
	s.retry.Observe(func(kind, outcome string) {
		if outcome != RetryOK {
			failed = append(failed, kind+"/"+outcome)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now := time.Now()
	a := &config.Activity{ID: "act_cl", Start: now.Add(-time.Minute), End: now.Add(time.Hour), KeyTTLAfterEnd: time.Hour,
		SKUs: []config.SKU{{ID: "sku1", Stock: 8}}, Shards: 4, PerUserLimit: 1}
	if _, err := s.Preheat(ctx, a, false, now); err != nil {
		t.Fatal(err)
	}
	q := ReserveRequest{Activity: a.ID, SKU: "sku1", User: "u1", Qty: 1, Limit: 1, Shards: 4, NowMs: now.UnixMilli(),
		ExpireAt: ExpireAt(a), RequestID: "r1"}
	k := s.keys.get(a.ID, "sku1", 4)
	home := HomeShard(q.User, 4)
	tok := Token{Activity: a.ID, SKU: "sku1", Shard: home, ID: newID()}
	s.abortLater(context.DeadlineExceeded, k, home, tok, q, ridKey(k.Shards[home], q.User, q.RequestID), "0", "", "0")
	s.settleMoveLater(k, (home+1)%4, "sku1:"+newID(), q)
	if err := s.retry.RunNow(ctx, buyerKey(a.ID, q.User)); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 0 || s.retry.Len() != 0 {
		t.Fatalf("settling failed: %v, %d queued", failed, s.retry.Len())
	}
	r, ok, err := s.Lookup(ctx, tok, 4)
	if err != nil || !ok || r.State != StateReleased || r.Reason != abortReason || r.Qty != 0 {
		t.Fatalf("aborted token = %+v, %v, %v; want a released tombstone", r, ok, err)
	}
}
