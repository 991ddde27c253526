package config

import (
	"path/filepath"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// redis.sentinel and redis.tls: what they map to, and every refusal at
// its line.
func TestRedisSentinelAndTLS(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(okAct+"redis:\n  sentinel:\n    master_set: mymaster\n    addrs: [\"127.0.0.1:26379\", \"127.0.0.1:26380\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Redis
	if !r.Sentinel.Enabled() || r.Sentinel.MasterSet != "mymaster" || len(r.Sentinel.Addrs) != 2 || len(r.Addrs) != 0 || r.Cluster || r.TLS.Enabled {
		t.Errorf("sentinel config = %+v", r)
	}
	if cfg.Activities[0].Shards != 1 {
		t.Errorf("shards behind a sentinel = %d, want 1 (one master runs one script at a time)", cfg.Activities[0].Shards)
	}

	f := redistest.NewTLSFiles(t)
	cfg, err = Parse("t.yaml", []byte(okAct+"redis:\n  tls: {ca_file: "+f.CA+", cert_file: "+f.ClientCert+", key_file: "+f.ClientKey+", server_name: "+f.ServerName+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := cfg.Redis.TLS.Config()
	if err != nil || tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != f.ServerName {
		t.Errorf("tls config = %+v, %v", tc, err)
	}
	// `tls: {}`: TLS with the system's roots.
	cfg, err = Parse("t.yaml", []byte(okAct+"redis:\n  tls: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tc, err := cfg.Redis.TLS.Config(); err != nil || tc == nil || tc.RootCAs != nil {
		t.Errorf("tls: {} = %+v, %v", tc, err)
	}
	// No block: plain TCP.
	cfg, _ = Parse("t.yaml", []byte(okAct))
	if tc, err := cfg.Redis.TLS.Config(); tc != nil || err != nil {
		t.Errorf("no tls block = %+v, %v", tc, err)
	}

	missing := filepath.Join(t.TempDir(), "nope.pem")
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		{"sentinel without master_set", "redis:\n  sentinel:\n    addrs: [\"127.0.0.1:26379\"]\n",
			[]wantErr{{9, "redis.sentinel.master_set is required"}}},
		{"sentinel without addrs", "redis:\n  sentinel:\n    master_set: m\n    addrs: []\n",
			[]wantErr{{11, "redis.sentinel.addrs needs at least one sentinel address"}}},
		{"sentinel bad addr", "redis:\n  sentinel:\n    master_set: m\n    addrs: [\"localhost\"]\n",
			[]wantErr{{11, "redis.sentinel.addrs"}}},
		{"sentinel and addrs", "redis:\n  addrs: [\"127.0.0.1:6379\"]\n  sentinel: {master_set: m, addrs: [\"127.0.0.1:26379\"]}\n",
			[]wantErr{{9, "redis.addrs and redis.sentinel exclude each other"}}},
		{"sentinel and cluster", "redis:\n  cluster: true\n  sentinel: {master_set: m, addrs: [\"127.0.0.1:26379\"]}\n",
			[]wantErr{{9, "redis.cluster and redis.sentinel exclude each other"}}},
		{"tls cert without key", "redis:\n  tls:\n    cert_file: " + f.ClientCert + "\n",
			[]wantErr{{10, "cert_file and key_file go together"}}},
		{"tls missing ca", "redis:\n  tls:\n    ca_file: " + missing + "\n",
			[]wantErr{{10, "redis.tls.ca_file: open " + missing}}},
		{"tls ca not pem", "redis:\n  tls:\n    ca_file: " + f.ClientKey + "\n",
			[]wantErr{{10, "holds no PEM certificate"}}},
		{"tls key not matching", "redis:\n  tls:\n    cert_file: " + f.ClientCert + "\n    key_file: " + f.ServerKey + "\n",
			[]wantErr{{10, "redis.tls.cert_file/key_file"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, okAct+tt.give, tt.want) })
	}
}
