package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

const testSKU = "sku1"

// newActivity is an activity open from a minute ago for an hour.
func newActivity(id string, stock int64, shards int, limit int64) *config.Activity {
	now := time.Now()
	return &config.Activity{
		ID:             id,
		Start:          now.Add(-time.Minute),
		End:            now.Add(time.Hour),
		SKUs:           []config.SKU{{ID: testSKU, Stock: stock}},
		Shards:         shards,
		KeyTTLAfterEnd: time.Hour,
		PerUserLimit:   limit,
	}
}

func redisConfig(addrs []string, cluster bool) config.Redis {
	return config.Redis{Addrs: addrs, Timeout: redistest.TimeoutScale * 200 * time.Millisecond, ClientCache: true, KeyPrefix: "seckill", Cluster: cluster,
		BuyerMemo: config.DefaultBuyerMemo}
}

func openStore(t testing.TB, cfg config.Redis) *store.Store {
	t.Helper()
	s, err := store.Open(cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func reserveReq(a *config.Activity, user string, qty int64) store.ReserveRequest {
	return store.ReserveRequest{
		Activity: a.ID, SKU: a.SKUs[0].ID, User: user, Qty: qty, Limit: a.PerUserLimit, Shards: a.Shards,
		NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a),
	}
}

// mustPreheat preheats a; with durable winners, a preheat the replicas did
// not acknowledge within the wait is run again, as the operator is told to
// (up to three tries: a busy 2-core CI host once kept a running replica's
// acknowledgement past 200 ms, TestDurableWinnersCluster). A test whose
// point is that refusal calls Preheat itself.
func mustPreheat(t testing.TB, s *store.Store, a *config.Activity) {
	t.Helper()
	var err error
	for try := 1; try <= 3; try++ {
		if _, err = s.Preheat(ctx(t), a, false, time.Now()); !errors.Is(err, store.ErrNotDurable) {
			break
		}
		t.Logf("Preheat try %d: %v; run again", try, err)
	}
	if err != nil {
		t.Fatalf("Preheat: %v", err)
	}
}

func mustReserve(t testing.TB, s *store.Store, a *config.Activity, user string, qty int64, want lua.Code) store.ReserveResult {
	t.Helper()
	res, err := s.Reserve(ctx(t), reserveReq(a, user, qty))
	if err != nil {
		t.Fatalf("Reserve(%s): %v", user, err)
	}
	if res.Code != want {
		t.Fatalf("Reserve(%s) = %v, want %v", user, res.Code, want)
	}
	return res
}

func status(t testing.TB, s *store.Store, a *config.Activity) store.SKUStatus {
	t.Helper()
	st, err := s.Status(ctx(t), a)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	// a's one SKU; Status also lists SKUs preheated that a's config does
	// not name (NotInConfig), e.g. a test's activity cut to one SKU.
	var skus []store.SKUStatus
	for _, k := range st.SKUs {
		if !k.NotInConfig {
			skus = append(skus, k)
		}
	}
	if len(skus) != 1 {
		t.Fatalf("Status SKUs in the config = %d, want 1", len(skus))
	}
	return skus[0]
}

// wantStatus checks the counters of the one SKU and that the invariant holds.
func wantStatus(t testing.TB, s *store.Store, a *config.Activity, remaining, pending, confirmed int64) store.SKUStatus {
	t.Helper()
	st := status(t, s, a)
	if !st.OK || st.Initial != a.SKUs[0].Stock || st.Remaining != remaining || st.Pending != pending || st.Confirmed != confirmed {
		t.Fatalf("status = %+v, want initial %d remaining %d pending %d confirmed %d, OK",
			st, a.SKUs[0].Stock, remaining, pending, confirmed)
	}
	return st
}

// userOn finds a user id whose home shard is shard, skipping n earlier ones.
func userOn(shard, shards, n int) string {
	for i := 0; ; i++ {
		u := "user-" + strconv.Itoa(i)
		if store.HomeShard(u, shards) == shard {
			if n == 0 {
				return u
			}
			n--
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
