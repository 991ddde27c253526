package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestAdminStatusPlacement (issue 11 §3): on a cluster, /admin/status
// shows each activity's shards per master (none before preheat).
func TestAdminStatusPlacement(t *testing.T) {
	rd := e2e.StartCluster(t)
	cfg := e2e.Options{Redis: rd.Addrs, Cluster: true, ShopURL: "http://127.0.0.1:1",
		Activities: []e2e.Activity{{ID: "placed", Stock: 8, Shards: 8}}}.Config(t)
	log := zap.NewNop()
	st, err := store.Open(cfg.Redis, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m := metrics.New()
	adm := admin.New(m, st, token, log)
	admin.MountAll(adm, st, reservation.NewReconciler(st, m, log), m, func() *config.Config { return cfg })
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	call := func(method, path string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var doc struct {
		Activities []store.ActivityStatus `json:"activities"`
	}
	if code, body := call("GET", "/admin/status"); code != 200 || json.Unmarshal(body, &doc) != nil ||
		doc.Activities[0].Placement != nil || doc.Activities[0].PlacementError != "" {
		t.Fatalf("status before preheat: %d %s", code, body)
	}
	if code, body := call("POST", "/admin/preheat?activity=placed"); code != 200 {
		t.Fatalf("preheat: %d %s", code, body)
	}
	code, body := call("GET", "/admin/status")
	if code != 200 || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("status: %d %s", code, body)
	}
	p := doc.Activities[0].Placement
	if p == nil || !p.Placed || !p.Even || p.Shards != 8 || len(p.PerMaster) != 3 || p.Spread() != "3/3/2" {
		t.Fatalf("status placement: %s", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if per, even, err := st.PlacementCheck(ctx, "placed"); err != nil || !even || len(per) != 3 {
		t.Fatalf("PlacementCheck = %v, %v, %v", per, even, err)
	}
}
