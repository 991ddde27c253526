// Package redistest starts real redis-server processes on free ports for
// tests: a single node, or a Redis Cluster of several masters. Every server
// is private to the test that started it and is killed when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string
	cmd  *exec.Cmd
	args []string
}

// Binary is the redis-server executable used; tests are skipped-fatal when missing.
var Binary = "redis-server"

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }() // only held to pick the port number
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs a single redis-server with no persistence and returns once it
// answers PING. extra are more redis-server arguments.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redis-server not found on PATH (run: apt-get install -y redis-server): %v", err)
	}
	s := &Server{Dir: t.TempDir()}
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
	s := &Server{Dir: t.TempDir(), Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log")}, extra...)
	if err := s.start(); err != nil {
		t.Fatalf("redis-server on port %d did not start: %v", port, err)
	}
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() error {
	s.cmd = exec.Command(Binary, s.args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
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
	return Do(s.Addr, args...)
}

// Do sends one command to addr; see Server.Do.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
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

// Cluster is a running Redis Cluster with no replicas.
type Cluster struct {
	Nodes []*Server
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
	c := &Cluster{}
	for i := 0; i < n; i++ {
		c.Nodes = append(c.Nodes, Start(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf"))
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
