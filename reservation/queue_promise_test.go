package reservation_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// startWorkers runs one instance's queue workers for cfg until the test ends.
func startWorkers(t *testing.T, st *store.Store, cfg *config.Config) *reservation.Queue {
	t.Helper()
	q := reservation.NewQueue(st, metrics.New(), zap.NewNop(), reservation.QueueOptions{Consumer: "w-" + t.Name()})
	q.Start(cfg)
	t.Cleanup(q.Stop)
	return q
}

// publicReservation is GET /_seckill/reservations/{token}.
type publicReservation struct {
	State    string `json:"state"`
	Queued   bool   `json:"queued"`
	Reason   string `json:"reason"`
	Position *int64 `json:"position"`
	EtaMs    *int64 `json:"eta_ms"`
}

func lookupPublic(t *testing.T, addr, tok string) publicReservation {
	t.Helper()
	resp, err := client.Get("http://" + addr + "/_seckill/reservations/" + tok)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r publicReservation
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The measured case of issue 8 §3: queue mode, 120 QUEUED buyers, a shop
// slower than admission (queue.rate), pending_timeout 1s and a repairing
// reconcile half-way through the drain. Reservations not yet sent were
// taken for stale and released (the shop had never heard of them, verify
// said 404): 24 of 120 buyers got an order. A queued reservation's pending
// age counts from its send, so every buyer ends with an order.
func TestQueueReconcileNeverReleasesUnsent(t *testing.T) {
	const n = 120
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, n, 4, 40)
	a := &cfg.Activities[0]
	a.PendingTimeout = time.Second
	addr, st := startProxy(t, cfg)

	codes, tokens := spike(addr, n, "q-")
	if codes["QUEUED"] != n {
		t.Fatalf("answers: %v", codes)
	}
	startWorkers(t, st, cfg)
	time.Sleep(1500 * time.Millisecond) // past pending_timeout, mid-drain
	rec, _ := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Activities[0].Stale {
		if f.Action == "released" {
			t.Errorf("reconciler released %s (%s): a queued buyer lost their order", f.Token, f.Verdict)
		}
	}
	eventually(t, 20*time.Second, "every queued buyer confirmed", func() bool {
		return status(t, st, a).Confirmed == n
	})
	s := status(t, st, a)
	if !s.OK || s.Confirmed != n || s.Released != 0 || s.Pending != 0 {
		t.Fatalf("status: %+v", s)
	}
	if got := sh.orderCount(); got != n {
		t.Fatalf("shop holds %d orders, want %d", got, n)
	}
	for _, tok := range tokens {
		if st := reservationState(addr, tok); st != store.StateConfirmed {
			t.Fatalf("%s: state %q", tok, st)
		}
	}
}

