package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team rtb: stock that adds up on a bad day, at the operator's hand.

// rtbSell reserves one unit each for n buyers of kact/sku1 (the config at
// path) and confirms the first confirmed of them; it returns the tokens.
func rtbSell(t *testing.T, path string, n, confirmed int) []string {
	t.Helper()
	cfg, st := openStore(t, path)
	a := &cfg.Activities[0]
	var toks []string
	for u := 0; len(toks) < n && u < 100; u++ {
		r, err := st.Reserve(context.Background(), store.ReserveRequest{Activity: a.ID, SKU: "sku1", User: fmt.Sprintf("u%d", u), Qty: 1, Limit: 1,
			Shards: a.Shards, NowMs: time.Now().UnixMilli(), ExpireAt: store.ExpireAt(a), Stock: a.SKUs[0].Stock})
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		if r.Code != lua.OK {
			continue // the buyer's home shard is dry: another buyer
		}
		if len(toks) < confirmed {
			if c, err := st.Confirm(context.Background(), r.Token, a.Shards, fmt.Sprintf("O-%d", u)); err != nil || c != lua.OK {
				t.Fatalf("confirm: %v %v", c, err)
			}
		}
		toks = append(toks, r.Token.String())
	}
	if len(toks) < n {
		t.Fatalf("reserved %d of %d", len(toks), n)
	}
	return toks
}

// rtbCountShop is a shop whose verify.url knows no order and whose
// count_url says *orders units of every SKU.
func rtbCountShop(t *testing.T, orders *atomic.Int64) string {
	t.Helper()
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/internal/count" {
			fmt.Fprintf(w, `{"count": %d}`, orders.Load())
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(shop.Close)
	return shop.URL
}

// The Redis holding a running sale restarts without persistence (README
// asks for appendonly; preflight only warns without it): stock, holdings
// and reservations are gone, every buyer is answered NOT_READY. The
// operator, seeing NOT_READY, does what preflight's hint for "running and
// not preheated" says: `preheat`. It answered "created", exit 0, and
// loaded the whole stock again: every unit the shop had already taken an
// order for went on sale a second time (here 2 of 10), the buyers who
// held them free to buy again. `reconcile` said nothing (an activity not
// preheated is skipped), `status` "not preheated", exit 0. The scheduled
// preheat already refuses this when its instance saw the stock loaded
// (outcome lost); the CLI could not tell. With verify.count_url it can:
// the shop holds orders of a sale Redis holds nothing of.
func TestRTBRedisRestartedEmptyMidSale(t *testing.T) {
	srv := redistest.Start(t)
	var orders atomic.Int64
	shop := rtbCountShop(t, &orders)
	verify := fmt.Sprintf("    verify: { url: \"%s/internal/orders?token={token}\", count_url: \"%s/internal/count?sku={sku}\" }\n", shop, shop)
	path := lifeConfig(t, srv.Addr, shop, 10, verify)

	// A late first preheat (nothing sold: the shop holds no order) is
	// still just a preheat.
	want(t, 0, "kact: created", "preheat", "-c", path)
	toks := rtbSell(t, path, 3, 2)
	orders.Store(2)

	srv.Restart(t) // empty: no AOF, no RDB

	// A refund asked for now finds nothing, and says why.
	if code, out, errs := cliRun("release", "-c", path, toks[0], "--reason", "refund"); code != 1 || !strings.Contains(errs, "Redis holds no stock of kact") {
		t.Errorf("release of a reservation of a sale Redis lost: exit %d (want 1, saying Redis holds nothing of the sale)\nstdout %q\nstderr %q", code, out, errs)
	}

	code, out, errs := cliRun("reconcile", "-c", path)
	if code != 1 || !strings.Contains(out+errs, "shop holds 2 unit") {
		t.Errorf("reconcile after Redis lost the running sale: exit %d (want 1, an alert that the shop holds 2 units of a sale Redis holds nothing of)\n%s%s", code, out, errs)
	}
	code, out, errs = cliRun("preheat", "-c", path)
	if code != 1 || !strings.Contains(errs, "shop holds 2 unit") || !strings.Contains(errs, "--force") {
		t.Errorf("plain preheat of a running sale Redis lost, the shop holding 2 orders: exit %d (want 1, refused, saying why and what --force does)\nstdout %q\nstderr %q", code, out, errs)
	}
	if code == 0 {
		return
	}
	// The operator's decision, taken knowingly.
	want(t, 0, "kact: created", "preheat", "-c", path, "--force")
}

// The same loss without verify.count_url: nothing can tell a lost sale
// from a late first preheat, so the preheat runs, but says what it may
// have done.
func TestRTBPreheatInsideTheWindowWarns(t *testing.T) {
	srv := redistest.Start(t)
	path := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 10, "")
	_, errs := want(t, 0, "kact: created", "preheat", "-c", path)
	if !strings.Contains(errs, "window") || !strings.Contains(errs, "count_url") {
		t.Errorf("preheat created the stock of a running sale without a word on stderr: %q", errs)
	}
	// Loaded already: nothing to say.
	if _, errs := want(t, 0, "kact: unchanged", "preheat", "-c", path); strings.Contains(errs, "count_url") {
		t.Errorf("unchanged preheat warned: %q", errs)
	}
}

