package preflight

import (
	"fmt"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Behind Sentinel, preflight asks the sentinels for the master and checks
// that node; a master set the sentinels do not monitor fails.
func TestPreflightSentinel(t *testing.T) {
	master := goodRedis(t)
	redistest.StartReplica(t, master, "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory", "256mb")
	g := redistest.StartSentinels(t, "pfset", master, 3, 1)
	block := func(set string) string {
		return fmt.Sprintf("  sentinel: { master_set: %s, addrs: [%q, %q, %q] }\n", set, g.Nodes[0].Addr, g.Nodes[1].Addr, g.Nodes[2].Addr)
	}
	cfg := env{shopURL: shop(t, 200, 404), redis: block("pfset")}.config(t)
	rep := run1(t, cfg)
	want(t, rep, "redis-sentinel", Pass, "master "+master.Addr)
	want(t, rep, "redis-reachable "+master.Addr, Pass, "master")
	want(t, rep, "redis-mode "+master.Addr, Pass, "")
	want(t, rep, "maxmemory-policy "+master.Addr, Pass, "")
	if rep.Failed() {
		t.Fatalf("failed:\n%s", dump(rep))
	}

	cfg = env{shopURL: shop(t, 200, 404), redis: block("nosuchset")}.config(t)
	rep = run1(t, cfg)
	want(t, rep, "redis-sentinel "+g.Nodes[0].Addr, Fail, `no master set "nosuchset"`)
	want(t, rep, "redis-sentinel", Fail, "no sentinel named the master")
}

// With redis.tls, preflight reaches a TLS-only Redis the way the proxy does.
func TestPreflightTLS(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	srv := redistest.StartTLS(t, f, true, "--maxmemory", "256mb")
	tls := fmt.Sprintf("  tls: { ca_file: %q, cert_file: %q, key_file: %q }\n", f.CA, f.ClientCert, f.ClientKey)
	cfg := env{addrs: []string{srv.Addr}, shopURL: shop(t, 200, 404), extra: tls}.config(t)
	rep := run1(t, cfg)
	want(t, rep, "redis-reachable "+srv.Addr, Pass, "master")
	want(t, rep, "scripts "+srv.Addr, Pass, "")
}
