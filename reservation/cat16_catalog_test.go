package reservation_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestCat16ReconcileOfABigCatalogReadsThePendingIndexOnce: a report pass
// over an activity of 2,000 SKUs with one stale reservation each (a shop
// that was down, no verify.url) finds all 2,000 and reads each shard's
// pending index once per page. It read the whole index once per SKU (the
// index is shared by the SKUs of a shard): 14,000 ZRANGEs and 4.3 s for
// 2,000 reservations here, SKUs × pending in general, every pass (red
// team cat16).
func TestCat16ReconcileOfABigCatalogReadsThePendingIndexOnce(t *testing.T) {
	const n = 2000
	a := newActivity("big", 0, 1)
	a.Verify.URL = ""
	a.SKUs = make([]config.SKU, n)
	for i := range a.SKUs {
		a.SKUs[i] = config.SKU{ID: "s" + strconv.Itoa(i), Stock: 1}
	}
	st, srv := setup(t, a)
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i := range a.SKUs {
		r, err := st.Reserve(tctx(t), store.ReserveRequest{Activity: a.ID, SKU: a.SKUs[i].ID, User: "u" + strconv.Itoa(i), Qty: 1,
			Limit: 1, Shards: 1, NowMs: old, ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("reserve: %v %v", r.Code, err)
		}
	}
	zrange := func() int64 { return redistest.ParseStat(srv.Info("commandstats", "cmdstat_zrange"), "calls") }
	before := zrange()
	rec, _ := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	calls := zrange() - before
	if got := len(rep.Activities[0].Stale); got != n {
		t.Fatalf("%d stale reservations reported, want %d", got, n)
	}
	// 2,000 entries in pages of 500, and a read of each page's last
	// score's ties: about 10. Bounded at 2 per page plus slack.
	if calls > 2*(n/500+1)+4 {
		t.Fatalf("the pass read the pending index with %d ZRANGEs for %d reservations of %d SKUs on 1 shard", calls, n, n)
	}
	t.Logf("%d ZRANGEs", calls)
}