// An operator raises a running sale's stock in the file (10 → 15) and
// preheats. The refusal said only "activity is running or has sales; use
// --force to overwrite its stock": following it deletes every
// reservation — the confirmed units go on sale again while the shop keeps
// their orders, their buyers may buy again, pending buys at the shop are
// forgotten — and the --force run said "overwritten", nothing more. The
// refusal must say what differs, what the sale holds, and what --force
// would do to it; the forced run what it deleted.
func TestRTBChangedStockMidSaleSaysWhatForceDeletes(t *testing.T) {
	srv := redistest.Start(t)
	path := lifeConfig(t, srv.Addr, "http://127.0.0.1:1", 10, "")
	want(t, 0, "kact: created", "preheat", "-c", path)
	rtbSell(t, path, 3, 2) // 2 confirmed, 1 pending

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), "stock: 10 }", "stock: 15 }", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("preheat", "-c", path)
	for _, w := range []string{"stock 15 in the config, 10 preheated", "1 pending", "2 confirmed", "on sale again"} {
		if code != 1 || !strings.Contains(errs, w) {
			t.Errorf("preheat of a running sale's changed stock: exit %d, stderr lacks %q\nstdout %q\nstderr %q", code, w, out, errs)
		}
	}
	code, out, errs = cliRun("preheat", "-c", path, "--force")
	if code != 0 || !strings.Contains(out+errs, "deleted its reservations of 3 unit") || !strings.Contains(out+errs, "2 confirmed") {
		t.Errorf("preheat --force over 3 reservations (2 confirmed): exit %d, want it to say what it deleted\nstdout %q\nstderr %q", code, out, errs)
	}
	// The stock is the file's now, and adds up.
	want(t, 0, "15", "status", "-c", path)
}

// clusterLifeConfig is lifeConfig (shop unreachable) pointed at cluster cl.
func clusterLifeConfig(t *testing.T, cl *redistest.Cluster, stock int64) string {
	t.Helper()
	path := lifeConfig(t, cl.Nodes[0].Addr, "http://127.0.0.1:1", stock, "")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		addrs[i] = strconv.Quote(n.Addr)
	}
	y := strings.Replace(string(raw), "redis: { addrs: ["+strconv.Quote(cl.Nodes[0].Addr)+"],",
		"redis: { cluster: true, addrs: ["+strings.Join(addrs, ", ")+"],", 1)
	if y == string(raw) {
		t.Fatal("could not point the config at the cluster")
	}
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One master of a cluster restarts without persistence mid-sale (the
// cluster nodes here, like many, run without AOF): the shards it held are
// gone with their units, holdings and reservations, the meta on another
// master still says ready. status says BROKEN ("shard … is missing"), but
// the operator's `preheat` answered "unchanged", exit 0 — "stock is
// already as configured" — over a sale that lost a shard. It must say
// what is missing and leave the decision (--force reloads everything) to
// the operator.
func TestRTBClusterMasterRestartedEmptyPreheatIsNotUnchanged(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	path := clusterLifeConfig(t, cl, 8)
	want(t, 0, "kact: created", "preheat", "-c", path)
	rtbSell(t, path, 3, 2)

	_, st := openStore(t, path)
	meta := st.MetaKey("kact")
	var lost *redistest.Server
	for _, n := range cl.Nodes {
		stock, _ := n.Do("KEYS", "*:stock:*")
		has, _ := n.Do("KEYS", meta)
		if stock != "" && has == "" {
			lost = n
			break
		}
	}
	if lost == nil {
		for _, n := range cl.Nodes {
			all, err := n.Do("KEYS", "*")
			t.Logf("%s: %q %v", n.Addr, all, err)
		}
		t.Fatal("no master holds shards without the meta")
	}
	lost.Restart(t) // empty: no AOF, no RDB; rejoins by its nodes.conf
	deadline := time.Now().Add(15 * time.Second)
	for ok, why := cl.Healthy(); !ok; ok, why = cl.Healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy after the restart: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, errs := cliRun("status", "-c", path); code != 1 || !strings.Contains(out, "missing") {
		t.Fatalf("status after a master restarted empty: exit %d (want 1, a shard missing)\n%s%s", code, out, errs)
	}
	code, out, errs := cliRun("preheat", "-c", path)
	if code == 0 || strings.Contains(out, "unchanged") || !strings.Contains(errs, "missing") || !strings.Contains(errs, "--force") {
		t.Errorf("preheat over a sale that lost a shard: exit %d (want 1, naming what is missing and what --force does)\nstdout %q\nstderr %q", code, out, errs)
	}
}

// A shadow run's shop takes its orders itself: orders counted before a
// late preheat of the shadow copy are no lost sale.
func TestRTBLatePreheatOfAShadowRunIsNotALostSale(t *testing.T) {
	srv := redistest.Start(t)
	var orders atomic.Int64
	orders.Store(4)
	shop := rtbCountShop(t, &orders)
	extra := fmt.Sprintf("    mode: shadow\n    verify: { url: \"%s/internal/orders?token={token}\", count_url: \"%s/internal/count?sku={sku}\" }\n", shop, shop)
	path := lifeConfig(t, srv.Addr, shop, 5, extra)
	want(t, 0, "kact~shadow: created", "preheat", "-c", path)
}
