package e2e_test

// Red-team tests of the verified-identity work (identity.user.jwt,
// identity.user.session, canonical ids). Helpers start with idt.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/identity/jwttest"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// idtBuyRaw is a raw buy on actOpen's default route with extra header
// lines exactly as given (duplicates kept, in order).
func idtBuyRaw(t *testing.T, addr string, lines ...string) e2e.Resp {
	t.Helper()
	raw := "POST /api/seckill/" + actOpen + "/" + e2e.SKU + "/buy HTTP/1.1\r\nHost: shop.example\r\n"
	for _, l := range lines {
		raw += l + "\r\n"
	}
	raw += "Content-Length: 0\r\nConnection: close\r\n\r\n"
	rs := rtRaw(t, addr, raw, 1)
	if len(rs) != 1 {
		t.Fatalf("no answer")
	}
	return rs[0]
}

// idtShopBuys are the shop's requests that carried a reservation.
func idtShopBuys(shop *e2e.Shop) []e2e.Request {
	var out []e2e.Request
	for _, r := range shop.Requests() {
		if r.Header.Get("X-Seckill-Token") != "" {
			out = append(out, r)
		}
	}
	return out
}

// idtCredentialsAtShop returns every value the shop received for header
// name (http.Header keeps each line) and every cookie named cookie.
func idtCredentialsAtShop(r e2e.Request, header, cookie string) []string {
	var out []string
	if header != "" {
		out = append(out, r.Header.Values(header)...)
	}
	if cookie != "" {
		hr := &http.Request{Header: r.Header}
		for _, c := range hr.Cookies() {
			if c.Name == cookie {
				out = append(out, c.Value)
			}
		}
	}
	return out
}

// TestRedTeamIDTwoAuthorizationHeaders: a buy with two Authorization
// headers, the first a valid token of a throw-away account and the second
// the scalper's main account. The proxy verifies one of them and counts the
// per-user limit for it; the shop must never receive a buy that also
// carries a credential naming another user than X-Seckill-User (a shop that
// reads its own Authorization — the "unmodified shop" of SPEC §1 — would
// place the order for the main account, whose per-user limit was never
// consulted). Refusing (400/401) or forwarding only the verified token both
// pass. (README "In front of your shop" puts the complete guarantee in a
// shop that places orders for the signed X-Seckill-User; this test is about
// the proxy handing an unmodified shop an ambiguous credential.)
func TestRedTeamIDTwoAuthorizationHeaders(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	f := newJWTFixture(t, k)
	main := k.Sign(t, "RS256", jwtClaims("scalper-main"))
	owner := map[string]string{main: "scalper-main"}
	// The main account buys its one unit legitimately first.
	wantWin(t, f.buyAs(actOpen, main))
	for i := 0; i < 3; i++ {
		user := fmt.Sprintf("throwaway-%d", i)
		throwaway := k.Sign(t, "RS256", jwtClaims(user))
		owner[throwaway] = user
		r := idtBuyRaw(t, f.p.Addr, "Authorization: Bearer "+throwaway, "Authorization: Bearer "+main)
		t.Logf("two Authorization headers: %d %s", r.Status, r.Body)
	}
	for _, b := range idtShopBuys(f.shop) {
		user := b.Header.Get("X-Seckill-User")
		for _, v := range idtCredentialsAtShop(b, "Authorization", "") {
			if o := owner[strings.TrimPrefix(v, "Bearer ")]; o != user {
				t.Errorf("the shop got a buy for X-Seckill-User %q carrying %q's token too (%d Authorization lines)", user, o, len(b.Header.Values("Authorization")))
			}
		}
	}
}

// TestRedTeamIDDuplicateJWTCookie: jwt.cookie with the cookie sent twice
// (throw-away token first, main account's second): as above, the shop must
// not get a buy carrying a token of another user than X-Seckill-User.
func TestRedTeamIDDuplicateJWTCookie(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { cookie: tok, jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
	})
	main := k.Sign(t, "RS256", jwtClaims("scalper-main"))
	t0 := k.Sign(t, "RS256", jwtClaims("throwaway-0"))
	t1 := k.Sign(t, "RS256", jwtClaims("throwaway-1"))
	for _, lines := range [][]string{
		{"Cookie: tok=" + t0 + "; tok=" + main},
		{"Cookie: tok=" + t1, "Cookie: tok=" + main},
	} {
		r := idtBuyRaw(t, f.p.Addr, lines...)
		t.Logf("%d lines: %d %s", len(lines), r.Status, r.Body)
	}
	for _, b := range idtShopBuys(f.shop) {
		user := b.Header.Get("X-Seckill-User")
		for _, v := range idtCredentialsAtShop(b, "", "tok") {
			if v == main && user != "scalper-main" {
				t.Errorf("the shop got a buy for X-Seckill-User %q carrying scalper-main's token too (Cookie %q)", user, b.Header.Values("Cookie"))
			}
		}
	}
}

