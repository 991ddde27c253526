package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Clocks reads every master's TIME: on this host the offset is within the
// round trip; a host clock set 3 s behind is judged 3 s behind, on every
// node of a cluster, and a node that is down is named, not hidden.
func TestClocksAgainstRealRedis(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := openStore(t, redisConfig(cl.Addrs(), true))
	nodes, err := s.Clocks(ctx(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("%d nodes measured, want the 3 masters: %+v", len(nodes), nodes)
	}
	for _, n := range nodes {
		if n.Err != nil || n.Least() > 50*time.Millisecond || n.RTT <= 0 {
			t.Errorf("node %s: %+v (least %s)", n.Addr, n, n.Least())
		}
	}
	if _, ok, problem := store.JudgeClocks(nodes, time.Second); !ok || problem != "" {
		t.Errorf("same host judged off: %v %q", ok, problem)
	}

	behind := func() time.Time { return time.Now().Add(-3 * time.Second) }
	nodes, err = s.Clocks(ctx(t), behind)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Err != nil || n.Offset < 2900*time.Millisecond || n.Offset > 3100*time.Millisecond {
			t.Errorf("node %s 3 s behind: offset %s err %v", n.Addr, n.Offset, n.Err)
		}
	}
	w, ok, problem := store.JudgeClocks(nodes, time.Second)
	if !ok || !strings.Contains(problem, "this host's clock is 3s behind Redis "+w.Addr) || !strings.Contains(problem, "server.max_clock_skew 1s") {
		t.Errorf("judged: %v %q", ok, problem)
	}
	if _, _, problem := store.JudgeClocks(nodes, 5*time.Second); problem != "" {
		t.Errorf("3 s within a 5 s bound judged off: %q", problem)
	}

	cl.Nodes[0].Kill()
	nodes, _ = s.Clocks(ctx(t), time.Now)
	down := 0
	for _, n := range nodes {
		if n.Err != nil {
			down++
		}
	}
	if down != 1 {
		t.Errorf("one master down: %d nodes with an error: %+v", down, nodes)
	}
	if _, ok, _ := store.JudgeClocks([]store.NodeClock{{Addr: "x", Err: store.ErrUnavailable}}, time.Second); ok {
		t.Error("no node answered, judged anyway")
	}
}
