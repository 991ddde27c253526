package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// hints says, after a command failed, what in this host's setup explains
// it when Redis's own words do not: a password variable that is empty here,
// or a Redis Cluster node configured as a single Redis (every command then
// fails with a bare "MOVED 14898 10.0.0.2:6379"). Nothing is looked at
// unless the command failed after loading a valid config.
func (c *cli) hints() []string {
	cfg := c.cfg
	if cfg == nil || c.name == "preflight" { // preflight reports both itself
		return nil
	}
	var out []string
	if env := cfg.Redis.PasswordEnv; env != "" && os.Getenv(env) == "" {
		state := "empty"
		if _, set := os.LookupEnv(env); !set {
			state = "not set"
		}
		out = append(out, fmt.Sprintf("hint: redis.password_env names $%s, which is %s in this environment: the commands connect to Redis without a password; export it where the command runs", env, state))
	}
	if !cfg.Redis.Cluster && !cfg.Redis.Sentinel.Enabled() && len(cfg.Redis.Addrs) == 1 && clusterNode(cfg) {
		out = append(out, fmt.Sprintf("hint: %s is a Redis Cluster node, but %s configures a single Redis: set redis.cluster: true (and list a few masters in redis.addrs); preflight's redis-mode check says the same",
			cfg.Redis.Addrs[0], cfg.Path))
	}
	return out
}

// clusterNode reports whether the one configured Redis says it is part of a
// Redis Cluster (INFO cluster: cluster_enabled:1), as preflight's redis-mode
// check reads it. Any failure to ask is "no": this only adds a hint.
func clusterNode(cfg *config.Config) bool {
	timeout := min(max(cfg.Redis.Timeout, 500*time.Millisecond), 2*time.Second)
	tlsConf, err := cfg.Redis.TLS.Config()
	if err != nil {
		return false
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{
		TLSConfig:         tlsConf,
		InitAddress:       cfg.Redis.Addrs,
		Username:          cfg.Redis.Username,
		Password:          cfg.RedisPassword(),
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		ClientName:        "seckill-proxy-hint",
		Dialer:            net.Dialer{Timeout: timeout},
		ConnWriteTimeout:  timeout,
	})
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	info, err := cl.Do(ctx, cl.B().Info().Section("cluster").Build()).ToString()
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(info, "\n") {
		if strings.TrimSpace(line) == "cluster_enabled:1" {
			return true
		}
	}
	return false
}