// TestRedTeamIDDuplicateSessionCookie: identity.user.session with the
// session cookie twice: the whoami look-up is made for one value; the
// shop must not receive the buy with the other session too.
func TestRedTeamIDDuplicateSessionCookie(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := sessionFixture(t, w, "")
	for i, lines := range [][]string{
		{"Cookie: sid=u:throwaway-0; sid=u:scalper-main"},
		{"Cookie: sid=u:throwaway-1", "Cookie: sid=u:scalper-main"},
	} {
		r := idtBuyRaw(t, f.p.Addr, lines...)
		t.Logf("case %d: %d %s", i, r.Status, r.Body)
	}
	for _, b := range idtShopBuys(f.shop) {
		user := b.Header.Get("X-Seckill-User")
		for _, v := range idtCredentialsAtShop(b, "", "sid") {
			if v != "u:"+user {
				t.Errorf("the shop got a buy for X-Seckill-User %q carrying session %q too (Cookie %q)", user, v, b.Header.Values("Cookie"))
			}
		}
	}
}

// idtBlockUser adds a user block as the admin API does: canonicalised
// under the proxy's identity config, then stored.
func idtBlockUser(t *testing.T, f *fixture, value string) string {
	t.Helper()
	vals, err := admin.CanonicalListValues(&f.p.Cfg.Identity, store.BlockUser, []string{value})
	if err != nil {
		t.Fatalf("canonical %q: %v", value, err)
	}
	st, err := store.OpenNow(f.p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.BlockAdd(ctx, store.BlockUser, vals, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	return vals[0]
}

// TestRedTeamIDCanonicalClaimVariants: README *Canonical ids* — JWT claims
// are made canonical before blocklists, limits, the script and
// X-Seckill-User. With case_fold, a scalper whose issuer spells his id in
// several ways (or who owns "Alice" and "ALICE") is one buyer, and a block
// of "Mallory " holds every spelling.
func TestRedTeamIDCanonicalClaimVariants(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q }, case_fold: true }", srv.URL, jwtIss, jwtAud)
	})
	tok := func(sub any) string { return k.Sign(t, "RS256", withClaim(jwtClaims(""), "sub", sub)) }
	if got := idtBlockUser(t, f, "Mallory "); got != "mallory" {
		t.Fatalf("block stored %q", got)
	}
	// Wait on another activity so a buy racing the add does not count below.
	e2e.Eventually(t, 3*time.Second, "mallory BLOCKED", func() bool {
		return f.do(e2e.Req{URI: "/q/buy?sku=sku1", Header: [][2]string{bearerOf(tok("mallory"))}}).Code == "BLOCKED"
	})
	for _, sub := range []string{"MALLORY", " Mallory\u3000", "\u00a0mAlLoRy\t"} {
		if r := f.buyAs(actOpen, tok(sub)); r.Code != "BLOCKED" {
			t.Errorf("sub %q escaped the block of mallory: %d %s", sub, r.Status, r.Body)
		}
	}
	won := f.buyAs(actOpen, tok("Alice"))
	wantWin(t, won)
	if o := f.shop.Orders()[won.Token()]; o.User != "alice" {
		t.Errorf("shop told %q, want alice", o.User)
	}
	for _, sub := range []string{"ALICE", "alice ", "\u3000aLiCe"} {
		if r := f.buyAs(actOpen, tok(sub)); r.Code != "ALREADY_PURCHASED" {
			t.Errorf("sub %q: %d %s, want ALREADY_PURCHASED (one buyer)", sub, r.Status, r.Body)
		}
	}
	// Ids that are only white space, or that hold '|' or a control byte
	// after canonicalisation, name nobody: 401, never a buyer.
	for _, sub := range []any{" \u3000 ", "a|b", "a\u0000b", strings.Repeat("x", 129)} {
		if r := f.buyAs(actOpen, tok(sub)); r.Code != "UNAUTHENTICATED" {
			t.Errorf("sub %q: %d %s, want 401", sub, r.Status, r.Body)
		}
	}
	// Only actOpen's buys count: the wait above may have won a buy on the
	// other activity before the block reached this instance (a loaded CI
	// run did: 2 buys).
	n := 0
	for _, b := range f.shop.Buys() {
		if b.Activity == actOpen {
			n++
		}
	}
	if n != 1 {
		t.Errorf("shop saw %d buys of %s, want 1", n, actOpen)
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestRedTeamIDNumericClaim: numeric: true — the claim as a JSON number or
// as a string with leading zeros is one buyer; anything not ASCII digits is
// 401 (claim), never a second id.
func TestRedTeamIDNumericClaim(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q }, numeric: true }", srv.URL, jwtIss, jwtAud)
	})
	tok := func(sub any) string { return k.Sign(t, "RS256", withClaim(jwtClaims(""), "sub", sub)) }
	won := f.buyAs(actOpen, tok(7))
	wantWin(t, won)
	if o := f.shop.Orders()[won.Token()]; o.User != "7" {
		t.Errorf("shop told %q, want 7", o.User)
	}
	for _, sub := range []any{"007", " 7 ", "0000000000000000000000007"} {
		if r := f.buyAs(actOpen, tok(sub)); r.Code != "ALREADY_PURCHASED" {
			t.Errorf("sub %q: %d %s, want ALREADY_PURCHASED", sub, r.Status, r.Body)
		}
	}
	for _, sub := range []any{7.5, "7.0", "+7", "-7", "\uff17", "7e0", 1e21} {
		if r := f.buyAs(actOpen, tok(sub)); r.Code != "UNAUTHENTICATED" {
			t.Errorf("sub %v: %d %s, want 401", sub, r.Status, r.Body)
		}
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestRedTeamIDSessionCanonicalUser: identity.user.session with case_fold
// — two sessions whose whoami names "Bob" and "BOB" are one buyer
// (README *Canonical ids*: session answers too), and a block of "bob"
// holds a third session of "bOb".
func TestRedTeamIDSessionCanonicalUser(t *testing.T) {
	w := startWhoamiShop(t, nil)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf(`{ session: { cookie: sid, url: %q, timeout: 200ms }, case_fold: true }`, w.srv.URL+"/internal/whoami")
	})
	won := buyWithCookie(f, actOpen, "sid=u:Bob")
	wantWin(t, won)
	if o := f.shop.Orders()[won.Token()]; o.User != "bob" {
		t.Errorf("shop told %q, want bob", o.User)
	}
	if r := buyWithCookie(f, actOpen, "sid=u:BOB"); r.Code != "ALREADY_PURCHASED" {
		t.Errorf("second session of BOB: %d %s, want ALREADY_PURCHASED", r.Status, r.Body)
	}
	idtBlockUser(t, f, "Carol")
	// The list reaches the proxy within milliseconds; wait on another
	// activity so a buy racing the add does not count below.
	e2e.Eventually(t, 3*time.Second, "carol BLOCKED", func() bool {
		return f.do(e2e.Req{URI: "/q/buy?sku=sku1", Header: [][2]string{{"Cookie", "sid=u:carol"}}}).Code == "BLOCKED"
	})
	if r := buyWithCookie(f, actOpen, "sid=u:CAROL"); r.Code != "BLOCKED" {
		t.Errorf("session of CAROL: %d %s, want BLOCKED", r.Status, r.Body)
	}
	f.p.WantStock(t, actOpen, 99, 0, 1)
}

