// Package redistest starts real redis-server processes on free ports for
// tests: a single node, or a Redis Cluster of several masters. Every server
// is private to the test that started it and is killed when the test ends.
package redistest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string
	args []string
	// tls, when set, is how Do reaches a server that listens only on a
	// TLS port (StartTLS).
	tls *tls.Config

	mu  sync.Mutex // guards cmd: Kill and Alive may run on different goroutines
	cmd *exec.Cmd
}

// Binary is the redis-server executable used; tests are skipped-fatal when missing.
var Binary = "redis-server"

// FreePort returns a TCP port on 127.0.0.1 that is free now. It is picked
// below the kernel's ephemeral range, with room for a cluster node's bus
// port (port + 10000) below it too: a port in that range can be taken
// between a server's kill and its restart by any outgoing connection —
// among them a client reconnecting to that very port, which the kernel
// may give it as its own source port, connecting the client to itself
// (TestRedisKilledMidSale saw "Address already in use" on restart).
// A port is handed out once per test binary: a client that pooled a
// keep-alive connection to an earlier test's server on the same port would
// send its next request into that dead connection (TestUnknownItem saw
// "the server closed connection before returning the first response byte").
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()-10000
	for i := 0; hi-lo >= 1000 && i < 500; i++ {
		p := lo + rand.IntN(hi-lo)
		if !handOut(p) {
			continue // given to an earlier test of this binary
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use
		}
		_ = l.Close()
		return p
	}
	// An unusual port range: ask the kernel.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }() // only held to pick the port number
	return l.Addr().(*net.TCPAddr).Port
}

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// handOut reports whether p was never handed out before, and marks it.
func handOut(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[p] {
		return false
	}
	handedOut.ports[p] = true
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default, 32768, when it cannot be read).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &lo) // lo stays 32768 when unreadable
	}
	return lo
}

// DataDir is a directory for a server's --dir, removed at the end of the
// test: on /dev/shm when it is there. A test's Redis then never waits for
// the disk: on the 2-core CI host, with builds and other tests writing, an
// fsync could stall a node for hundreds of milliseconds — the nodes.conf a
// new cluster saves at each config change, an AOF's everysec fsync, which
// blocks writes after 2 s — and a wait bounded by the test (a 200 ms
// WAIT) failed on a replica that was only waiting for the disk. Files
// there outlive a SIGKILL of the server as on disk; persistence is
// exercised the same, only faster. Without /dev/shm: t.TempDir().
func DataDir(t testing.TB) string {
	t.Helper()
	if d, err := os.MkdirTemp("/dev/shm", "redistest-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// Start runs a single redis-server with no persistence and returns once it
// answers PING. extra are more redis-server arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redis-server not found on PATH (run: apt-get install -y redis-server): %v", err)
	}
	s := &Server{Dir: DataDir(t)}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		s.args = append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log")}, extra...)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// StartOn is Start on a given port, for tests that need Redis to appear
// at an address chosen before it runs (e.g. a client opened while Redis is down).
func StartOn(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redis-server not found on PATH (run: apt-get install -y redis-server): %v", err)
	}
	s := &Server{Dir: DataDir(t), Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log")}, extra...)
	if err := s.start(); err != nil {
		t.Fatalf("redis-server on port %d did not start: %v", port, err)
	}
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() error {
	cmd := exec.Command(Binary, s.args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.Do("PING"); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return fmt.Errorf("no PONG on %s: %s", s.Addr, lastLines(string(log), 5))
}

// Kill stops the server at once (SIGKILL). Safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_, _ = s.cmd.Process.Wait()
		s.cmd = nil
	}
}

// Restart starts a killed server again on the same port (empty, no persistence).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("restart redis: %v", err)
	}
}

// Do sends one command over a fresh connection and returns the reply as
// text (integers and strings as-is, arrays joined by newlines). It is for
// test set-up and inspection, not for the code under test.
func (s *Server) Do(args ...string) (string, error) {
	if s.tls != nil {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr, s.tls)
		if err != nil {
			return "", err
		}
		return doOn(c, args)
	}
	return Do(s.Addr, args...)
}

// Do sends one command to addr; see Server.Do.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	return doOn(c, args)
}

