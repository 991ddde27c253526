package reservation_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// A sale of many SKUs with verify.count_url, whose COUNT is slow under the
// sale's load: the repairing pass asked it once per SKU after settling
// the activity's stale reservations, and renewed its lease only while
// settling. 100 SKUs at 1.5 s a count outlast the 2-minute lease; the next
// activity's renew then found the lease gone (re-taken under a new fence)
// and the pass stopped "lease lost", every pass, on every instance: the
// activities after it were never settled (here, a buy the shop never took
// held pending forever). Scaled down: lease 2 s, 6 SKUs at 500 ms. The
// pass now renews by the clock while it counts.
func TestRV15SlowCountURLLosesTheLeaseForTheNextActivity(t *testing.T) {
	defer reservation.SetLeaseTTL(2 * time.Second)()
	big := newActivity("rv15big", 0, 1)
	big.SKUs = nil
	for i := 0; i < 6; i++ {
		big.SKUs = append(big.SKUs, config.SKU{ID: "s" + strconv.Itoa(i), Stock: 10})
	}
	count := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(500 * time.Millisecond)
		_, _ = w.Write([]byte(`{"count":0}`))
	}))
	t.Cleanup(count.Close)
	big.Verify.CountURL = count.URL + "/count?sku={sku}"
	st, _ := setup(t, big)
	sh := newShop(t)
	next := newActivity("rv15next", 1, 1)
	next.Verify.URL = sh.srv.URL + "/internal/orders?token={token}"
	if _, err := st.Preheat(tctx(t), next, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	tok := reserve(t, st, next, "u", time.Now().Add(-time.Minute).UnixMilli(), false) // never sent: the shop has no order

	rec, _ := newReconciler(st)
	_, err := rec.Run(tctx(t), []*config.Activity{big, next}, true, time.Now())
	if err != nil {
		t.Errorf("pass: %v", err)
	}
	res, ok, lerr := st.Lookup(tctx(t), tok, 1)
	if lerr != nil || !ok || res.State != store.StateReleased {
		t.Errorf("the next activity's stale reservation (verify: 404): %+v %v %v, want released", res, ok, lerr)
	}
}