// Queue admission is bounded by the backlog, never by trimming the stream:
// with queue.max_backlog N, the N+1th buyer is 503 BUSY with Retry-After,
// the stream keeps all N, and once the workers drain it buyers are queued
// again.
func TestQueueBacklogBound(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 20, 2, 50)
	a := &cfg.Activities[0]
	a.Shards = 1
	a.Queue.MaxBacklog = 5
	addr, st := startProxy(t, cfg)

	var tokens []string
	for i := 0; i < 5; i++ {
		got := buy(addr, "b-"+strconv.Itoa(i))
		if got.Code != "QUEUED" {
			t.Fatalf("buyer %d: %+v", i, got)
		}
		tokens = append(tokens, got.Token)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/seckill/qact/sku1/buy", strings.NewReader("{}"))
	req.Header.Set("X-User-Id", "b-5")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var busy struct {
		Code         string `json:"code"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}
	_ = json.Unmarshal(body, &busy)
	if resp.StatusCode != 503 || busy.Code != "BUSY" || resp.Header.Get("Retry-After") == "" || busy.RetryAfterMs < 100 {
		t.Fatalf("buyer over the backlog: %d %s (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if n, err := st.QueueLength(tctx(t), a.ID, "sku1", 1); err != nil || n != 5 {
		t.Fatalf("stream holds %d (%v), want all 5 queued entries", n, err)
	}
	if s := status(t, st, a); s.Pending != 5 || s.Remaining != 15 {
		t.Fatalf("BUSY held stock: %+v", s)
	}

	startWorkers(t, st, cfg)
	eventually(t, 10*time.Second, "backlog drained", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, "sku1", 1)
		return err == nil && n == 0
	})
	got := buy(addr, "b-5")
	if got.Code != "QUEUED" {
		t.Fatalf("after the drain: %+v", got)
	}
	tokens = append(tokens, got.Token)
	eventually(t, 10*time.Second, "all 6 confirmed", allConfirmed(addr, tokens))
}

// A queued reservation released by an operator before its turn is never
// sent; the proxy's own pending-only release (the shop said no, verify
// said absent) refuses a reservation that was not sent yet.
func TestQueueReleasedBeforeSendNeverSent(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 3, 2, 50)
	a := &cfg.Activities[0]
	a.Shards = 1
	addr, st := startProxy(t, cfg)
	var tokens []store.Token
	for i := 0; i < 3; i++ {
		got := buy(addr, "r-"+strconv.Itoa(i))
		tok, err := store.ParseToken(got.Token)
		if got.Code != "QUEUED" || err != nil {
			t.Fatalf("buyer %d: %+v", i, got)
		}
		tokens = append(tokens, tok)
	}
	if code, err := st.Release(tctx(t), tokens[1], 1, "verify_absent", time.Now().UnixMilli(), true); err != nil || code != lua.NotSent {
		t.Fatalf("pending-only release of a queued reservation = %v, %v; want NOT_SENT", code, err)
	}
	if code, err := st.Release(tctx(t), tokens[1], 1, "cancelled", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("operator release = %v, %v", code, err)
	}
	startWorkers(t, st, cfg)
	eventually(t, 10*time.Second, "the other two confirmed", func() bool {
		return reservationState(addr, tokens[0].String()) == store.StateConfirmed &&
			reservationState(addr, tokens[2].String()) == store.StateConfirmed
	})
	eventually(t, 5*time.Second, "stream drained", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, "sku1", 1)
		return err == nil && n == 0
	})
	if _, ok := sh.order(tokens[1].String()); ok {
		t.Fatal("the shop got a reservation released before its turn")
	}
	sh.mu.Lock()
	requests := sh.requests
	sh.mu.Unlock()
	if requests != 2 {
		t.Fatalf("shop got %d requests, want 2", requests)
	}
	r := lookupPublic(t, addr, tokens[1].String())
	if r.State != store.StateReleased || r.Reason != "cancelled" {
		t.Fatalf("released reservation shows %+v", r)
	}
	if s := status(t, st, a); !s.OK || s.Confirmed != 2 || s.Remaining != 1 || s.Released != 1 {
		t.Fatalf("status: %+v", s)
	}
}

// While queued, /_seckill/reservations/{token} says so, with how many
// entries are ahead and when the turn comes at queue.rate.
func TestQueuePositionShown(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 4)
	a := &cfg.Activities[0]
	a.Shards = 1
	addr, st := startProxy(t, cfg)
	var tokens []string
	for i := 0; i < 5; i++ {
		got := buy(addr, "p-"+strconv.Itoa(i))
		if got.Code != "QUEUED" {
			t.Fatalf("buyer %d: %+v", i, got)
		}
		tokens = append(tokens, got.Token)
	}
	for i, tok := range tokens {
		r := lookupPublic(t, addr, tok)
		if r.State != store.StatePending || !r.Queued || r.Position == nil || *r.Position != int64(i) || r.EtaMs == nil || *r.EtaMs != int64(i)*250 {
			t.Fatalf("token %d: %+v (position %v, eta %v)", i, r, deref(r.Position), deref(r.EtaMs))
		}
	}
	startWorkers(t, st, cfg)
	eventually(t, 10*time.Second, "all confirmed", func() bool {
		return reservationState(addr, tokens[4]) == store.StateConfirmed
	})
	if r := lookupPublic(t, addr, tokens[4]); r.Position != nil || r.EtaMs != nil {
		t.Fatalf("a confirmed reservation shows a position: %+v", r)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// Issue 8 §7: the stale-pending scan read the first 1,000 entries of a
// shard's pending index, then filtered by SKU: 1,200 old entries the shop
// cannot settle (verify answers 500) starved the settleable one behind
// them. The scan pages through all.
func TestStalePendingPagesPastUnsettleable(t *testing.T) {
	a := newActivity("page", 0, 1)
	a.SKUs = []config.SKU{{ID: "skuA", Stock: 1200}, {ID: "skuB", Stock: 1}}
	// The shop holds b's order (and knows of no other token: a 200 for a
	// token never issued would make verify untrusted, TestRV15...).
	var bTok atomic.Value
	bTok.Store("")
	verify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("token")
		if strings.Contains(tok, ".skuA.") {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		if tok != bTok.Load().(string) {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"order_id":"O-B"}`))
	}))
	t.Cleanup(verify.Close)
	a.Verify.URL = verify.URL + "/?token={token}"
	st, _ := setup(t, a)
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i := 0; i < 1200; i++ {
		r, err := st.Reserve(tctx(t), store.ReserveRequest{Activity: a.ID, SKU: "skuA", User: "a" + strconv.Itoa(i), Qty: 1,
			Limit: 1, Shards: 1, NowMs: old, ExpireAt: store.ExpireAt(a)})
		if err != nil || r.Code != lua.OK {
			t.Fatalf("reserve: %v %v", r.Code, err)
		}
	}
	b, err := st.Reserve(tctx(t), store.ReserveRequest{Activity: a.ID, SKU: "skuB", User: "b", Qty: 1,
		Limit: 1, Shards: 1, NowMs: old + 1, ExpireAt: store.ExpireAt(a)})
	if err != nil || b.Code != lua.OK {
		t.Fatalf("reserve: %v %v", b.Code, err)
	}
	bTok.Store(b.Token.String())
	rec, _ := newReconciler(st)
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, ok, err := st.Lookup(tctx(t), b.Token, 1)
	if err != nil || !ok || r.State != store.StateConfirmed || r.OrderID != "O-B" {
		t.Fatalf("the settleable reservation behind 1,200 unsettleable ones: %+v %v %v", r, ok, err)
	}
	left := 0
	for _, f := range rep.Activities[0].Stale {
		if f.Action == "left" {
			left++
		}
	}
	if left != 1200 {
		t.Fatalf("%d unsettleable reservations reported, want 1200", left)
	}
}

