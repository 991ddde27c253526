package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Red team, round "ops 2": a tired operator's config on sale day.

// cliRTParse parses give and returns its FILE:LINE errors (nil when valid).
func cliRTParse(t *testing.T, give string) []Error {
	t.Helper()
	_, err := Parse("seckill.yaml", []byte(give))
	if err == nil {
		return nil
	}
	var es *Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not *Errors: %v", err, err)
	}
	return es.List
}

// cliRTLineOf is the 1-based line of the first line of s containing frag.
func cliRTLineOf(t *testing.T, s, frag string) int {
	t.Helper()
	for i, l := range strings.Split(s, "\n") {
		if strings.Contains(l, frag) {
			return i + 1
		}
	}
	t.Fatalf("%q not in config", frag)
	return 0
}

const cliRTHead = "upstream:\n  url: http://127.0.0.1:8081\n"

func cliRTAct(id, route string) string {
	return fmt.Sprintf(`  - id: %s
    route: %s
    start: 2030-01-01T10:00:00+08:00
    end: 2030-01-01T11:00:00+08:00
    skus: [{id: s1, stock: 5}]
`, id, route)
}

// Two activities whose routes canonicalise to the same buy path: the
// request router (proxy/route.go) takes the first route that matches, so
// the second activity can never be bought. The validator already refuses
// exact and case-only duplicates ("two paths differing only in case are
// one route to a case-insensitive matcher"); the router also drops a
// trailing slash and lets the last literal carry a ".ext" (README, "In
// front of your shop"), so these are one route too and must be a
// FILE:LINE error at the second activity.
func TestRedTeamOps2OverlappingRoutes(t *testing.T) {
	tests := []struct {
		name   string
		r1, r2 string
	}{
		{"trailing slash", `{ path: "/buy/{sku}" }`, `{ path: "/buy/{sku}/" }`},
		{"trailing slash and case", `{ path: "/buy/{sku}" }`, `{ path: "/BUY/{sku}/" }`},
		{"ext suffix of the last literal", `{ path: "/api/buy", sku_from: "query:sku" }`, `{ path: "/api/buy.json", sku_from: "query:sku" }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := cliRTHead + "activities:\n" + cliRTAct("a1", tt.r1) + cliRTAct("a2", tt.r2)
			errs := cliRTParse(t, give)
			line := cliRTLineOf(t, give, "id: a2")
			for _, e := range errs {
				if e.Line >= line && strings.Contains(e.Msg, "a2") && strings.Contains(e.Msg, "a1") {
					return
				}
			}
			t.Fatalf("routes %s (a1) and %s (a2) match the same requests, a2 is unreachable; want a FILE:LINE error naming both at or after line %d, got %v", tt.r1, tt.r2, line, errs)
		})
	}
}

// validate says "ok" to listeners serve cannot open: `serve` then exits 1
// ("serve: listen 127.0.0.1:99999: listen tcp: address 99999: invalid
// port", "serve: admin listen :18089: ... address already in use")
// without FILE:LINE, and a Redis or shop address with an impossible port
// is only found at the first command. SPEC §2: validate exits 2 with every
// error as FILE:LINE.
func TestRedTeamOps2ImpossibleAddresses(t *testing.T) {
	act := "activities:\n" + cliRTAct("a1", `{ path: "/buy/{sku}" }`)
	tests := []struct {
		name, give, frag string
	}{
		{"listen port above 65535", "listen: \"127.0.0.1:99999\"\n" + cliRTHead + act, "listen:"},
		{"listen port not a number", "listen: \":abc\"\n" + cliRTHead + act, "listen:"},
		{"admin.listen port above 65535", "admin: { listen: \"127.0.0.1:70000\" }\n" + cliRTHead + act, "admin:"},
		{"listen and admin.listen the same", "listen: \"127.0.0.1:18089\"\nadmin: { listen: \"127.0.0.1:18089\" }\n" + cliRTHead + act, "admin:"},
		{"redis port above 65535", "redis: { addrs: [\"127.0.0.1:70000\"] }\n" + cliRTHead + act, "redis:"},
		{"upstream port above 65535", "upstream:\n  url: http://127.0.0.1:99999\n" + act, "url:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := cliRTParse(t, tt.give)
			line := cliRTLineOf(t, tt.give, tt.frag)
			for _, e := range errs {
				if e.Line == line {
					return
				}
			}
			t.Fatalf("want a FILE:LINE error at line %d, got %v\n%s", line, errs, tt.give)
		})
	}
}

// A huge upstream.timeout (an operator's "2000000h" for "2000ms"): the
// default shutdown_timeout, 2 × timeout + 5s, overflows, and the error is
// reported at line 1 about a key the file does not set, with a negative
// duration: "seckill.yaml:1: server.shutdown_timeout (-1124095h34m28.709551616s)
// must be at least upstream.timeout". The error belongs on the line of
// upstream.timeout and must not show an overflowed value.
func TestRedTeamOps2HugeUpstreamTimeout(t *testing.T) {
	give := "upstream:\n  url: http://127.0.0.1:8081\n  timeout: 2000000h\nactivities:\n" + cliRTAct("a1", `{ path: "/buy/{sku}" }`)
	errs := cliRTParse(t, give)
	if len(errs) == 0 {
		t.Fatal("a 228-year upstream.timeout was accepted")
	}
	line := cliRTLineOf(t, give, "timeout: 2000000h")
	for _, e := range errs {
		if strings.Contains(e.Msg, "(-") {
			t.Errorf("message shows an overflowed (negative) duration: %v", e)
		}
	}
	found := false
	for _, e := range errs {
		if e.Line == line {
			found = true
		}
	}
	if !found {
		t.Errorf("no error at upstream.timeout's line %d: %v", line, errs)
	}
}

// A tab in the indentation: yaml.v3 says "found a tab character that
// violates indentation" for some placements but, for a list item indented
// with a tab, only "seckill.yaml:4: YAML syntax: found character that
// cannot start any token": the operator cannot see the tab in the editor
// and the message does not name it.
func TestRedTeamOps2TabIndentHint(t *testing.T) {
	for _, give := range []string{
		cliRTHead + "activities:\n\t- id: a1\n",
		cliRTHead + "activities:\n  - id: a1\n\tstart: 2030-01-01T10:00:00+08:00\n",
	} {
		errs := cliRTParse(t, give)
		line := cliRTLineOf(t, give, "\t")
		ok := false
		for _, e := range errs {
			if e.Line == line && strings.Contains(strings.ToLower(e.Msg), "tab") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("tab-indented line %d: want an error there naming the tab, got %v\n%q", line, errs, give)
		}
	}
}

// What held: BOM, CRLF, duplicate keys, wrong shapes, unit-less durations,
// zone-less times and misspelled keys are all FILE:LINE errors with hints.
func TestRedTeamOps2TiredOperatorHeld(t *testing.T) {
	act := "activities:\n" + cliRTAct("a1", `{ path: "/buy/{sku}" }`)
	good := cliRTHead + act
	if errs := cliRTParse(t, "\ufeff"+good); errs != nil {
		t.Errorf("BOM: %v", errs)
	}
	if errs := cliRTParse(t, strings.ReplaceAll(good, "\n", "\r\n")); errs != nil {
		t.Errorf("CRLF: %v", errs)
	}
	bad := []struct {
		name, give, frag, msg string
	}{
		{"duration without unit", "upstream:\n  url: http://127.0.0.1:8081\n  timeout: 500\n" + act, "timeout: 500", "Go duration"},
		{"time without zone", cliRTHead + strings.Replace(act, "2030-01-01T10:00:00+08:00", "2030-01-01T10:00:00", 1), "start:", "with a zone"},
		{"end before start across zones", cliRTHead + strings.Replace(act, "2030-01-01T11:00:00+08:00", "2030-01-01T03:00:00+01:00", 1), "end:", "must be after start"},
		{"duplicate key", cliRTHead + "upstream: {url: http://x:1}\n" + act, "upstream: {url", "already set at line 1"},
		{"list for a map", cliRTHead + "limits: [1, 2]\n" + act, "limits:", "want a mapping"},
		{"string for an int", cliRTHead + strings.Replace(act, "stock: 5", "stock: five", 1), "stock: five", "whole number"},
		{"misspelled key", cliRTHead + act + "    per_user_limt: 2\n", "per_user_limt", `did you mean "per_user_limit"`},
		{"stock at the activity level", cliRTHead + act + "    stock: 2\n", "    stock: 2", `"stock" under skus`},
		{"two activities, same id", cliRTHead + act + cliRTAct("a1", `{ path: "/other/{sku}" }`), "/other/", "already used"},
		{"same route twice", cliRTHead + act + cliRTAct("a2", `{ path: "/BUY/{sku}" }`), "/BUY/", "already used by activity"},
		{"zero shards", cliRTHead + act + "    shards: 0\n", "shards: 0", "between 1 and 1024"},
		{"negative queue workers", cliRTHead + act + "    queue: { workers: -1 }\n", "queue:", "at least 1"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			errs := cliRTParse(t, tt.give)
			line := cliRTLineOf(t, tt.give, tt.frag)
			for _, e := range errs {
				if strings.Contains(e.Msg, tt.msg) && (e.Line == line || e.Line == line+1 || e.Line == line-1) {
					return
				}
			}
			t.Fatalf("want %q near line %d, got %v", tt.msg, line, errs)
		})
	}
}
