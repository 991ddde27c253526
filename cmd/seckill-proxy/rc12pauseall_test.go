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

// Red team round 12, sale-day operations: the kill switch of every
// activity when one Redis node is down.
//
// A cluster master dies mid-sale (README: run with
// cluster-require-full-coverage no, so the live masters keep selling their
// shards). Something looks wrong; the operator runs `pause --all`.
// switchCmd (cmd/seckill-proxy/ops.go) pauses the activities in file order
// and returns at the first one whose meta is on the dead node: every
// activity after it stays on sale although its node answers, and the
// output names only the one that failed. (The admin API's setPaused,
// admin/api.go, does the same and answers 503 without saying which
// activities it paused.)

// rc12ClusterConfig writes a config naming acts on the cluster's masters.
func rc12ClusterConfig(t *testing.T, addrs []string, acts []string) string {
	t.Helper()
	os.Setenv(lifeSecretEnv, "s3cret")
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, `listen: "127.0.0.1:%d"
admin: { listen: "127.0.0.1:%d" }
upstream: { url: "http://127.0.0.1:9", timeout: 300ms, signing_secret_env: %s }
redis: { addrs: ["%s"], cluster: true, timeout: 500ms }
activities:
`, redistest.FreePort(t), redistest.FreePort(t), lifeSecretEnv, strings.Join(addrs, `", "`))
	for _, id := range acts {
		fmt.Fprintf(&b, `  - id: %s
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 10 }]
    shards: 1
    pending_timeout: 3s
`, id, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	}
	p := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRC12PauseAllStopsAtTheFirstDeadNode(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-master cluster")
	}
	cl := redistest.StartCluster(t, 3)
	// Three activities: the first and last on one master, the middle one
	// on another, which dies.
	node := func(id string) *redistest.Server {
		s, err := cl.MasterFor(store.MetaKey("seckill", id))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var first, middle, last string
	for i := 0; i < 200 && last == ""; i++ {
		id := fmt.Sprintf("rc12a%d", i)
		switch {
		case first == "":
			first = id
		case middle == "" && node(id) != node(first):
			middle = id
		case middle != "" && node(id) == node(first):
			last = id
		}
	}
	if last == "" {
		t.Fatal("no three activities placed as wanted")
	}
	dead := node(middle)
	var live []string
	for _, n := range cl.Nodes {
		if n != dead {
			live = append(live, n.Addr)
		}
	}
	path := rc12ClusterConfig(t, live, []string{first, middle, last})
	if code, _, errs := cliRun("preheat", "-c", path); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	for _, n := range cl.Nodes {
		if n != dead {
			_, _ = n.Do("CONFIG", "SET", "cluster-require-full-coverage", "no")
		}
	}
	dead.Kill()

	code, out, errs := cliRun("pause", "-c", path, "--all")
	t.Logf("pause --all: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	lastPaused, err := node(last).Do("HGET", store.MetaKey("seckill", last), "paused")
	if err != nil {
		t.Fatal(err)
	}
	if lastPaused != "1" {
		t.Errorf("`pause --all` with %s's node down: %s (its node alive) is still on sale (paused=%q); the command stopped at the first failure (exit %d) and its output never names %s",
			middle, last, lastPaused, code, last)
	}
}
