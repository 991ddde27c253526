package e2e_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// goneConfirmLogged fails t unless logs hold one line at warn or above
// about a confirm whose reservation record was gone, naming the token's
// activity and SKU (and the token).
func goneConfirmLogged(t *testing.T, logs *observer.ObservedLogs, act, tok string) {
	t.Helper()
	for _, e := range logs.All() {
		if e.Level < zapcore.WarnLevel {
			continue
		}
		f := e.ContextMap()
		if f["activity"] == act && f["sku"] == e2e.SKU && f["token"] == tok {
			return
		}
	}
	var lines []string
	for _, e := range logs.All() {
		lines = append(lines, e.Message)
	}
	t.Errorf("no log line names activity %s, sku %s and token %s of a confirm whose record is gone (an order at the shop that no counter holds); lines: %q",
		act, e2e.SKU, tok, lines)
}

// TestRTCConfirmOfAGoneRecordIsLogged: a winner at a slow shop whose
// reservation record is gone by the time the shop says yes (`preheat
// --force` while the buy was at the shop; keys expired; a Redis that lost
// its data) is an order no counter holds. It was counted UNKNOWN in
// seckill_settlements_total and nothing more (§69 "Left"), unlike a confirm
// after a release: the operator learned of an order beside the stock only
// from `reconcile`'s shop_extra, if a count_url is configured. Want one
// line naming the token, its activity and SKU.
func TestRTCConfirmOfAGoneRecordIsLogged(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := e2e.StartProxyLog(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 5 * time.Second,
		Activities: []e2e.Activity{{ID: "rtcg", Stock: 5, Shards: 1}}}.Config(t), zap.New(core), time.Now)
	p.Preheat(t, "rtcg")

	release := shop.Hang("rtc-g1")
	defer release()
	done := make(chan e2e.Resp, 1)
	go func() { done <- e2e.Buy(p.Addr, "rtcg", "rtc-g1") }()
	e2e.Eventually(t, 5*time.Second, "the buy at the shop", func() bool { return shop.SeenBuy("rtc-g1") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Store.Preheat(ctx, p.Activity(t, "rtcg"), true, time.Now()); err != nil {
		t.Fatalf("forced preheat: %v", err)
	}
	release()
	got := <-done
	if got.Code != "WIN" {
		t.Fatalf("buy: %d %s %s, want the shop's order", got.Status, got.Code, got.Body)
	}
	if err := p.Server.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.Counter(p.Metrics.Settlements, "confirm", "UNKNOWN"); n != 1 {
		t.Errorf("settlements confirm/UNKNOWN = %v, want 1", n)
	}
	goneConfirmLogged(t, logs, "rtcg", got.Token())
	p.WantStock(t, "rtcg", 5, 0, 0) // the forced preheat's stock: the shop's order is beside it
}

// TestRTCQueueConfirmOfAGoneRecordIsLogged: the same in queue mode: the
// worker's confirm of a token whose record is gone was counted
// queue_confirm/UNKNOWN, not logged.
func TestRTCQueueConfirmOfAGoneRecordIsLogged(t *testing.T) {
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 5 * time.Second,
		Activities: []e2e.Activity{{ID: "rtcq", Stock: 5, Shards: 1, Mode: "queue"}}}.Config(t))
	p.Preheat(t, "rtcq")
	release := shop.Hang("rtc-q1")
	defer release()
	p.StartQueueLog(t, zap.New(core))
	got := e2e.Buy(p.Addr, "rtcq", "rtc-q1")
	if got.Code != "QUEUED" {
		t.Fatalf("buy: %d %s %s, want QUEUED", got.Status, got.Code, got.Body)
	}
	e2e.Eventually(t, 10*time.Second, "the queued buy at the shop", func() bool { return shop.SeenBuy("rtc-q1") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Store.Preheat(ctx, p.Activity(t, "rtcq"), true, time.Now()); err != nil {
		t.Fatalf("forced preheat: %v", err)
	}
	release()
	e2e.Eventually(t, 10*time.Second, "the worker's confirm", func() bool {
		return p.Counter(p.Metrics.Settlements, "queue_confirm", "UNKNOWN") == 1
	})
	goneConfirmLogged(t, logs, "rtcq", got.Token())
}
