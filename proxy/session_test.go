package proxy

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

func sessionConfig(t *testing.T, ttl string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte("upstream: {url: \"http://127.0.0.1:1\"}\n"+
		"identity: {user: {session: {cookie: sid, url: \"http://127.0.0.1:1/whoami\", ttl: "+ttl+"}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSessionReloadKeepsCache: a reload with the same session settings
// keeps the resolver (and its cache); changed settings get a new one.
func TestSessionReloadKeepsCache(t *testing.T) {
	s, err := New(sessionConfig(t, "30s"), nil, nil, metrics.New(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	first := s.cur.Load().session
	if first == nil || !strings.HasPrefix(first.challenge, `Cookie realm="shop", cookie-name="sid"`) {
		t.Fatalf("session = %+v", first)
	}
	if err := s.Apply(sessionConfig(t, "30s")); err != nil {
		t.Fatal(err)
	}
	if s.cur.Load().session != first {
		t.Error("same settings: resolver replaced")
	}
	if err := s.Apply(sessionConfig(t, "1m")); err != nil {
		t.Fatal(err)
	}
	if got := s.cur.Load().session; got == first || got.resolver.Config().TTL != time.Minute {
		t.Error("changed settings: resolver kept")
	}
}

func TestReadBuyerSession(t *testing.T) {
	s, err := New(sessionConfig(t, "30s"), nil, nil, metrics.New(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	st := s.cur.Load()
	tests := []struct {
		name, cookie string
		want         admission.Code
	}{
		{"cookie", "a=1; sid=abc123", admission.Admitted},
		{"no cookie", "a=1", admission.Unauthenticated},
		{"empty", "sid=", admission.Unauthenticated},
		{"too long", "sid=" + strings.Repeat("x", maxCredentialLen+1), admission.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := newCtx("POST /buy HTTP/1.1\r\nHost: h\r\nX-User-Id: alice\r\n\r\n")
			ctx.Request.Header.Set("Cookie", tt.cookie)
			var req admission.Request
			var body buyInput
			if got := st.readBuyer(ctx, &body, &req); got != tt.want {
				t.Fatalf("readBuyer = %v, want %v", got, tt.want)
			}
			if tt.want == admission.Admitted && (req.Session != "abc123" || req.Identify == nil || req.User != "") {
				t.Errorf("request = %+v: want the session copied, no user yet (X-User-Id ignored)", req)
			}
		})
	}
}
