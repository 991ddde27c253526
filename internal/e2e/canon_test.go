package e2e_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Canonical ids (issue 9 §3): an id is trimmed and NFC-normalised before
// blocklists, limits, the script and X-Seckill-User, so "alice" and
// "alice%20" are one user and the second does not escape alice's block.
func TestCanonicalUserEscapesNoBlock(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.User = "{ query: uid }" })
	st, err := store.OpenNow(f.p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.BlockAdd(ctx, store.BlockUser, []string{"alice"}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	buy := func(q string) e2e.Resp {
		return f.do(e2e.Req{URI: "/api/seckill/open/sku1/buy?uid=" + q})
	}
	// The list reaches the proxy within milliseconds; wait for it on
	// another activity, so a buy racing the add does not count below.
	e2e.Eventually(t, 2*time.Second, "alice BLOCKED", func() bool {
		return f.do(e2e.Req{URI: "/q/buy?sku=sku1&uid=alice"}).Code == "BLOCKED"
	})
	wantCode(t, buy("alice"), "BLOCKED", 403)
	for _, q := range []string{"alice%20", "%20alice", "%09alice%0D%0A", "alice%E2%80%83", "%E3%80%80alice%C2%A0"} {
		wantCode(t, buy(q), "BLOCKED", 403)
	}
	// NFD and NFC spellings of one name are one user: the second is
	// ALREADY_PURCHASED, and the shop was told the NFC form.
	r := buy("%C3%A9lodie") // é (NFC)
	wantWin(t, r)
	if o := f.shop.Orders()[r.Token()]; o.User != "\u00e9lodie" {
		t.Errorf("shop was told user %q, want NFC", o.User)
	}
	wantCode(t, buy("e%CC%81lodie%20"), "ALREADY_PURCHASED", 409) // e + combining acute
	// An id of white space only is no id.
	wantCode(t, buy("%20%20"), "BAD_REQUEST", 400)
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// case_fold: "Alice" and "alice" are one user for per_user_limit, and the
// shop is told the folded id.
func TestCanonicalUserCaseFold(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.User = "{ header: X-User-Id, case_fold: true }" })
	r := f.buy(actOpen, "Alice")
	wantWin(t, r)
	if o := f.shop.Orders()[r.Token()]; o.User != "alice" {
		t.Errorf("shop was told user %q, want alice", o.User)
	}
	for _, u := range []string{"alice", "ALICE ", " aLiCe"} {
		wantCode(t, f.buy(actOpen, u), "ALREADY_PURCHASED", 409)
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// numeric: "007" and "7" are one user; a non-digit id is BAD_REQUEST.
func TestCanonicalUserNumeric(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) { o.User = "{ header: X-User-Id, numeric: true }" })
	r := f.buy(actOpen, "007")
	wantWin(t, r)
	if o := f.shop.Orders()[r.Token()]; o.User != "7" {
		t.Errorf("shop was told user %q, want 7", o.User)
	}
	wantCode(t, f.buy(actOpen, "7"), "ALREADY_PURCHASED", 409)
	wantCode(t, f.buy(actOpen, " 0007 "), "ALREADY_PURCHASED", 409)
	for _, u := range []string{"7a", "-7", "0x7", "\uff17"} {
		wantCode(t, f.buy(actOpen, u), "BAD_REQUEST", 400)
	}
	wantWin(t, f.buy(actOpen, "0"))
	f.p.WantStock(t, actOpen, 98, 0, 2)
}
