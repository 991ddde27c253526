package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRT11FixRestartDroppingQueueActivityStrandsQueuedBuyers: README
// "Buyers told 202 QUEUED are always sent: after a reload (or restart)
// that switches an activity from mode: queue to sync, …, or drops the
// activity, every instance keeps draining its streams at queue.rate until
// they stay empty". The fix of round 10 (reservation/queue.go Start,
// 7899ca4) drains a dropped activity only from q.acts, the activities the
// same Queue value was started with before: a restarted serve (a rolling
// deploy of the edited file, the usual way a config changes on
// Kubernetes) starts a fresh Queue with only the new file, so an activity
// the file no longer names gets no workers at all, though Redis still holds
// it (the registry DroppedActivities reads, which reconcile and status use
// since 46f40cf). Its buyers told 202 QUEUED are never sent; their units
// stay pending until the reconciler's queued_stale alert, which does not
// send them either. (serve's start does not refuse such a file either:
// keepsRunningSales runs on reloads only.)
//
// Fixed by refusal, not by draining (the fixer's choice, changed from the
// red team's "want: sent after the restart"): Redis keeps the activity's
// id, shards and SKUs, not its route, queue rate, identity or order id's
// place that a send needs, so serve refuses to start with such a file
// (cmd/seckill-proxy/serve.go refuseStrandedQueues, through
// reservation.StrandedQueues, which this test calls as serve does) and
// names the activity. Want: the refusal names it, the queued buyers are
// still there, and putting the activity back sends every one of them.
func TestRT11FixRestartDroppingQueueActivityStrandsQueuedBuyers(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "rt11keep", Stock: 5, Shards: 1},
		{ID: "rt11qd", Path: "/rt11qd/{sku}/buy", Stock: 5, Shards: 1, Mode: "queue"},
	}}
	full := opts.Config(t)
	p := e2e.StartProxy(t, full)
	p.Preheat(t, "rt11qd")
	a := p.Activity(t, "rt11qd")
	for i := 0; i < 3; i++ {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/rt11qd/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", fmt.Sprint("rt11qd-", i)}}})
		if got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
	}
	// The instance stops before its workers sent them (a deploy), and
	// the new one starts with the file without rt11qd: serve's start
	// check must refuse it, naming the activity.
	opts.Activities = opts.Activities[:1]
	next := opts.Config(t)
	st, err := store.OpenNow(next.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids, err := reservation.StrandedQueues(context.Background(), st, next, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || !strings.HasPrefix(ids[0], "rt11qd ") || !strings.Contains(ids[0], "3 queued") {
		t.Fatalf("serve's start check with a file without rt11qd found %q, want rt11qd with its 3 queued buyers named (serve would start and strand them)", ids)
	}
	if ids, err := reservation.StrandedQueues(context.Background(), st, full, time.Now()); err != nil || len(ids) != 0 {
		t.Fatalf("the file that names rt11qd: %q, %v; want no refusal", ids, err)
	}
	if n := len(shop.Buys()); n != 0 {
		t.Fatalf("the shop got %d buys before any queue worker ran", n)
	}
	// The operator puts the activity back, as the refusal says: the
	// restarted instance's workers send every queued buyer.
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "rt11-restarted"})
	q.Start(full)
	t.Cleanup(q.Stop)
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		s, err := st.Status(context.Background(), a)
		if err == nil && s.SKUs[0].Pending == 0 && len(shop.Buys()) == 3 {
			return // sent and settled, none lost
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, _ := st.Status(context.Background(), a)
	t.Errorf("3 buyers told 202 QUEUED, then a restart with the activity put back: after 6 s the shop got %d buys and status is %+v; want all 3 sent",
		len(shop.Buys()), s.SKUs[0])
}
