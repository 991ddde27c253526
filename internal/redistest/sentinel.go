package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel timings of StartSentinels: a killed master is declared down
// after SentinelDownAfter, and a failover that stalls is retried after
// SentinelFailoverTimeout; with these a replica is promoted within a few
// seconds.
const (
	SentinelDownAfter       = 1000 * time.Millisecond
	SentinelFailoverTimeout = 3000 * time.Millisecond
)

// StartSentinel runs one redis-server in sentinel mode monitoring master
// under masterSet with the given quorum, from a config file written to its
// temporary directory (sentinels rewrite their config, so it must be a
// file of their own).
func StartSentinel(t testing.TB, masterSet string, master *Server, quorum int) *Server {
	t.Helper()
	return startSentinel(t, masterSet, master, quorum, SentinelDownAfter)
}

func startSentinel(t testing.TB, masterSet string, master *Server, quorum int, downAfter time.Duration) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redis-server not found on PATH (run: apt-get install -y redis-server): %v", err)
	}
	s := &Server{Dir: DataDir(t)}
	conf := filepath.Join(s.Dir, "sentinel.conf")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, s.Port, s.Dir, filepath.Join(s.Dir, "redis.log"),
			masterSet, master.Port, quorum,
			masterSet, downAfter.Milliseconds(),
			masterSet, SentinelFailoverTimeout.Milliseconds(), masterSet)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("sentinel did not start: %v", lastErr)
	return nil
}

// Sentinels is a group of sentinels watching one master set.
type Sentinels struct {
	MasterSet string
	Nodes     []*Server
}

// StartSentinels starts n sentinels (quorum n/2+1) watching master under
// masterSet and returns once every one of them knows the others and
// replicas replicas: a failover can then be authorised and has a replica
// to promote.
func StartSentinels(t testing.TB, masterSet string, master *Server, n, replicas int) *Sentinels {
	t.Helper()
	return StartSentinelsWith(t, masterSet, master, n, replicas, SentinelDownAfter)
}

// StartSentinelsWith is StartSentinels with down-after-milliseconds
// downAfter: a master that answers no PING for that long is failed over
// (a test whose faults stall the master for a while on purpose sets it
// above the longest stall).
func StartSentinelsWith(t testing.TB, masterSet string, master *Server, n, replicas int, downAfter time.Duration) *Sentinels {
	t.Helper()
	g := &Sentinels{MasterSet: masterSet}
	for i := 0; i < n; i++ {
		g.Nodes = append(g.Nodes, startSentinel(t, masterSet, master, n/2+1, downAfter))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range g.Nodes {
		for {
			m, err := g.master(s)
			if err == nil && m["num-other-sentinels"] == strconv.Itoa(n-1) && m["num-slaves"] == strconv.Itoa(replicas) &&
				!strings.Contains(m["flags"], "down") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel %s not ready: %v %v", s.Addr, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

// Addrs are the sentinels' addresses.
func (g *Sentinels) Addrs() []string {
	out := make([]string, len(g.Nodes))
	for i, s := range g.Nodes {
		out[i] = s.Addr
	}
	return out
}

// master is SENTINEL MASTER as a map, from sentinel s.
func (g *Sentinels) master(s *Server) (map[string]string, error) {
	out, err := s.Do("SENTINEL", "MASTER", g.MasterSet)
	if err != nil {
		return nil, err
	}
	f := strings.Split(out, "\n")
	m := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m, nil
}

// MasterAddr is the master's address as the first live sentinel that
// answers sees it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (g *Sentinels) MasterAddr() (string, error) {
	err := fmt.Errorf("no live sentinel")
	for _, s := range g.Nodes {
		if !s.Alive() {
			continue
		}
		var out string
		if out, err = s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.MasterSet); err == nil {
			host, port, ok := strings.Cut(out, "\n")
			if !ok {
				return "", fmt.Errorf("sentinel %s: no master %s", s.Addr, g.MasterSet)
			}
			return host + ":" + port, nil
		}
	}
	return "", err
}
