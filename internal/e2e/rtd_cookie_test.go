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

// rtdSimpleCookie is Python's http.cookies.SimpleCookie(header)[name]
// (Bottle's request.cookies, CherryPy, aiohttp before its own parser): a
// pair ends at ';' OR at white space, and the LAST of a name wins
// (checked with CPython 3: "sess_id=u:alice; a=b sess_id=u:bob" is
// {a: b, sess_id: u:bob}).
func rtdSimpleCookie(header, name string) string {
	val := ""
	for _, f := range strings.FieldsFunc(header, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' }) {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			val = v
		}
	}
	return val
}

// rtdTomcatSession is the session id Tomcat 9 takes from a Cookie header
// (org.apache.tomcat.util.http.parser.Cookie.parseCookie: a header that
// starts with "$Version=1;" is read by RFC 2109, where ',' ends a cookie
// as ';' does; CoyoteAdapter.parseSessionCookiesId keeps the FIRST
// session cookie that names a live session — in this test every one
// does). Without $Version it is RFC 6265 (';' only), first wins.
func rtdTomcatSession(header, name string) string {
	h := strings.TrimLeft(header, " \t")
	seps := ";"
	if strings.HasPrefix(h, "$Version=1;") || strings.HasPrefix(h, "$Version=1,") {
		seps = ";,"
	}
	for _, f := range strings.FieldsFunc(h, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
		if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestRTDSessionCookieHiddenInAnotherCookie: with identity.user.session the
// proxy reads the session cookie as fasthttp splits the Cookie header (on
// ';' only) and refuses its name twice. Shops' parsers split on more:
// Python's SimpleCookie (Bottle, CherryPy) ends a pair at white space and
// keeps the last of a name; Tomcat reads a header starting "$Version=1;"
// by RFC 2109, where ',' separates cookies, and keeps the first session.
// So "sess_id=u:alice; a=b sess_id=u:bob" was one cookie sess_id=u:alice
// to the proxy (whoami: alice, reserved on alice's limit) and bob's
// session to a Bottle shop; "$Version=1; a=b, sess_id=u:bob;
// sess_id=u:carol" was carol to the proxy and bob to Tomcat. Bob, who had
// bought his one unit, had the shop run a second buy in his session with
// each throwaway account. Want: a cookie name a shop's parser finds inside
// another cookie (after white space or ',') counts as a second copy: 400.
func TestRTDSessionCookieHiddenInAnotherCookie(t *testing.T) {
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
		Activities: []e2e.Activity{{ID: "rtdck", Stock: 20, Shards: 1, PerUserLimit: 1}}}.Config(t))
	p.Preheat(t, "rtdck")
	buy := func(cookie string) e2e.Resp {
		return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rtdck/" + e2e.SKU + "/buy", Header: [][2]string{{"Cookie", cookie}}})
	}
	if got := buy("sess_id=u:bob"); got.Code != "WIN" {
		t.Fatalf("bob's buy: %d %s", got.Status, got.Body)
	}
	for _, c := range []string{
		"sess_id=u:alice; a=b sess_id=u:bob",   // SimpleCookie: white space ends a pair, last wins
		"sess_id=u:alice2; a=b\tsess_id=u:bob", // a tab too

		"$Version=1; a=b, sess_id=u:bob; sess_id=u:carol",    // Tomcat RFC 2109: ',' separates, first wins
		"$Version=1; a=b ,  sess_id=u:bob; sess_id=u:carol2", // white space around the ','
		"$Version=1; a=b, SESS_ID=u:bob; sess_id=u:carol3",   // another case (ASP.NET Core's collection ignores it)
	} {
		if got := buy(c); got.Status != 400 || got.Code != "BAD_REQUEST" {
			t.Errorf("Cookie %q: %d %s, want 400 BAD_REQUEST", c, got.Status, got.Body)
		}
	}
	// Controls: white space and commas in other cookies' values that name
	// no session cookie still buy.
	for _, c := range []string{
		"sess_id=u:dave; pref=\"a b, c\"",
		"$Version=1; sess_id=u:erin",
		"theme=dark, sess_idx=1; sess_id=u:frank",
	} {
		if got := buy(c); got.Code != "WIN" {
			t.Errorf("control Cookie %q: %d %s, want WIN", c, got.Status, got.Body)
		}
	}

	bottle, tomcat := map[string]int{}, map[string]int{}
	for _, rq := range shop.Requests() {
		if rq.Header.Get("X-Seckill-Token") == "" {
			continue
		}
		ck := rq.Header.Get("Cookie")
		bottle[rtdSimpleCookie(ck, "sess_id")]++
		tomcat[rtdTomcatSession(ck, "sess_id")]++
		t.Logf("shop buy: X-Seckill-User %s, Cookie %q: SimpleCookie %s, Tomcat %s", rq.Header.Get("X-Seckill-User"), ck,
			rtdSimpleCookie(ck, "sess_id"), rtdTomcatSession(ck, "sess_id"))
	}
	if bottle["u:bob"] > 1 || tomcat["u:bob"] > 1 {
		t.Errorf("BUG: per_user_limit 1, but the shop ran bob's session %d times (SimpleCookie) / %d times (Tomcat RFC 2109): the proxy judged other users",
			bottle["u:bob"], tomcat["u:bob"])
	}
}
