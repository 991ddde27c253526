package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// ra12Shop is a shop that works on every buy for latency whatever the
// proxy does meanwhile (a legacy shop in a DB transaction does not notice
// that its client went away), creates the order and answers 200. It counts
// the buys it works on at once. /internal/orders is the verify endpoint,
// whose behaviour verify() may replace.
type ra12Shop struct {
	URL     string
	latency atomic.Int64 // ns
	// discard: the buy is worked on but no order is created (the shop
	// rolled it back after its client went away).
	discard atomic.Bool
	// redirect: every buy is answered 302 to /login, no order (a legacy
	// shop whose buyer's session expired).
	redirect atomic.Bool

	cur, peak, received atomic.Int64

	mu     sync.Mutex
	orders map[string]string // token -> order id
	users  map[string]int    // user -> orders
	verify func(w http.ResponseWriter, r *http.Request, id string, ok bool) bool
}

func ra12StartShop(t testing.TB, latency time.Duration) *ra12Shop {
	t.Helper()
	s := &ra12Shop{orders: map[string]string{}, users: map[string]int{}}
	s.latency.Store(int64(latency))
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *ra12Shop) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/internal/orders" {
		s.mu.Lock()
		id, ok := s.orders[r.URL.Query().Get("token")]
		v := s.verify
		s.mu.Unlock()
		if v != nil && v(w, r, id, ok) {
			return
		}
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
		return
	}
	if r.URL.Path == "/gone" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if r.URL.Path == "/login" {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>please log in</html>"))
		return
	}
	tok := r.Header.Get("X-Seckill-Token")
	if tok == "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	s.received.Add(1)
	if s.redirect.Load() {
		http.Redirect(w, r, "/login", http.StatusFound)
		return
	}
	discard := s.discard.Load()
	c := s.cur.Add(1)
	for p := s.peak.Load(); c > p && !s.peak.CompareAndSwap(p, c); p = s.peak.Load() {
	}
	time.Sleep(time.Duration(s.latency.Load()))
	if discard {
		s.cur.Add(-1)
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	s.mu.Lock()
	id, ok := s.orders[tok]
	if !ok {
		id = "ord-" + strconv.Itoa(len(s.orders)+1)
		s.orders[tok] = id
		s.users[r.Header.Get("X-Seckill-User")]++
	}
	s.mu.Unlock()
	s.cur.Add(-1)
	w.Header().Set("X-Shop", "order")
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}

func (s *ra12Shop) counts() (orders int, maxPerUser int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.users {
		maxPerUser = max(maxPerUser, n)
	}
	return len(s.orders), maxPerUser
}

// orderMap is a copy of the shop's orders, token -> order id.
func (s *ra12Shop) orderMap() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.orders))
	for k, v := range s.orders {
		out[k] = v
	}
	return out
}

func (s *ra12Shop) setVerify(v func(w http.ResponseWriter, r *http.Request, id string, ok bool) bool) {
	s.mu.Lock()
	s.verify = v
	s.mu.Unlock()
}

// ra12Reconcile runs one reconcile --repair pass as if at.
func ra12Reconcile(t testing.TB, p *Proxy, act string, at time.Time) reservation.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := reservation.NewReconciler(p.Store, metrics.New(), zap.NewNop()).
		Run(ctx, []*config.Activity{p.Activity(t, act)}, true, at)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

// ra12Buy buys the default SKU of act for user with a request id.
func ra12Buy(addr, act, user, rid string, timeout time.Duration) Resp {
	h := [][2]string{{"X-User-Id", user}}
	if rid != "" {
		h = append(h, [2]string{"X-Request-Id", rid})
	}
	return Do(nil, addr, Req{URI: "/api/seckill/" + act + "/" + SKU + "/buy", Header: h, Timeout: timeout})
}

// ra12SpecCode reports whether r is a win or a SPEC code with its HTTP status.
func ra12SpecCode(r Resp) bool {
	want := map[string]int{"QUEUED": 202, "PENDING": 202, "ALREADY_PURCHASED": 409, "SOLD_OUT": 410,
		"NOT_READY": 503, "PAUSED": 503, "BUSY": 503, "RATE_LIMITED": 429, "STORE_UNAVAILABLE": 503,
		"UPSTREAM_FAILED": 502, "UPSTREAM_TIMEOUT": 504}
	if r.Err != nil {
		return false
	}
	if r.Code == "WIN" || ra12Replay(r) {
		return true
	}
	st, ok := want[r.Code]
	return ok && st == r.Status
}

// ra12Replay reports whether r is a replay of a winner's answer: the
// shop's 2xx body with the same X-Seckill-Token (the replay keeps the
// shop's status and body, not its other headers).
func ra12Replay(r Resp) bool {
	return r.Err == nil && r.Code == "" && r.Status/100 == 2 && r.Header["X-Seckill-Token"] != ""
}

// waitSettled waits for every proxy's confirms running after their answers
// (at most 10 s), then for their retriers to drain (within drain).
func waitSettled(t *testing.T, drain time.Duration, ps ...*Proxy) {
	t.Helper()
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.Server.WaitConfirms(ctx)
		cancel()
		if err != nil {
			t.Fatalf("confirms: %v", err)
		}
	}
	Eventually(t, drain, "retriers drained", func() bool {
		for _, p := range ps {
			if p.Store.Retrier().Len() != 0 {
				return false
			}
		}
		return true
	})
}

// afterRepair runs one reconcile --repair as if past pending_timeout
// and checks: nothing pending or queued, nothing in transit, stock adds
// up, every shop order a confirmed reservation, confirmed == orders ==
// records, nobody above the limit at the shop. It returns the shop's orders.
func afterRepair(t *testing.T, node *redistest.Server, pa *Proxy, act string, stock, limit int64, orders map[string]string, shop interface{ counts() (int, int) }) (shopOrders int) {
	t.Helper()
	a := pa.Activity(t, act)
	ra12Reconcile(t, pa, act, time.Now().Add(a.PendingTimeout+time.Minute))
	states := rtAudit(t, node.Addr, act, stock, limit)
	confirmed := settledStates(t, states, orders)
	n, perUser := shop.counts()
	k := pa.SKUStatus(t, act)
	t.Logf("after reconcile %+v; shop orders %d (max per user %d), confirmed records %d", k, n, perUser, confirmed)
	if !k.OK || k.Pending != 0 || k.Remaining+k.Confirmed != stock || k.InTransit != 0 || k.Confirmed != int64(n) || int64(confirmed) != k.Confirmed {
		t.Errorf("after reconcile: %+v, shop orders %d, confirmed records %d", k, n, confirmed)
	}
	if int64(perUser) > limit || int64(n) > stock {
		t.Errorf("shop: %d orders, %d of one user (limit %d)", n, perUser, limit)
	}
	return n
}

// settledStates checks reservation states after a repairing reconcile:
// nothing pending or queued, every shop order's reservation confirmed. It
// returns how many are confirmed.
func settledStates(t *testing.T, states map[string]string, orders map[string]string) (confirmed int) {
	t.Helper()
	for field, st := range states {
		switch st {
		case "c":
			confirmed++
		case "p", "q":
			t.Errorf("%s still %s after the reconcile", field, st)
		}
	}
	for tok := range orders {
		tk, err := store.ParseToken(tok)
		if err != nil {
			t.Fatalf("order token %q: %v", tok, err)
		}
		if st := states[tk.Field()]; st != "c" {
			t.Errorf("shop order %s for a reservation in state %q", tok, st)
		}
	}
	return confirmed
}