// A queued reservation no worker takes (every instance's workers down) is
// never answered: the reconciler never settles it (it was not sent), so it
// alerts once the oldest one has waited beyond pending_timeout plus what
// a full backlog takes to drain at queue.rate.
func TestReconcileAlertsOnQueueNobodySends(t *testing.T) {
	srv := redistest.Start(t)
	sh := newShop(t)
	cfg := proxyConfig(t, []string{srv.Addr}, sh.srv.URL, config.ModeQueue, 10, 2, 50)
	a := &cfg.Activities[0]
	a.Shards = 2
	a.Queue.MaxBacklog = 100
	addr, st := startProxy(t, cfg)
	for i := 0; i < 3; i++ {
		if got := buy(addr, "stuck-"+strconv.Itoa(i)); got.Code != "QUEUED" {
			t.Fatalf("buyer %d: %+v", i, got)
		}
	}
	rec := reservation.NewReconciler(st, metrics.New(), zap.NewNop())
	rep, err := rec.Run(tctx(t), []*config.Activity{a}, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Alerting() {
		t.Fatalf("alerts while the queue is young: %+v", rep)
	}
	later := time.Now().Add(a.PendingTimeout + 2*time.Second + time.Minute) // 100 / 50/s = 2 s to drain
	rep, err = rec.Run(tctx(t), []*config.Activity{a}, false, later)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Alerting() || !strings.Contains(strings.Join(rep.Activities[0].Alerts, "\n"), "queued") {
		t.Fatalf("no alert for a queue nobody sends: %+v", rep.Activities[0])
	}
	// Once the workers run, the queue drains and nothing alerts.
	startWorkers(t, st, cfg)
	eventually(t, 10*time.Second, "stream drained", func() bool {
		n, err := st.QueueLength(tctx(t), a.ID, "sku1", a.Shards)
		return err == nil && n == 0
	})
	rep, err = rec.Run(tctx(t), []*config.Activity{a}, false, later)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Alerting() {
		t.Fatalf("alerts after the drain: %+v", rep.Activities[0].Alerts)
	}
}
