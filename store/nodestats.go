package store

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"
)

// NodeStats is what one Redis node says about itself: the figures the
// seed articles' launch checklist watches (memory, clients, evictions,
// slow log, throughput).
type NodeStats struct {
	Addr string
	// Role is "master" or "slave" (INFO replication), "" when not said.
	Role string
	// Err is set when the node did not answer INFO; the other fields are
	// then zero.
	Err error

	UsedMemory    int64   // used_memory, bytes
	MaxMemory     int64   // maxmemory, bytes (0: no limit)
	Fragmentation float64 // mem_fragmentation_ratio
	Clients       int64   // connected_clients
	EvictedKeys   int64   // evicted_keys since the node started
	OpsPerSec     int64   // instantaneous_ops_per_sec
	// SlowlogLen is SLOWLOG LEN, -1 when the node refuses the command
	// (managed Redis may).
	SlowlogLen int64
}

// NodeStats reads INFO and SLOWLOG LEN on every node the client talks to:
// the one node, or every master of a cluster (and replicas, when the
// client reads from them). Sorted by address. Each node is asked with the
// command timeout, so a dead node costs one timeout, not the others.
func (s *Store) NodeStats(ctx context.Context) ([]NodeStats, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	var out []NodeStats
	for addr, n := range c.Nodes() {
		ns := NodeStats{Addr: addr, SlowlogLen: -1}
		cctx, cancel := context.WithTimeout(ctx, max(2*s.timeout, 500*time.Millisecond))
		res := n.DoMulti(cctx, n.B().Info().Build(), n.B().SlowlogLen().Build())
		cancel()
		text, err := res[0].ToString()
		if err != nil {
			ns.Err = wrap(err)
			out = append(out, ns)
			continue
		}
		info := ParseInfo(text)
		ns.Role = info["role"]
		ns.UsedMemory = atoi(info["used_memory"])
		ns.MaxMemory = atoi(info["maxmemory"])
		ns.Fragmentation, _ = strconv.ParseFloat(info["mem_fragmentation_ratio"], 64)
		ns.Clients = atoi(info["connected_clients"])
		ns.EvictedKeys = atoi(info["evicted_keys"])
		ns.OpsPerSec = atoi(info["instantaneous_ops_per_sec"])
		if l, err := res[1].AsInt64(); err == nil {
			ns.SlowlogLen = l
		}
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// ParseInfo reads an INFO reply into field → value ("# Section" headers
// and blank lines skipped).
func ParseInfo(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
