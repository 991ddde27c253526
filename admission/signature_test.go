package admission_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func TestSignature(t *testing.T) {
	srv := redistest.Start(t)
	os.Setenv("TEST_APP_KEY", "app-secret")
	cfg := realConfig(t, 1000, 1)
	a := &cfg.Activities[0]
	a.Signature = config.Signature{Keys: map[string]string{"ios": "TEST_APP_KEY", "nokey": "TEST_UNSET_KEY"}, Window: time.Minute}
	in := startInstance(t, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
	preheat(t, in.st, a)
	ctx := bg(t)
	signed := func(user, keyID, nonce string, ts time.Time) *admission.Request {
		r := req(a, user)
		r.Method, r.Path = "POST", "/buy/act/sku1"
		r.SigKeyID, r.SigNonce = keyID, nonce
		r.SigTimestamp = strconv.FormatInt(ts.UnixMilli(), 10)
		r.Signature = admission.Sign([]byte("app-secret"), r.Method, r.Path, r.User, r.SigTimestamp, r.SigNonce)
		return r
	}
	now := time.Now()
	tampered := signed("u3", "ios", "nonce-0003", now)
	tampered.User = "someone-else"
	missing := signed("u4", "ios", "nonce-0004", now)
	missing.Signature = ""
	tests := []struct {
		name string
		r    *admission.Request
		want admission.Code
	}{
		{"good", signed("u1", "ios", "nonce-0001", now), admission.Admitted},
		{"replay", signed("u2", "ios", "nonce-0001", now), admission.Blocked},
		{"tampered user", tampered, admission.Blocked},
		{"missing signature", missing, admission.BadRequest},
		{"short nonce", signed("u5", "ios", "n1", now), admission.BadRequest},
		{"stale", signed("u6", "ios", "nonce-0006", now.Add(-2*time.Minute)), admission.Blocked},
		{"unknown key id", signed("u7", "android", "nonce-0007", now), admission.Blocked},
		{"key id without key", signed("u8", "nokey", "nonce-0008", now), admission.Blocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := in.pipe.Decide(ctx, tt.r); d.Code != tt.want {
				t.Fatalf("got %v, want %v", d.Code, tt.want)
			}
		})
	}
	// A replay reaching another instance is refused by Redis (SET NX).
	other := startInstance(t, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
	if d := other.pipe.Decide(ctx, signed("u9", "ios", "nonce-0001", now)); d.Code != admission.Blocked {
		t.Fatalf("cross-instance replay: %v", d.Code)
	}
}

// TestClusterTraffic runs the traffic-control Redis calls on a 3-master
// cluster: the reserve script with a request id (one hash tag), the fleet
// bucket, the lists and nonces.
func TestClusterTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master cluster")
	}
	cl := redistest.StartCluster(t, 3)
	cfg := realConfig(t, 100, 4)
	a := &cfg.Activities[0]
	in := startInstance(t, redisCfg(cl.Addrs(), true), cfg, time.Now)
	preheat(t, in.st, a)
	ctx := bg(t)
	for i := 0; i < 8; i++ {
		r := req(a, "cu"+strconv.Itoa(i))
		r.RequestID = "r1"
		d := in.pipe.Decide(ctx, r)
		if d.Code != admission.Admitted {
			t.Fatalf("user %d: %v", i, d.Code)
		}
		if d2 := in.pipe.Decide(ctx, r); d2.Code != admission.Pending || d2.Token != d.Token {
			t.Fatalf("repeat %d: %v", i, d2.Code)
		}
	}
	got, _, err := in.st.LeaseAdmission(ctx, "other", 100, 10, 50)
	if err != nil || got != 10 {
		t.Fatalf("lease on cluster = %d, %v; want the burst 10", got, err)
	}
	if err := in.st.BlockAdd(ctx, store.BlockUser, []string{"cbad"}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "blocked on cluster", func() bool { return in.pipe.Decide(ctx, req(a, "cbad")).Code == admission.Blocked })
	if ok, err := in.st.ClaimNonce(ctx, "k", "nonce-123", time.Minute); !ok || err != nil {
		t.Fatalf("nonce: %v %v", ok, err)
	}
}
