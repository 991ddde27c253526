package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

type checkerFunc func(context.Context) error

func (f checkerFunc) Ping(ctx context.Context) error { return f(ctx) }

// A readiness error that is not Redis's (the clock guard's) is shown as it
// is: the operator is sent to the clock, not to Redis.
func TestReadyzShowsUnreadyAsIs(t *testing.T) {
	s := admin.New(metrics.New(), checkerFunc(func(context.Context) error {
		return admin.Unready("clock: this host's clock is 4s behind Redis 127.0.0.1:6379")
	}), "tok", zap.NewNop())
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if body := w.Body.String(); w.Code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "clock: this host's clock is 4s behind") {
		t.Errorf("/readyz = %d %q", w.Code, body)
	}
}