// TestRedTeamIDLongTokens: README — tokens are refused before any work
// beyond 8 KiB (401, reason malformed), request headers beyond 16 KiB are
// 431; neither reaches the shop or reserves anything.
func TestRedTeamIDLongTokens(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	f := newJWTFixture(t, k)
	// A genuinely signed token just over 8 KiB (a padded claim).
	long := k.Sign(t, "RS256", withClaim(jwtClaims("alice"), "pad", strings.Repeat("x", 8<<10)))
	r := f.buyAs(actOpen, long)
	want401(t, r, `Bearer error="invalid_token"`)
	if n := authFailures(t, f.p, "malformed"); n < 1 {
		t.Errorf("malformed failures = %v", n)
	}
	huge := f.buyAs(actOpen, long+strings.Repeat("A", 9<<10))
	if huge.Status != 431 {
		t.Errorf("17 KiB Authorization: %d %s, want 431", huge.Status, huge.Body)
	}
	if n := len(f.shop.Requests()); n != 0 {
		t.Errorf("the shop saw %d requests", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}

// TestRedTeamIDFleetUserLimitAcrossTwoProxies: README *Limits across the
// fleet* — with limits.fleet on, a verified buyer spreading his buys over
// two proxy instances is let past the per-user bucket at most
// rate × seconds + burst in all (each instance enforcing half), not twice
// that.
func TestRedTeamIDFleetUserLimitAcrossTwoProxies(t *testing.T) {
	const rate, burst = 1, 4
	k := jwttest.RSA(t, "k1")
	srv := jwttest.NewServer(t, k)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf("{ jwt: { jwks_url: %q, issuer: %q, audience: %q } }", srv.URL, jwtIss, jwtAud)
		o.Limits = fmt.Sprintf("{ per_ip: { rate: 1000000, burst: 1000000 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: %d, burst: %d }, fleet: true }", rate, burst)
		o.Activities = append(o.Activities, e2e.Activity{ID: actBig, Stock: 1000, PerUserLimit: 1000, MaxQty: 1})
	})
	p2 := e2e.StartProxy(t, f.opts.Config(t))
	p2.WaitPreheated(t, actBig)
	e2e.Eventually(t, 5*time.Second, "both instances count 2", func() bool {
		return f.p.Gauge(f.p.Metrics.FleetInstances) == 2 && p2.Gauge(p2.Metrics.FleetInstances) == 2
	})
	tok := k.Sign(t, "RS256", jwtClaims("spreader"))
	addrs := []string{f.p.Addr, p2.Addr}
	passed := 0
	start := time.Now()
	codes := map[string]int{}
	for i := 0; i < 40; i++ {
		r := e2e.Do(nil, addrs[i%2], e2e.Req{URI: "/api/seckill/" + actBig + "/" + e2e.SKU + "/buy", Header: [][2]string{bearerOf(tok)}})
		codes[r.Code]++
		if r.Code != "RATE_LIMITED" {
			passed++
		}
	}
	elapsed := time.Since(start)
	limit := burst + int(float64(rate)*elapsed.Seconds()+0.999)
	t.Logf("%d of 40 buys past the per-user bucket in %v (want <= %d): %v", passed, elapsed, limit, codes)
	if passed > limit {
		t.Errorf("%d buys past the per-user bucket over two instances in %v, want at most %d (rate %d, burst %d)", passed, elapsed, limit, rate, burst)
	}
}

