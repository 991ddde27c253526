package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// With durable winners, `pause` says an activity is paused only once the
// master's replicas have the switch; one the master alone holds (a failover
// could undo it, decisions §63) is reported as such, exit 1, and the
// operator's second run, with the replica back, lands.
func TestPauseNotOnTheReplicasIsSaidSo(t *testing.T) {
	m, r, path := durableCLI(t)
	r.Pause(t)
	if _, err := m.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("pause", "-c", path, "dpa")
	if code != exitFailed || !strings.Contains(errs, "paused on the master but not on its replicas, so a failover could undo it: dpa") ||
		strings.Contains(out, "dpa: paused") {
		t.Errorf("pause with the replica cut off: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if v, err := m.Do("HGET", store.MetaKey("seckill", "dpa"), "paused"); err != nil || v != "1" {
		t.Errorf("the master's switch: %q %v (in effect there all the same)", v, err)
	}
	relink(t, r)
	if code, out, errs := cliRun("pause", "-c", path, "dpa"); code != 0 || !strings.Contains(out, "dpa: paused") {
		t.Errorf("pause with the replica back: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// The same for `block` (decisions §65): every kind given is changed on the
// master, the ones its replicas did not take are named, exit 1; run again
// with the replica back, it exits 0 and the replica has the entries.
func TestBlockNotOnTheReplicasIsSaidSo(t *testing.T) {
	m, r, path := durableCLI(t)
	r.Pause(t)
	if _, err := m.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("block", "-c", path, "--user", "scalper", "--ip", "203.0.113.9")
	if code != exitFailed || !strings.Contains(errs, "changed on the master but not on its replicas, so a failover could undo it: ip, user; run it again") {
		t.Errorf("block with the replica cut off: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	for key, member := range map[string]string{"seckill:{block}:user": "scalper", "seckill:{block}:ip": "203.0.113.9"} {
		if v, err := m.Do("ZSCORE", key, member); err != nil || v != "inf" {
			t.Errorf("the master's %s: %s at %q %v (in effect there all the same)", key, member, v, err)
		}
	}
	relink(t, r)
	if code, out, errs := cliRun("block", "-c", path, "--user", "scalper", "--ip", "203.0.113.9"); code != 0 || !strings.Contains(out, "blocked user: scalper") {
		t.Errorf("block with the replica back: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if v, err := r.Do("ZSCORE", "seckill:{block}:user", "scalper"); err != nil || v != "inf" {
		t.Errorf("the replica's user block list: scalper at %q %v", v, err)
	}
}

// relink continues replica r and waits for its link to the master.
func relink(t *testing.T, r *redistest.Server) {
	t.Helper()
	r.Resume(t)
	deadline := time.Now().Add(10 * time.Second)
	for r.Info("replication", "master_link_status") != "up" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// durableCLI starts a master with one replica and writes a config with
// durable winners (replicas: 1) for activity dpa, preheated.
func durableCLI(t *testing.T) (m, r *redistest.Server, path string) {
	t.Helper()
	m = redistest.Start(t)
	r = redistest.StartReplica(t, m)
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	cfg := fmt.Sprintf(`listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: "http://127.0.0.1:9", timeout: 300ms, signing_secret_env: %s }
redis: { addrs: ["%s"], timeout: 500ms, durable_winners: { replicas: 1, timeout: 100ms } }
activities:
  - id: dpa
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 10 }]
    pending_timeout: 3s
`, redistest.FreePort(t), redistest.FreePort(t), lifeSecretEnv, m.Addr,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	path = filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cliRun("preheat", "-c", path); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	return m, r, path
}
