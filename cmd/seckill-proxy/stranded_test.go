package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestServeRefusesFileDroppingQueuedActivity: serve's start check
// (refuseStrandedQueues) refuses a file that no longer names an activity
// whose queue holds buyers told 202 QUEUED, naming it and what to do, and
// lets the file that names it start.
func TestServeRefusesFileDroppingQueuedActivity(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	opts := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{
		{ID: "keep", Stock: 5, Shards: 1},
		{ID: "qd", Path: "/qd/{sku}/buy", Stock: 5, Shards: 2, Mode: "queue"},
	}}
	full := opts.Config(t)
	p := e2e.StartProxy(t, full)
	p.Preheat(t, "qd")
	for i := range 2 {
		got := e2e.Do(nil, p.Addr, e2e.Req{URI: "/qd/" + e2e.SKU + "/buy", Header: [][2]string{{"X-User-Id", fmt.Sprint("qd-", i)}}})
		if got.Code != "QUEUED" {
			t.Fatalf("buy %d: %d %s", i, got.Status, got.Body)
		}
	}
	opts.Activities = opts.Activities[:1]
	next := opts.Config(t)
	next.Path = "seckill.yaml"
	st, err := store.OpenNow(next.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = refuseStrandedQueues(st, next, zap.NewNop())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitFailed {
		t.Fatalf("serve with a file dropping a queued activity: %v, want a refusal (exit %d)", err, exitFailed)
	}
	for _, want := range []string{"seckill.yaml no longer names qd (2 queued)", "202 QUEUED", "Put the activity back in seckill.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := refuseStrandedQueues(st, full, zap.NewNop()); err != nil {
		t.Errorf("the file that names qd: %v, want serve to start", err)
	}
}