// TestRedTeamIDSessionFailsClosed: README *Session identity* — only a 2xx
// naming a valid id signs a buyer in; 401/403 or a 2xx without a usable id
// is 401; any other status (a redirect to a login page included), no
// connection or no answer in time is 503 AUTH_UNAVAILABLE. Nothing is
// reserved or forwarded in any of these, whatever X-User-Id says.
func TestRedTeamIDSessionFailsClosed(t *testing.T) {
	var mode atomic.Value
	mode.Store("")
	who := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "html200":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>please sign in</html>"))
		case "null":
			_, _ = w.Write([]byte(`{"user_id":null}`))
		case "empty":
			_, _ = w.Write([]byte(`{"user_id":"  "}`))
		case "object":
			_, _ = w.Write([]byte(`{"user_id":{"id":"alice"}}`))
		case "pipe":
			_, _ = w.Write([]byte(`{"user_id":"alice|1"}`))
		case "redirect":
			http.Redirect(w, r, "/login", http.StatusFound)
		case "500":
			w.WriteHeader(500)
		case "slow":
			time.Sleep(400 * time.Millisecond)
			_, _ = w.Write([]byte(`{"user_id":"alice"}`))
		case "204":
			w.WriteHeader(204)
		}
	}))
	t.Cleanup(who.Close)
	f := newFixture(t, func(o *e2e.Options) {
		o.User = fmt.Sprintf(`{ session: { cookie: sid, url: %q, timeout: 200ms, negative_ttl: 1ms } }`, who.URL)
	})
	i := 0
	buy := func() e2e.Resp {
		i++ // a fresh cookie each time: no cached answer
		return f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy",
			Header: [][2]string{{"Cookie", fmt.Sprintf("sid=s%d", i)}, {"X-User-Id", "alice"}}})
	}
	for _, tc := range []struct {
		mode, code string
		status     int
	}{
		{"html200", "UNAUTHENTICATED", 401}, {"null", "UNAUTHENTICATED", 401}, {"empty", "UNAUTHENTICATED", 401},
		{"object", "UNAUTHENTICATED", 401}, {"pipe", "UNAUTHENTICATED", 401}, {"204", "UNAUTHENTICATED", 401},
		{"redirect", "AUTH_UNAVAILABLE", 503}, {"500", "AUTH_UNAVAILABLE", 503}, {"slow", "AUTH_UNAVAILABLE", 503},
	} {
		mode.Store(tc.mode)
		r := buy()
		if r.Code != tc.code || r.Status != tc.status {
			t.Errorf("whoami %s: %d %s, want %d %s", tc.mode, r.Status, r.Body, tc.status, tc.code)
		}
	}
	who.Close() // unreachable
	if r := buy(); r.Code != "AUTH_UNAVAILABLE" {
		t.Errorf("whoami down: %d %s, want 503 AUTH_UNAVAILABLE", r.Status, r.Body)
	}
	if n := len(idtShopBuys(f.shop)); n != 0 {
		t.Errorf("the shop saw %d buys", n)
	}
	f.p.WantStock(t, actOpen, 100, 0, 0)
}
