package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// countShop answers verify by token and count_url with a count it is told.
type countShop struct {
	mu     sync.Mutex
	orders map[string]string // token -> order id; others 404
	broken map[string]bool   // tokens verify answers 503 for
	count  int
}

func (s *countShop) set(count int) { s.mu.Lock(); s.count = count; s.mu.Unlock() }

func (s *countShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/internal/count":
		_ = json.NewEncoder(w).Encode(map[string]int{"count": s.count})
	case "/internal/orders":
		tok := r.URL.Query().Get("token")
		if s.broken[tok] {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		id, ok := s.orders[tok]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
	default:
		http.NotFound(w, r)
	}
}

// A repairing reconcile against a shop that lacks an order, then one that
// holds an extra order, records shop_missing, unsettled (with the stale
// reservation's evidence) and shop_extra; --exceptions lists them, and the
// CSV export parses back to the same rows.
func TestReconcileExceptions(t *testing.T) {
	srv := redistest.Start(t)
	sh := &countShop{orders: map[string]string{}, broken: map[string]bool{}}
	hs := httptest.NewServer(sh)
	t.Cleanup(hs.Close)
	cfgPath := lifeConfig(t, srv.Addr, hs.URL, 10, `    verify:
      url: "`+hs.URL+`/internal/orders?token={token}"
      count_url: "`+hs.URL+`/internal/count?sku={sku}"
reconcile: { exceptions_max: 100 }
`)
	want(t, 0, "kact", "preheat", "-c", cfgPath)
	want(t, 0, "no reconcile exceptions recorded", "reconcile", "-c", cfgPath, "--exceptions")
	cfg, st := openStore(t, cfgPath)
	a := &cfg.Activities[0]
	bg := context.Background()
	reserveAt := func(user string, at time.Time) store.Token {
		t.Helper()
		r, err := st.Reserve(bg, store.ReserveRequest{Activity: "kact", SKU: "sku1", User: user, Qty: 1, Limit: 1,
			Shards: a.Shards, NowMs: at.UnixMilli(), ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("reserve %s: %v %v", user, r.Code, err)
		}
		return r.Token
	}
	// Two confirmed orders, of which the shop holds one.
	for i, u := range []string{"u1", "u2"} {
		tok := reserveAt(u, time.Now())
		if code, err := st.Confirm(bg, tok, a.Shards, "O-"+u); err != nil || code != lua.OK {
			t.Fatalf("confirm %d: %v %v", i, code, err)
		}
		if u == "u1" {
			sh.orders[tok.String()] = "O-u1"
		}
	}
	// A reservation pending for an hour whose order verify cannot tell
	// (503): left pending, kept as unsettled. Its user id needs quoting.
	oddUser := `o'brien, "jr"`
	stale := reserveAt(oddUser, time.Now().Add(-time.Hour))
	sh.broken[stale.String()] = true
	sh.set(1)

	// Pass 1: within tolerance while the activity runs: notes, exit 0.
	out, _ := want(t, 0, "2 exceptions found, 2 new recorded", "reconcile", "-c", cfgPath, "--repair")
	if !strings.Contains(out, "note: sku sku1: shop holds fewer units") {
		t.Fatalf("pass 1: %s", out)
	}
	// Pass 2: same findings (not recorded again), and the shop now holds
	// orders beyond confirmed+pending: shop_extra, an alert, exit 1.
	sh.set(5)
	want(t, 1, "1 new recorded", "reconcile", "-c", cfgPath, "--repair")

	code, out, errs := cliRun("reconcile", "-c", cfgPath, "--exceptions", "--json", "--activity", "kact")
	var got struct{ Exceptions []store.Exception }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("--exceptions --json: %d %v\n%s\n%s", code, err, out, errs)
	}
	kinds := map[string]store.Exception{}
	for _, e := range got.Exceptions {
		kinds[e.Kind] = e
	}
	if len(got.Exceptions) != 3 || len(kinds) != 3 {
		t.Fatalf("exceptions: %+v", got.Exceptions)
	}
	if e := kinds["unsettled"]; e.Token != stale.String() || e.User != oddUser || e.Qty != 1 || e.State != "pending" ||
		e.Shop != "unknown" || e.Severity != "note" || e.SKU != "sku1" || !strings.Contains(e.Reason, "verify answered 503") || e.At.IsZero() {
		t.Fatalf("unsettled: %+v", e)
	}
	if e := kinds["shop_missing"]; e.Qty != 1 || e.Shop != "count=1" || e.Severity != "note" {
		t.Fatalf("shop_missing: %+v", e)
	}
	if e := kinds["shop_extra"]; e.Qty != 2 || e.Shop != "count=5" || e.Severity != "alert" {
		t.Fatalf("shop_extra: %+v", e)
	}
	out, _ = want(t, 0, "shop_extra", "reconcile", "-c", cfgPath, "--exceptions")
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, "token="+stale.String()) {
		t.Fatalf("--exceptions text:\n%s", out)
	}

	// CSV: stdout and --out FILE, parsed back, are the same rows.
	wantRows := [][]string{exceptionsHeader}
	for _, e := range got.Exceptions {
		wantRows = append(wantRows, exceptionRow(e))
	}
	code, out, errs = cliRun("reconcile", "-c", cfgPath, "--export", "csv")
	if code != 0 {
		t.Fatalf("--export csv: %d %s", code, errs)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || !reflect.DeepEqual(rows, wantRows) {
		t.Fatalf("csv rows (%v):\n got %q\nwant %q", err, rows, wantRows)
	}
	if rows[1][7] != oddUser && rows[2][7] != oddUser && rows[3][7] != oddUser {
		t.Fatalf("user id lost its quoting: %q", rows)
	}
	file := filepath.Join(t.TempDir(), "exceptions.csv")
	want(t, 0, "exported 3 exceptions to "+file, "reconcile", "-c", cfgPath, "--export", "csv", "--out", file)
	if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, []byte(out)) {
		t.Fatalf("--out file differs from stdout: %v\n%s", err, b)
	}

	// Usage errors.
	want(t, 2, "the only format is csv", "reconcile", "-c", cfgPath, "--export", "xlsx")
	want(t, 2, "--out needs --export csv", "reconcile", "-c", cfgPath, "--out", file)
	want(t, 2, "not both", "reconcile", "-c", cfgPath, "--exceptions", "--export", "csv")
	want(t, 2, "only read", "reconcile", "-c", cfgPath, "--exceptions", "--repair")
	want(t, 2, `no activity "nope"`, "reconcile", "-c", cfgPath, "--exceptions", "--activity", "nope")
}
