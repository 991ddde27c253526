package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// reconcileLater runs one repairing reconcile pass of act as if its
// pending_timeout had passed.
func (f *fixture) reconcileLater(t *testing.T, act string) reservation.Report {
	t.Helper()
	a := f.act(t, act)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := reservation.NewReconciler(f.p.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

func (f *fixture) wantState(t *testing.T, tok, state string) {
	t.Helper()
	g := f.do(e2e.Req{Method: "GET", URI: "/_seckill/reservations/" + tok})
	if g.Status != 200 || g.Str("state") != state {
		t.Errorf("reservation %s: %d %s, want %s", tok, g.Status, g.Body, state)
	}
}

// TestShop5xxWithVerifyIsUnknown: with verify.url set, a 5xx from the shop
// or a balancer in front of it is an unknown outcome: 504 UPSTREAM_TIMEOUT
// with the token, the reservation stays pending, and the reconciler settles
// it by asking verify: confirmed where the shop took the order behind the
// balancer's 502, released where it did not (503).
func TestShop5xxWithVerifyIsUnknown(t *testing.T) {
	f := newFixture(t)
	f.shop.AnswerAfterOrder("alice", http.StatusBadGateway)
	f.shop.Answer("bob", http.StatusServiceUnavailable)
	var toks []string
	for _, u := range []struct {
		user   string
		status float64
	}{{"alice", 502}, {"bob", 503}} {
		r := f.buy(actOpen, u.user)
		wantCode(t, r, "UPSTREAM_TIMEOUT", 504)
		if r.Str("token") == "" || r.Header["X-Seckill-Token"] != r.Str("token") {
			t.Fatalf("%s: no token: %s", u.user, r.Body)
		}
		if s, _ := r.Num("upstream_status"); s != u.status {
			t.Errorf("%s: upstream_status %v, want %v", u.user, s, u.status)
		}
		f.wantState(t, r.Str("token"), "pending")
		toks = append(toks, r.Str("token"))
	}
	f.p.WantStock(t, actOpen, 98, 2, 0)

	f.reconcileLater(t, actOpen)
	f.wantState(t, toks[0], "confirmed")
	f.wantState(t, toks[1], "released")
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestShopRefusalReleases: a 4xx (the default release_statuses) releases
// at once, with verify.url or without; release_statuses may add a 5xx; and
// without verify.url every non-2xx releases, since nothing could settle it.
func TestShopRefusalReleases(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*e2e.Options)
		status int
	}{
		{name: "409 with verify", status: http.StatusConflict},
		{name: "503 listed in release_statuses", status: http.StatusServiceUnavailable,
			edit: func(o *e2e.Options) { o.UpstreamExtra = []string{`release_statuses: ["4xx", "503"]`} }},
		{name: "500 without verify", status: http.StatusInternalServerError,
			edit: func(o *e2e.Options) { o.Activities[0].NoVerify = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var edits []func(*e2e.Options)
			if tt.edit != nil {
				edits = append(edits, tt.edit)
			}
			f := newFixture(t, edits...)
			f.shop.Answer("alice", tt.status)
			r := f.buy(actOpen, "alice")
			wantCode(t, r, "UPSTREAM_FAILED", 502)
			if s, _ := r.Num("upstream_status"); int(s) != tt.status {
				t.Errorf("upstream_status %v, want %d", s, tt.status)
			}
			f.p.WantStock(t, actOpen, 100, 0, 0)
		})
	}
}
