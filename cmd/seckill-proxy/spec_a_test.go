package main

// SPEC.md §2–§3 audit (first half): command behaviours no other test checks.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// specAReserve takes one unit of kact for user, created at created.
func specAReserve(t *testing.T, st *store.Store, a *config.Activity, user string, created time.Time) store.Token {
	t.Helper()
	r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: "kact", SKU: "sku1", User: user, Qty: 1, Limit: 1,
		Shards: 4, NowMs: created.UnixMilli(), ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve: %v %v", r.Code, err)
	}
	return r.Token
}

// SPEC §3: "A config that fails validation never starts a server"; §2:
// exit 2 for a bad config, errors as FILE:LINE.
func TestSpecAServeBadConfigStartsNothing(t *testing.T) {
	good := lifeConfig(t, "127.0.0.1:1", "http://127.0.0.1:1", 5, "")
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	text := string(raw) + "    stok: 5\n"
	if err := os.WriteFile(bad, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	line := strings.Count(text, "\n")
	cfgListen := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(text, "\n", 2)[0], `listen: "`), `"`)
	type res struct {
		code      int
		out, errs string
	}
	done := make(chan res, 1)
	go func() { c, o, e := cliRun("serve", "-c", bad); done <- res{c, o, e} }()
	select {
	case r := <-done:
		if r.code != 2 || !strings.Contains(r.errs, fmt.Sprintf("%s:%d: ", bad, line)) {
			t.Fatalf("serve with a bad config: exit %d, stderr %q (want exit 2 and %s:%d:)", r.code, r.errs, bad, line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve with a bad config is still running after 5 s")
	}
	if c, err := net.DialTimeout("tcp", cfgListen, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("something listens on %s after a refused serve", cfgListen)
	}
}

// SPEC §2: preheat "refuses (exit 1) to overwrite a running activity's
// stock without --force; idempotent when stock is already as configured".
// Here the activity is inside its window with no reservation yet.
func TestSpecAPreheatRunningActivity(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]

	changed := filepath.Join(t.TempDir(), "changed.yaml")
	raw, _ := os.ReadFile(cfgPath)
	if err := os.WriteFile(changed, []byte(strings.Replace(string(raw), "stock: 5", "stock: 9", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("preheat", "-c", changed)
	if code != 1 {
		t.Errorf("preheat of other stock into a running activity: exit %d (want 1)\n%s%s", code, out, errs)
	}
	if k := skuStatus(t, st, a); !k.OK || k.Initial != 5 || k.Remaining != 5 {
		t.Fatalf("a refused preheat changed the stock: %+v", k)
	}

	// Sales happen; preheating the same config again is harmless, exit 0.
	specAReserve(t, st, a, "u1", time.Now())
	before := skuStatus(t, st, a)
	code, out, errs = cliRun("preheat", "-c", cfgPath)
	if code != 0 {
		t.Errorf("preheat of the same stock: exit %d (want 0: idempotent)\n%s%s", code, out, errs)
	}
	if after := skuStatus(t, st, a); after != before {
		t.Fatalf("preheat of the same stock changed counters: %+v -> %+v", before, after)
	}
}

// SPEC §2: status --json "released counts units given back (they are
// already inside remaining)".
func TestSpecAStatusJSONCountsReleased(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	tok := specAReserve(t, st, a, "u1", time.Now())
	specAReserve(t, st, a, "u2", time.Now())
	want(t, 0, "released", "release", "-c", cfgPath, tok.String(), "--reason", "unpaid")
	code, out, errs := cliRun("status", "-c", cfgPath, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, errs)
	}
	var doc struct {
		Activities []struct {
			ID   string `json:"id"`
			SKUs []map[string]any
		} `json:"activities"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Activities) != 1 || len(doc.Activities[0].SKUs) != 1 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	k := doc.Activities[0].SKUs[0]
	for name, v := range map[string]any{"initial": 5.0, "remaining": 4.0, "pending": 1.0, "confirmed": 0.0, "released": 1.0, "ok": true} {
		if k[name] != v {
			t.Errorf("status --json: %s = %v, want %v\n%s", name, k[name], v, out)
		}
	}
}

// SPEC §2: reconcile "compare Redis with the shop; report by default,
// repair only with --repair" — with verify.url set and the shop saying
// the order does not exist.
func TestSpecAReconcileRepairsOnlyWithRepair(t *testing.T) {
	srv := redistest.Start(t)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer shop.Close()
	cfgPath := lifeConfig(t, srv.Addr, shop.URL, 5, fmt.Sprintf("    verify: { url: %q }\n", shop.URL+"/internal/orders?token={token}"))
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	tok := specAReserve(t, st, a, "u1", time.Now().Add(-time.Hour))
	before := skuStatus(t, st, a)

	code, out, errs := cliRun("reconcile", "-c", cfgPath)
	if !strings.Contains(out+errs, tok.String()) {
		t.Errorf("reconcile (report) does not name the stale reservation: exit %d\n%s%s", code, out, errs)
	}
	if after := skuStatus(t, st, a); after != before {
		t.Fatalf("reconcile without --repair changed stock: %+v -> %+v", before, after)
	}
	if res, ok, _ := st.Lookup(context.Background(), tok, 4); !ok || res.State != store.StatePending {
		t.Fatalf("reconcile without --repair settled the reservation: %+v", res)
	}

	code, out, errs = cliRun("reconcile", "-c", cfgPath, "--repair")
	if res, ok, _ := st.Lookup(context.Background(), tok, 4); !ok || res.State != store.StateReleased {
		t.Fatalf("reconcile --repair (exit %d) left %+v\n%s%s", code, res, out, errs)
	}
	if k := skuStatus(t, st, a); !k.OK || k.Remaining != 5 || k.Pending != 0 {
		t.Fatalf("after repair: %+v", k)
	}
}

// SPEC §2: "Logs are structured (JSON by default, console with
// --log-format console)" — serve's log lines on stderr.
func TestSpecALogsJSONByDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	srv := redistest.Start(t)
	bin := buildBinary(t)
	firstLine := func(extra ...string) string {
		t.Helper()
		cfgPath := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 5, "")
		cmd := exec.Command(bin, append([]string{"serve", "-c", cfgPath}, extra...)...)
		cmd.Env = os.Environ()
		pr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) != "" {
					lines <- sc.Text()
					break
				}
			}
			close(lines)
		}()
		select {
		case l := <-lines:
			return l
		case <-time.After(15 * time.Second):
			t.Fatal("serve logged nothing within 15 s")
		}
		return ""
	}
	l := firstLine()
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil || m["level"] == nil || m["msg"] == nil {
		t.Errorf("default log line is not a JSON record with level and msg: %q (%v)", l, err)
	}
	l = firstLine("--log-format", "console")
	if err := json.Unmarshal([]byte(l), &m); err == nil {
		t.Errorf("--log-format console still logs JSON: %q", l)
	}
}
