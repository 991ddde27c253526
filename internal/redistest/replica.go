package redistest

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartReplica starts a redis-server replicating master (--replicaof) and
// returns once its link to the master is up and it has the master's data.
func StartReplica(t testing.TB, master *Server, extra ...string) *Server {
	t.Helper()
	// A full sync starts at once instead of after the default 5 s wait
	// for more replicas to share it.
	if _, err := master.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("master %s: %v", master.Addr, err)
	}
	r := Start(t, append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(master.Port)}, extra...)...)
	// Up on both sides, and streaming: after a diskless full sync the
	// master streams writes to a replica only from its first
	// acknowledgement on (up to a second later), so a write is made and
	// its acknowledgement awaited.
	deadline := time.Now().Add(10 * time.Second)
	wrote := false
	for {
		if r.Info("replication", "master_link_status") == "up" {
			if !wrote {
				if _, err := master.Do("SET", "redistest:replica", r.Addr); err != nil {
					t.Fatalf("master %s: %v", master.Addr, err)
				}
				wrote = true
			}
			off := master.Info("replication", "master_repl_offset")
			if strings.Contains(master.Info("replication", "slave0"), "offset="+off+",") {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s of %s: not streaming within 10 s", r.Addr, master.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pause stops the server's process (SIGSTOP): its connections stay open,
// it answers nothing, acknowledges nothing, until Resume. Cleanup resumes
// it, so Kill at the end of the test is not left waiting on a stopped process.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { _ = s.signal(syscall.SIGCONT) })
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", s.Addr, err)
	}
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("not running")
	}
	return s.cmd.Process.Signal(sig)
}

// SetReplicaOf changes the --replicaof the server is started with by its
// next Restart: master's address, or none (a master) when master is nil.
// A failover swaps the roles: the promoted replica must not come back as
// a replica of the node it replaced, and the old master comes back as a
// replica of the new one (what its supervisor's config says after a
// failover, and what Sentinel would tell it).
func (s *Server) SetReplicaOf(master *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var args []string
	for i := 0; i < len(s.args); i++ {
		if s.args[i] == "--replicaof" && i+2 < len(s.args) {
			i += 2
			continue
		}
		args = append(args, s.args[i])
	}
	if master != nil {
		args = append(args, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	}
	s.args = args
}
