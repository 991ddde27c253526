package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 10, operator errors: Redis of the wrong kind.

// redis.addrs names one node of a Redis Cluster without cluster: true (a
// single address means a single node, README). Every command then fails
// with Redis's bare redirection, "preheat rt10: MOVED 14898 127.0.0.1:...",
// "pause rt10: MOVED 8943 ...", "status rt10: MOVED ...": nothing says
// the node is a cluster node and redis.cluster: true is missing (preflight
// knows: its redis-mode check says so). The brief's promise: Redis of the
// wrong kind gives a clear message. Want the message to name the cluster.
func TestRT10OpsSingleConfigAgainstClusterSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	cl := redistest.StartCluster(t, 3)
	start := time.Now().Add(time.Hour)
	y := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: "http://127.0.0.1:1" }
redis: { addrs: [%q], timeout: 1s }
activities:
  - id: rt10
    start: %s
    end: %s
    skus: [{ id: s1, stock: 5 }, { id: s2, stock: 5 }, { id: s3, stock: 5 }]
`, redistest.FreePort(t), redistest.FreePort(t), cl.Addrs()[0], start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	path := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"preheat", "-c", path},
		{"status", "-c", path},
		{"pause", "-c", path, "rt10"},
		{"resume", "-c", path, "rt10"},
	} {
		code, out, errs := cliRun(args...)
		if code == 0 {
			continue // a command that worked needs no message
		}
		if !strings.Contains(strings.ToLower(out+errs), "cluster") {
			t.Errorf("%s against a Redis Cluster node configured as a single node: exit %d, %q: the message does not say the node is a cluster node (redis.cluster: true)", args[0], code, strings.TrimSpace(out+errs))
		}
	}
}

// redis.password_env names a variable the operator forgot to export on
// this host: the commands fail with Redis's own words, "redis unavailable:
// NOAUTH HELLO must be called with the client already authenticated,
// otherwise the HELLO AUTH <user> <pass> option can be used ...", and
// nothing says that $RT10OPS_UNSET_PW is empty (serve warns at start for
// an empty signing secret or admin token, secretWarnings, but not for
// this one). Want the message to name the empty variable.
func TestRT10OpsEmptyRedisPasswordEnvNamed(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := srv.Do("CONFIG", "SET", "requirepass", "sekret"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(time.Hour)
	y := fmt.Sprintf(`upstream: { url: "http://127.0.0.1:1" }
redis: { addrs: [%q], timeout: 500ms, password_env: RT10OPS_UNSET_PW }
activities:
  - id: rt10
    start: %s
    end: %s
    skus: [{ id: s1, stock: 5 }]
`, srv.Addr, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339))
	path := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RT10OPS_UNSET_PW", "")
	code, out, errs := cliRun("status", "-c", path)
	if code == 0 || !strings.Contains(out+errs, "RT10OPS_UNSET_PW") {
		t.Errorf("status with redis.password_env naming an empty variable: exit %d, the message does not name it:\n%s%s", code, out, errs)
	}
}

// `eligible --activity rt10 --add u1` on an activity without
// eligible_only: true answers "eligible for rt10: u1", exit 0, and the
// list is never consulted: everyone may buy. The operator who forgot the
// flag in the file believes the sale is restricted to the list. Want a
// refusal (exit 2) or at least a warning naming eligible_only.
func TestRT10OpsEligibleOnActivityWithoutEligibleOnly(t *testing.T) {
	srv := redistest.Start(t)
	path := rt10opsConfig(t, "", srv.Addr, "http://127.0.0.1:1", "[{ id: s1, stock: 5 }]", time.Now().Add(time.Hour), "")
	code, out, errs := cliRun("eligible", "-c", path, "--activity", "rt10", "--add", "u1")
	if code == 0 && !strings.Contains(out+errs, "eligible_only") {
		t.Errorf("eligible --add on an activity without eligible_only: exit 0, %q, no word that the list has no effect", strings.TrimSpace(out+errs))
	}
}
