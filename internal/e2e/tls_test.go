package e2e_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRedisTLS: a redis-server that listens only on a TLS port and
// requires client certificates, with a CA made at test time. The proxy
// configured with redis.tls (ca_file, cert_file, key_file, server_name)
// sells exactly the stock through it; the same config with another CA, a
// server_name the certificate does not carry, or no client certificate
// is refused with a message that says why.
func TestRedisTLS(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	srv := redistest.StartTLS(t, f, true)
	if out, err := srv.Do("PING"); err != nil || out != "PONG" {
		t.Fatalf("PING over TLS: %q %v", out, err)
	}
	if _, err := redistest.Do(srv.Addr, "PING"); err == nil {
		t.Fatalf("%s answered plain TCP: the test would not show that TLS is used", srv.Addr)
	}

	shop := e2e.StartShop(t)
	tlsFlow := "{ ca_file: %q, cert_file: %q, key_file: %q, server_name: %q }"
	opts := e2e.Options{Redis: []string{srv.Addr}, ShopURL: shop.URL,
		RedisTLS:   fmt.Sprintf(tlsFlow, f.CA, f.ClientCert, f.ClientKey, f.ServerName),
		Activities: []e2e.Activity{{ID: "tl", Stock: 21, Shards: 1}}}
	p := e2e.StartProxy(t, opts.Config(t))
	p.Preheat(t, "tl")
	// The proxy learns of the preheat through an invalidation (NOT_READY
	// until then): one buyer retries as Retry-After tells them.
	e2e.Eventually(t, 5*time.Second, "a first win over TLS", func() bool {
		r := e2e.Buy(p.Addr, "tl", "first")
		if r.Code != "WIN" && r.Code != "NOT_READY" {
			t.Fatalf("first buy over TLS: %d %s %v", r.Status, r.Code, r.Err)
		}
		return r.Code == "WIN"
	})
	res := e2e.Spike{Addrs: []string{p.Addr}, Activity: "tl", Users: 100, Tries: 1, Conc: 16}.Fire(t)
	if res.ByCode["WIN"] != 20 || len(res.Odd) > 0 {
		t.Fatalf("spike over TLS: %v, odd %v", res.ByCode, res.Odd)
	}
	p.WantStock(t, "tl", 0, 0, 21)

	other := redistest.NewTLSFiles(t) // a CA the server's certificate is not from
	refusals := []struct {
		name, tls, want string
	}{
		{"wrong CA", fmt.Sprintf(tlsFlow, other.CA, f.ClientCert, f.ClientKey, f.ServerName), "certificate signed by unknown authority"},
		{"wrong server_name", fmt.Sprintf(tlsFlow, f.CA, f.ClientCert, f.ClientKey, "wrong.example"), "not wrong.example"},
		// TLS 1.3: the server's alert may arrive after the client's first
		// write; then the reset is all the client sees, and the message
		// says what to check.
		{"no client certificate", fmt.Sprintf("{ ca_file: %q }", f.CA), "certificate required|set redis.tls.cert_file and key_file"},
		{"client certificate of another CA", fmt.Sprintf(tlsFlow, f.CA, other.ClientCert, other.ClientKey, f.ServerName), "unknown certificate authority|must hold the CA that signed redis.tls.cert_file"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			o := opts
			o.RedisTLS = r.tls
			cfg := o.Config(t)
			st, err := store.OpenNow(cfg.Redis, zap.NewNop())
			if err == nil {
				st.Close()
				t.Fatal("connected")
			}
			said := false
			for _, w := range strings.Split(r.want, "|") {
				said = said || strings.Contains(err.Error(), w)
			}
			if !errors.Is(err, store.ErrUnavailable) || !said || !strings.Contains(err.Error(), srv.Addr) {
				t.Errorf("error = %q, want one naming %s and containing %q", err, srv.Addr, r.want)
			}
			t.Logf("%s: %v", r.name, err)
		})
	}
	// Plain TCP against the TLS port: refused, not hung.
	plain := e2e.Options{Redis: []string{srv.Addr}, ShopURL: shop.URL, Activities: opts.Activities}
	if st, err := store.OpenNow(plain.Config(t).Redis, zap.NewNop()); err == nil {
		st.Close()
		t.Error("plain TCP connected to a TLS-only port")
	}
}