func doOn(c net.Conn, args []string) (string, error) {
	defer func() { _ = c.Close() }() // one command per connection; the reply is read by then
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Info returns one field of INFO (e.g. Info("commandstats", "cmdstat_evalsha")).
func (s *Server) Info(section, field string) string {
	out, err := s.Do("INFO", section)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// Cluster is a running Redis Cluster: Nodes are its masters (as started;
// after a failover a replica may serve a killed master's slots), Replicas
// its replicas (none from StartCluster).
type Cluster struct {
	Nodes    []*Server
	Replicas []*Server
}

// Addrs are the masters' addresses, for client seeds.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// StartCluster starts n masters (n >= 3), joins them with redis-cli
// --cluster create, and waits for cluster_state:ok on every node.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n)
}

// StartClusterWith is StartCluster with more redis-server arguments for
// every node (e.g. appendonly, so a node SIGKILLed and Restarted comes back
// with its data; its nodes.conf is in its Dir, so it rejoins as itself).
func StartClusterWith(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{}
	for i := 0; i < n; i++ {
		args := append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf"}, extra...)
		c.Nodes = append(c.Nodes, Start(t, args...))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, node := range c.Nodes {
		for {
			out, _ := node.Do("CLUSTER", "INFO")
			if strings.Contains(out, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster did not reach cluster_state:ok: %s", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Sum adds an integer INFO field over every node (e.g. calls of a command).
func (c *Cluster) Sum(section, field string) int64 {
	var total int64
	for _, n := range c.Nodes {
		total += ParseStat(n.Info(section, field), "calls")
	}
	return total
}

// ParseStat reads key=value out of an INFO value like
// "calls=3,usec=10,usec_per_call=3.33"; a plain integer value is returned as is.
func ParseStat(v, key string) int64 {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	for _, part := range strings.Split(v, ",") {
		if k, val, ok := strings.Cut(part, "="); ok && k == key {
			n, _ := strconv.ParseInt(val, 10, 64)
			return n
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// StartClusterWithReplicas starts masters masters (>= 3), each with
// replicasPer replicas, joined by redis-cli --cluster create
// --cluster-replicas, with cluster-node-timeout 1000 ms so a killed master
// is replaced by its replica within a few seconds. It returns once every
// node reports cluster_state:ok, every replica's link to its master is up
// and every node sees every replica. Nodes are the masters, Replicas the
// rest, as the cluster assigned them.
func StartClusterWithReplicas(t testing.TB, masters, replicasPer int) *Cluster {
	t.Helper()
	return StartClusterWithReplicasWith(t, masters, replicasPer)
}

// StartClusterWithReplicasWith is StartClusterWithReplicas with more
// redis-server arguments for every node, after its own (a later
// --cluster-node-timeout overrides the 1000 ms).
func StartClusterWithReplicasWith(t testing.TB, masters, replicasPer int, extra ...string) *Cluster {
	t.Helper()
	var all []*Server
	for i := 0; i < masters*(1+replicasPer); i++ {
		args := append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
			"--cluster-config-file", "nodes.conf"}, extra...)
		all = append(all, Start(t, args...))
	}
	args := []string{"--cluster", "create"}
	for _, s := range all {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPer), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	c := &Cluster{}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range all {
		for {
			role, _ := s.Do("ROLE")
			info, _ := s.Do("CLUSTER", "INFO")
			nodes, _ := s.Do("CLUSTER", "NODES")
			ok := strings.Contains(info, "cluster_state:ok") &&
				strings.Count(nodes, "slave") == masters*replicasPer && !strings.Contains(nodes, "handshake")
			isMaster := strings.HasPrefix(role, "master")
			if ok && !isMaster {
				ok = s.Info("replication", "master_link_status") == "up"
			}
			if ok {
				if isMaster {
					c.Nodes = append(c.Nodes, s)
				} else {
					c.Replicas = append(c.Replicas, s)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster with replicas not ready on %s: role %q, info %q, nodes %q", s.Addr, role, info, nodes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(c.Nodes) != masters || len(c.Replicas) != masters*replicasPer {
		t.Fatalf("cluster has %d masters and %d replicas, want %d and %d", len(c.Nodes), len(c.Replicas), masters, masters*replicasPer)
	}
	return c
}

// Alive reports whether the server runs (it was not killed).
func (s *Server) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// All is every server of the cluster, masters first.
func (c *Cluster) All() []*Server {
	return append(append([]*Server(nil), c.Nodes...), c.Replicas...)
}

// Server returns the cluster's server listening on addr, nil if none.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range c.All() {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Do sends one command to the first live server that answers it.
func (c *Cluster) Do(args ...string) (string, error) {
	err := fmt.Errorf("no live node")
	for _, s := range c.All() {
		if !s.Alive() {
			continue
		}
		var out string
		if out, err = s.Do(args...); err == nil {
			return out, nil
		}
	}
	return "", err
}

// Slot is the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(key string) (int, error) {
	out, err := c.Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID, Addr string
	Flags    []string
	MasterID string // "-" for a master
	Slots    [][2]int
}

// Has reports whether the node carries flag (master, slave, fail, …).
func (n ClusterNode) Has(flag string) bool {
	for _, f := range n.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// Serves reports whether slot is in one of the node's slot ranges.
func (n ClusterNode) Serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// ParseNodes reads the text of CLUSTER NODES (importing/migrating slot
// entries are skipped).
func ParseNodes(text string) []ClusterNode {
	var out []ClusterNode
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := ClusterNode{ID: f[0], Addr: addr, Flags: strings.Split(strings.ReplaceAll(f[2], "myself,", ""), ","), MasterID: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.Slots = append(n.Slots, [2]int{a, b})
			}
		}
		out = append(out, n)
	}
	return out
}

// ClusterNodes is CLUSTER NODES as seen by the first live server that answers.
func (c *Cluster) ClusterNodes() ([]ClusterNode, error) {
	out, err := c.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return ParseNodes(out), nil
}

// MasterFor returns the server that is master of key's slot, as a live
// node sees the cluster (while a killed master is not yet replaced, that
// is the killed one).
func (c *Cluster) MasterFor(key string) (*Server, error) {
	slot, err := c.Slot(key)
	if err != nil {
		return nil, err
	}
	nodes, err := c.ClusterNodes()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Has("master") && n.Serves(slot) {
			if s := c.Server(n.Addr); s != nil {
				return s, nil
			}
			return nil, fmt.Errorf("slot %d is served by %s, not a server of this cluster", slot, n.Addr)
		}
	}
	return nil, fmt.Errorf("no master serves slot %d", slot)
}

// ReplicaOf returns a replica of master, as the cluster sees it, or nil
// when it has none.
func (c *Cluster) ReplicaOf(master *Server) (*Server, error) {
	nodes, err := c.ClusterNodes()
	if err != nil {
		return nil, err
	}
	var id string
	for _, n := range nodes {
		if n.Addr == master.Addr {
			id = n.ID
		}
	}
	var replica *Server
	for _, n := range nodes {
		if id != "" && n.MasterID == id {
			replica = c.Server(n.Addr)
		}
	}
	return replica, nil
}

// Healthy reports whether every live server says cluster_state:ok with all
// 16384 slots ok, and no slot is served by a master flagged fail: a killed
// master's slots have moved to a promoted replica. It says why not.
func (c *Cluster) Healthy() (bool, string) {
	for _, s := range c.All() {
		if !s.Alive() {
			continue
		}
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return false, s.Addr + ": " + err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			f := strings.Fields(info)
			return false, s.Addr + ": " + strings.Join(f[:min(4, len(f))], " ")
		}
		out, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			return false, s.Addr + ": " + err.Error()
		}
		for _, n := range ParseNodes(out) {
			if len(n.Slots) > 0 && (n.Has("fail") || n.Has("fail?") || !n.Has("master")) {
				return false, s.Addr + " sees slots on " + n.Addr + " " + strings.Join(n.Flags, ",")
			}
			if len(n.Slots) > 0 {
				if m := c.Server(n.Addr); m == nil || !m.Alive() {
					return false, s.Addr + " sees slots on dead " + n.Addr
				}
			}
		}
	}
	return true, ""
}

// Replicated reports whether every live master's replicas have
// acknowledged its whole replication stream (each online replica's offset
// equals master_repl_offset): nothing written so far would be lost if a
// master died now.
func (c *Cluster) Replicated() bool {
	for _, s := range c.All() {
		if !s.Alive() {
			continue
		}
		out, err := s.Do("INFO", "replication")
		if err != nil {
			return false
		}
		var master int64
		var offsets []int64
		replica := false
		for _, l := range strings.Split(out, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			switch {
			case !ok:
			case k == "role":
				replica = v != "master"
			case k == "master_repl_offset":
				master, _ = strconv.ParseInt(v, 10, 64)
			case strings.HasPrefix(k, "slave") && strings.Contains(v, "offset="):
				if !strings.Contains(v, "state=online") {
					return false
				}
				offsets = append(offsets, ParseStat(v, "offset"))
			}
		}
		if replica {
			continue
		}
		for _, o := range offsets {
			if o != master {
				return false
			}
		}
	}
	return true
}
