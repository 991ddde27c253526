package e2e_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

func TestPublicTime(t *testing.T) {
	f := newFixture(t)
	r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/time"})
	ms, ok := r.Num("server_time_ms")
	if r.Status != 200 || !ok || time.Since(time.UnixMilli(int64(ms))).Abs() > time.Minute {
		t.Errorf("time: %d %s", r.Status, r.Body)
	}
	if r := f.do(e2e.Req{Method: "POST", URI: "/_seckill/time"}); r.Status != 405 {
		t.Errorf("POST time: %d", r.Status)
	}
}

func TestPublicActivities(t *testing.T) {
	f := newFixture(t)
	state := func(id string) (string, float64) {
		r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/activities/" + id})
		if r.Status != 200 || r.Str("id") != id {
			t.Fatalf("activity %s: %d %s", id, r.Status, r.Body)
		}
		skus, _ := r.JSON["skus"].([]any)
		if len(skus) != 1 {
			t.Fatalf("activity %s: skus %s", id, r.Body)
		}
		m, _ := skus[0].(map[string]any)
		rem, _ := m["remaining"].(float64)
		if m["id"] != e2e.SKU {
			t.Fatalf("activity %s: sku %v", id, m["id"])
		}
		if s, ok := r.Num("start_ms"); !ok || int64(s) != f.act(t, id).Start.UnixMilli() {
			t.Errorf("activity %s: start_ms in %s", id, r.Body)
		}
		return r.Str("state"), rem
	}
	eventuallyState := func(id, want string, wantRemaining float64) {
		t.Helper()
		var got string
		var rem float64
		e2e.Eventually(t, 3*time.Second, id+" state "+want, func() bool {
			got, rem = state(id)
			return got == want && rem == wantRemaining
		})
	}

	eventuallyState(actOpen, "open", 100)
	eventuallyState(actFuture, "upcoming", 10)
	eventuallyState(actPast, "ended", 0)

	wantWin(t, f.buy(actTiny, "alice"))
	eventuallyState(actTiny, "sold_out", 0)

	wantWin(t, f.buy(actOpen, "alice"))
	eventuallyState(actOpen, "open", 99)
	f.setPaused(t, actOpen, true)
	eventuallyState(actOpen, "paused", 99)
	f.setPaused(t, actOpen, false)
	eventuallyState(actOpen, "open", 99)

	if r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/activities/nosuch"}); r.Status != 404 {
		t.Errorf("unknown activity: %d %s", r.Status, r.Body)
	}
}

func TestPublicReservations(t *testing.T) {
	f := newFixture(t)
	won := f.buy(actOpen, "alice")
	wantWin(t, won)
	r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + won.Token()})
	if r.Status != 200 || r.Str("state") != "confirmed" || r.Str("order_id") == "" || r.Str("activity") != actOpen || r.Str("sku") != e2e.SKU {
		t.Errorf("reservation: %d %s", r.Status, r.Body)
	}
	for _, tok := range []string{
		"garbage",
		"",
		"open.sku1.0.AAAAAAAAAAAAAAAAAAAAAA",   // well formed, never issued
		"open.sku1.999.AAAAAAAAAAAAAAAAAAAAAA", // shard out of range
		"nosuch.sku1.0.AAAAAAAAAAAAAAAAAAAAAA", // unknown activity
		"open.sku1.-1.AAAAAAAAAAAAAAAAAAAAAA",
		"open.sku1.0.AAAAAAAAAAAAAAAAAAAAA%2F",
		won.Token() + "x",
	} {
		r := f.do(e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
		if r.Status != 404 {
			t.Errorf("reservation %q: %d %s, want 404", tok, r.Status, r.Body)
		}
	}
}
