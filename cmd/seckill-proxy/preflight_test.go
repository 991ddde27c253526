package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// preflightJSON runs preflight --json and decodes its document strictly:
// {"checks":[{"name","result","detail","fix"}]}, nothing else.
func preflightJSON(t *testing.T, args ...string) (int, []map[string]string) {
	t.Helper()
	code, out, errs := cliRun(append([]string{"preflight", "--json"}, args...)...)
	var doc map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 1 || doc["checks"] == nil {
		t.Fatalf("preflight --json: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	var checks []map[string]string
	for _, c := range doc["checks"] {
		var keys []string
		m := map[string]string{}
		for k, v := range c {
			keys = append(keys, k)
			s, ok := v.(string)
			if !ok {
				t.Fatalf("check %v: %s is not a string", c, k)
			}
			m[k] = s
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != "detail,fix,name,result" {
			t.Fatalf("check has keys %v", keys)
		}
		switch m["result"] {
		case "pass":
			if m["fix"] != "" {
				t.Fatalf("a pass with a fix: %v", m)
			}
		case "warn", "fail":
			if m["fix"] == "" {
				t.Fatalf("a %s without a fix: %v", m["result"], m)
			}
		default:
			t.Fatalf("result %q", m["result"])
		}
		checks = append(checks, m)
	}
	return code, checks
}

func result(checks []map[string]string, name string) string {
	for _, c := range checks {
		if c["name"] == name {
			return c["result"]
		}
	}
	return ""
}

// preflight's exit codes: 0 with warnings only, 1 with a failed check, 2
// for bad usage or a bad config; text and --json say the same.
func TestPreflightCommand(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--maxmemory", "256mb")
	t.Setenv("SECKILL_ADMIN_TOKEN", "t0ken")
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/internal/orders" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer shop.Close()
	verify := "    verify: { url: \"" + shop.URL + "/internal/orders?token={token}\" }\n"
	good := lifeConfig(t, srv.Addr, shop.URL, 5, verify)
	// Running and not preheated: buyers would get NOT_READY.
	code, checks := preflightJSON(t, "-c", good)
	if code != 1 || result(checks, "preheat kact") != "fail" || result(checks, "config") != "pass" {
		t.Fatalf("before preheat: exit %d %v", code, checks)
	}
	want(t, 1, "FAIL  preheat kact: running and not preheated", "preflight", "-c", good)
	want(t, 0, "kact: created", "preheat", "-c", good)

	// Preheated: nothing fails (lifeConfig's Redis timeout and the test
	// server's defaults leave warnings at most).
	out, _ := want(t, 0, "PASS  preheat kact: preheated at ", "preflight", "-c", good)
	for _, line := range []string{"PASS  redis-reachable " + srv.Addr, "PASS  scripts " + srv.Addr, "PASS  shop: ", "PASS  verify-url kact: 404", "PASS  key-ttl kact", "preflight: "} {
		if !strings.Contains(out, line) {
			t.Fatalf("no %q in\n%s", line, out)
		}
	}
	if code, checks = preflightJSON(t, "-c", good); code != 0 || len(checks) < 15 {
		t.Fatalf("preheated: exit %d, %d checks", code, len(checks))
	}

	// The shop down: exit 1, the failed check says what to do.
	down := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	out, errs := want(t, 1, "FAIL  shop: GET http://127.0.0.1:1: ", "preflight", "-c", down)
	if !strings.Contains(out, "      fix: start the shop or fix upstream.url") || !strings.Contains(errs, "preflight: 1 checks failed") {
		t.Fatalf("stdout %s\nstderr %s", out, errs)
	}
	if code, checks = preflightJSON(t, "-c", down); code != 1 || result(checks, "shop") != "fail" {
		t.Fatalf("shop down: exit %d %v", code, checks)
	}

	// A bad config: exit 2, FILE:LINE on stderr, and a failed config
	// check with --json.
	raw, _ := os.ReadFile(good)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(raw), "shards: 4", "shards: many", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs = want(t, 2, "shards: want a whole number", "preflight", "-c", bad)
	if !strings.Contains(errs, bad+":") {
		t.Fatalf("no FILE:LINE in %q", errs)
	}
	code, checks = preflightJSON(t, "-c", bad)
	if code != 2 || len(checks) != 1 || checks[0]["name"] != "config" || checks[0]["result"] != "fail" || !strings.Contains(checks[0]["detail"], bad+":") {
		t.Fatalf("bad config --json: exit %d %v", code, checks)
	}
	want(t, 2, "flag provided but not defined: -bogus", "preflight", "-c", good, "--bogus")
	want(t, 2, `preflight: unexpected argument "kact"`, "preflight", "-c", good, "kact")
}
