// Package admin is the admin listener: Prometheus metrics, health and
// readiness, pprof, the live dashboard, and the token-protected admin API.
package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// ErrDraining is the readiness error of an instance that is stopping
// gracefully (SIGTERM): /readyz answers 503 with it.
var ErrDraining = errors.New("draining: shutting down, not taking buys")

// Unready is a readiness error that is not Redis's: /readyz shows it as
// it is (e.g. "clock: this host's clock is 4s behind Redis ...").
type Unready string

func (u Unready) Error() string { return string(u) }

// Checker reports whether the process is ready to take buys.
type Checker interface {
	Ping(ctx context.Context) error
}

// Server is the admin HTTP server.
type Server struct {
	mux   *http.ServeMux
	token string
	log   *zap.Logger
}

// New builds the admin server. token guards every /admin/ call; an empty
// token disables them (they answer 403) rather than leaving them open.
func New(m *metrics.Metrics, ready Checker, token string, log *zap.Logger) *Server {
	s := &Server{mux: http.NewServeMux(), token: token, log: log}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := ready.Ping(ctx); err != nil {
			msg := "redis: " + err.Error()
			var u Unready
			if errors.Is(err, ErrDraining) || errors.As(err, &u) {
				msg = err.Error()
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	registerPprof(s.mux)
	return s
}

// HandleAdmin registers a mutating admin call under /admin/, behind the
// bearer token.
func (s *Server) HandleAdmin(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, s.authorized(h))
}

// Handle registers a read-only page (dashboard and its data).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.token == "" {
			writeErr(w, http.StatusForbidden, "admin API disabled: no admin token configured")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeErr(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h(w, r)
	}
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// MountAll registers every admin page and call on s: the admin API, the
// dashboard and the traffic-control API, all reading the current config
// through cfg (it changes on reload).
func MountAll(s *Server, st *store.Store, rec *reservation.Reconciler, m *metrics.Metrics, cfg func() *config.Config) {
	(&API{Store: st, Reconciler: rec, Config: cfg}).Register(s)
	(&Dashboard{Store: st, Metrics: m, Config: cfg}).Register(s)
	(&TrafficAPI{Store: st, Config: cfg}).Register(s)
}
