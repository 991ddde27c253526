package store

import (
	"crypto/tls"
	"strings"
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
