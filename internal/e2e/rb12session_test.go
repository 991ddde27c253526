package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// rb12PHPCookie is PHP's $_COOKIE[name] for a Cookie header
// (main/php_variables.c: php_default_treat_data with PARSE_COOKIE splits
// on ';' and php_register_variable_ex files each under its mangled name —
// leading spaces dropped, '.' and ' ' read as '_', "a[b]" an array named
// a — and for cookies the FIRST of a name is kept: "more specific paths
// are listed above the less specific ones").
func rb12PHPCookie(header, name string) string {
	seen := map[string]bool{}
	val := ""
	for _, part := range strings.Split(header, ";") {
		k, v, _ := strings.Cut(part, "=")
		k = strings.TrimLeft(k, " ")
		var b strings.Builder
		for _, c := range []byte(k) {
			if c == '[' {
				break
			}
			if c == ' ' || c == '.' {
				c = '_'
			}
			b.WriteByte(c)
		}
		mk := b.String()
		if mk == "" || seen[mk] {
			continue
		}
		seen[mk] = true
		if mk == name {
			val = v
		}
	}
	return val
}

// TestRB12SessionCookieSecondSpelling: with identity.user.session the
// proxy asks the shop's whoami about the session cookie named exactly as
// configured (proxy/session.go readBuyer → cookieOnce, an exact name
// compare) and refuses that name sent twice, "since the shop may read the
// other copy". The query/form readers know PHP's spellings of a name
// ("sess.id", " sess_id", "sess_id[x]" are $_GET['sess_id'], proxy/args.go
// argCopies), the cookie reader does not. PHP files cookies through the
// same php_register_variable_ex, keeping the first of a name. So
// `Cookie: sess.id=<bob's session>; sess_id=<alice's session>` is judged
// as alice (whoami on alice's cookie), reserved on alice's limit, and the
// PHP shop — Laravel's session cookie is laravel_session — runs the buy
// in bob's session: bob, who already bought his one unit, orders a second
// (per_user_limit 1 at the shop broken; the proxy's records show one unit
// each). Want: a cookie a PHP shop reads under the session cookie's name
// counts as a second copy (400), as for query and form fields.
func TestRB12SessionCookieSecondSpelling(t *testing.T) {
	who := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("sess_id")
		if err != nil || !strings.HasPrefix(c.Value, "u:") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"user_id": strings.TrimPrefix(c.Value, "u:")})
	}))
	t.Cleanup(who.Close)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	p := e2e.StartProxy(t, e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		User:       fmt.Sprintf(`{ session: { cookie: sess_id, url: %q } }`, who.URL+"/internal/whoami"),
		Activities: []e2e.Activity{{ID: "rb12ss", Stock: 10, Shards: 1, PerUserLimit: 1}}}.Config(t))
	p.Preheat(t, "rb12ss")
	buy := func(cookie string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rb12ss/" + e2e.SKU + "/buy", Header: [][2]string{{"Cookie", cookie}}})
	}
	// Control: the exact name twice is refused.
	if got := buy("sess_id=u:bob; sess_id=u:alice"); got.Status != 400 {
		t.Fatalf("control (sess_id twice): %d %s, want 400", got.Status, got.Body)
	}
	// Bob buys his one unit.
	if got := buy("sess_id=u:bob"); got.Code != "WIN" {
		t.Fatalf("bob's buy: %d %s", got.Status, got.Body)
	}
	if got := buy("sess_id=u:bob"); got.Code != "ALREADY_PURCHASED" {
		t.Fatalf("bob again: %d %s, want ALREADY_PURCHASED", got.Status, got.Body)
	}
	// Then a buy judged as alice, run by a PHP shop in bob's session.
	got := buy("sess.id=u:bob; sess_id=u:alice")
	t.Logf("sess.id=bob; sess_id=alice: %d %s", got.Status, got.Code)
	if got.Status != 400 || got.Code != "BAD_REQUEST" {
		t.Errorf("sess.id=bob; sess_id=alice: %d %s, want 400 BAD_REQUEST", got.Status, got.Body)
	}

	phpUsers := map[string]int{}
	for _, rq := range shop.Requests() {
		if rq.Header.Get("X-Seckill-Token") == "" {
			continue
		}
		u := strings.TrimPrefix(rb12PHPCookie(rq.Header.Get("Cookie"), "sess_id"), "u:")
		phpUsers[u]++
		t.Logf("shop buy: X-Seckill-User %s, Cookie %q, PHP's $_COOKIE['sess_id'] session user %s",
			rq.Header.Get("X-Seckill-User"), rq.Header.Get("Cookie"), u)
	}
	if phpUsers["bob"] > 1 {
		t.Errorf("BUG: per_user_limit 1, but a PHP shop ran %d buys in bob's session (the proxy judged the second as alice: it read the cookie named sess_id, PHP read sess.id as sess_id first)",
			phpUsers["bob"])
	}
}
