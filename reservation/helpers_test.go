package reservation_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
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

const testSKU = "sku1"

func newActivity(id string, stock int64, shards int) *config.Activity {
	now := time.Now()
	return &config.Activity{
		ID: id, Start: now.Add(-time.Minute), End: now.Add(time.Hour),
		SKUs: []config.SKU{{ID: testSKU, Stock: stock}}, Shards: shards, PerUserLimit: 1, MaxQty: 1,
		KeyTTLAfterEnd: time.Hour, PendingTimeout: time.Second, Mode: config.ModeSync,
		Route:       config.Route{Method: "POST", Path: "/api/seckill/{activity}/{sku}/buy", SkuFrom: "path"},
		OrderIDFrom: "json:/order_id", Queue: config.Queue{Workers: 4, Rate: 1000},
	}
}

func openStore(t testing.TB, addrs ...string) *store.Store {
	t.Helper()
	s, err := store.OpenNow(config.Redis{Addrs: addrs, Cluster: len(addrs) > 1, Timeout: time.Second, ClientCache: true, KeyPrefix: "seckill"}, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func setup(t testing.TB, a *config.Activity) (*store.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	st := openStore(t, srv.Addr)
	if _, err := st.Preheat(tctx(t), a, false, time.Now()); err != nil {
		t.Fatalf("preheat: %v", err)
	}
	return st, srv
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func reserve(t testing.TB, st *store.Store, a *config.Activity, user string, nowMs int64, queue bool) store.Token {
	t.Helper()
	r, err := st.Reserve(tctx(t), store.ReserveRequest{Activity: a.ID, SKU: a.SKUs[0].ID, User: user, Qty: 1,
		Limit: a.PerUserLimit, Shards: a.Shards, Queue: queue, NowMs: nowMs, ExpireAt: store.ExpireAt(a)})
	if err != nil || r.Code != lua.OK {
		t.Fatalf("reserve %s: %v %v", user, r.Code, err)
	}
	return r.Token
}

func status(t testing.TB, st *store.Store, a *config.Activity) store.SKUStatus {
	t.Helper()
	s, err := st.Status(tctx(t), a)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return s.SKUs[0]
}

func newReconciler(st *store.Store) (*reservation.Reconciler, *metrics.Metrics) {
	m := metrics.New()
	return reservation.NewReconciler(st, m, zap.NewNop()), m
}

// shop is a recording test shop: it takes tokened orders (idempotent by
// token), answers verify by token and counts units per SKU. fail and slow
// pick users it refuses (500) or answers late (after creating the order).
type shop struct {
	mu       sync.Mutex
	orders   map[string]string // token -> order id
	users    map[string]int
	times    []time.Time // one per new order
	requests int
	fail     func(user string) bool
	slow     func(user string) time.Duration
	srv      *httptest.Server
}

func newShop(t testing.TB) *shop {
	s := &shop{orders: map[string]string{}, users: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/orders", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		id, ok := s.orders[r.URL.Query().Get("token")]
		s.mu.Unlock()
		if !ok {
			http.Error(w, `{"code":"NOT_FOUND"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
	})
	mux.HandleFunc("GET /internal/count", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		n := len(s.orders)
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]int{"count": n})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		tok, user := r.Header.Get("X-Seckill-Token"), r.Header.Get("X-Seckill-User")
		s.mu.Lock()
		s.requests++
		fail := s.fail != nil && s.fail(user)
		var slow time.Duration
		if s.slow != nil {
			slow = s.slow(user)
		}
		s.mu.Unlock()
		if tok == "" {
			http.Error(w, "no token", http.StatusBadRequest)
			return
		}
		if fail {
			http.Error(w, `{"code":"INTERNAL"}`, http.StatusInternalServerError)
			return
		}
		s.mu.Lock()
		id, ok := s.orders[tok]
		if !ok {
			id = "O-" + strconv.Itoa(len(s.orders)+1)
			s.orders[tok] = id
			s.users[user]++
			s.times = append(s.times, time.Now())
		}
		s.mu.Unlock()
		time.Sleep(slow)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) orderCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

func (s *shop) order(tok string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.orders[tok]
	return id, ok
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
