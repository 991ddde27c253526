package store

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// sentinelRefresh is how often the client asks the sentinels for the
// master besides listening for +switch-master: a missed event would
// otherwise bind it to a demoted master until restart (see rueidis'
// SentinelOption.TopologyRefreshInterval).
const sentinelRefresh = 2 * time.Second

// sentinelOption is redis.sentinel for rueidis: the sentinels are dialled
// like the nodes (same timeouts, same TLS), with no AUTH of their own.
func sentinelOption(cfg config.Redis, tlsConf *tls.Config) rueidis.SentinelOption {
	return rueidis.SentinelOption{
		MasterSet:               cfg.Sentinel.MasterSet,
		Dialer:                  netDialer(cfg.Timeout),
		TLSConfig:               tlsConf,
		ClientName:              "seckill-proxy",
		TopologyRefreshInterval: sentinelRefresh,
	}
}

// Where names the Redis a config reaches, for messages: its addresses, or
// the master set and its sentinels.
func Where(cfg config.Redis) string {
	if cfg.Sentinel.Enabled() {
		return "master " + cfg.Sentinel.MasterSet + " via sentinels " + strings.Join(cfg.Sentinel.Addrs, ",")
	}
	return strings.Join(cfg.Addrs, ",")
}

// explainDial adds what the operator can do to a dial error whose own text
// does not say it: with TLS 1.3 a server refuses a client certificate (or
// its absence) after the client's handshake is done, and the client may
// see only the reset, not the server's alert.
func explainDial(cfg config.Redis, err error) error {
	closed := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
	if !cfg.TLS.Enabled || !closed {
		return err
	}
	if cfg.TLS.CertFile == "" {
		return fmt.Errorf("%w (the server closed the TLS connection; if it requires client certificates, tls-auth-clients, set redis.tls.cert_file and key_file)", err)
	}
	return fmt.Errorf("%w (the server closed the TLS connection; if it checks client certificates, its tls-ca-cert-file must hold the CA that signed redis.tls.cert_file)", err)
}
