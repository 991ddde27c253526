package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// rwSyncBuf is a goroutine-safe log buffer.
type rwSyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *rwSyncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *rwSyncBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// rwServeLimited runs `serve` under `ulimit -n nofile` (soft and hard) with
// an activity starting at start (its warm-up at start-2s) and the given
// server block; it returns the process, its listen address and its logs.
func rwServeLimited(t *testing.T, bin string, nofile int, start time.Time, server string) (*exec.Cmd, string, *rwSyncBuf) {
	t.Helper()
	rs := redistest.Start(t)
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	t.Cleanup(shop.Close)
	os.Setenv(lifeSecretEnv, "s3cret")
	listen := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	y := fmt.Sprintf(`listen: %q
admin: { listen: "127.0.0.1:%d" }
upstream: { url: %q, timeout: 300ms, signing_secret_env: %s }
redis: { addrs: [%q], timeout: 1s }
server: %s
activities:
  - id: rwsoon
    start: %s
    end: %s
    skus: [{ id: "sku1", stock: 5 }]
    shards: 4
    pending_timeout: 3s
`, listen, redistest.FreePort(t), shop.URL, lifeSecretEnv, rs.Addr, server,
		start.UTC().Format(time.RFC3339Nano), start.Add(time.Hour).UTC().Format(time.RFC3339Nano))
	cfgPath := filepath.Join(t.TempDir(), "seckill.yaml")
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -n %d && exec %q serve -c %q", nofile, bin, cfgPath))
	cmd.Env = os.Environ()
	logs := &rwSyncBuf{}
	cmd.Stderr = logs
	cmd.Stdout = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-rwWait(cmd) })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !rwNoSettle {
		time.Sleep(300 * time.Millisecond) // the start-up warm-up
	}
	return cmd, listen, logs
}

var rwNoSettle bool

// rwWaits holds one Wait per serve process: a test body waiting for an
// exit and its cleanup waiting after the kill must not both call
// cmd.Wait (the second blocked for good once the first took the output
// copiers' result: a 15-minute hang in .ci/run).
var rwWaits sync.Map // *exec.Cmd -> chan error

// rwWait returns a channel that yields cmd's exit once, then is closed.
func rwWait(cmd *exec.Cmd) <-chan error {
	ch := make(chan error, 1)
	if got, loaded := rwWaits.LoadOrStore(cmd, ch); loaded {
		return got.(chan error)
	}
	go func() { ch <- cmd.Wait(); close(ch) }()
	return ch
}

func rwFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// rwHold opens up to n connections that send nothing yet (each is accepted:
// a descriptor and a worker of the proxy's), stopping at the first failure.
func rwHold(t *testing.T, addr string, n int) int {
	t.Helper()
	held := 0
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		t.Cleanup(func() { _ = c.Close() })
		held++
	}
	time.Sleep(200 * time.Millisecond)
	return held
}

// TestRedTeamWarmFDLimitKillsServe: warmCap bounds a warm-up by a quarter
// of RLIMIT_NOFILE but not by the descriptors already open. With buyers'
// connections filling the open-file limit to within the warm-up's 2n
// descriptors, the pre-start warm-up's connections exhaust it; the
// listener's accept gets EMFILE, which fasthttp treats as a permanent
// error: Serve returns and `serve` exits. The same load without the
// warm-up (warm_workers: 0) keeps serving.
func TestRedTeamWarmFDLimitKillsServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	const nofile = 256
	for _, tc := range []struct {
		name, server string
		wantAlive    bool
	}{
		{"no warm-up", "{ max_conns: 1000, warm_workers: 0 }", true},
		{"default warm-up", "{ max_conns: 1000 }", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now().Add(6 * time.Second)
			cmd, addr, logs := rwServeLimited(t, bin, nofile, start, tc.server)
			base := rwFDs(cmd.Process.Pid)
			// leave 40 descriptors: more than a buyer spike's margin, less
			// than the warm-up's 2 × 32
			held := rwHold(t, addr, nofile-base-40)
			t.Logf("%s: %d fds at start, %d buyer connections held, %d fds now", tc.name, base, held, rwFDs(cmd.Process.Pid))
			time.Sleep(time.Until(start) + 500*time.Millisecond)
			exited := rwWait(cmd)
			select {
			case err := <-exited:
				t.Fatalf("%s: serve exited around the pre-start warm-up (%v) with %d buyer connections under ulimit -n %d; logs:\n%s",
					tc.name, err, held, nofile, rwTail(logs.String(), 1500))
			case <-time.After(300 * time.Millisecond):
			}
			// still serving?
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				t.Fatalf("%s: listener gone: %v\n%s", tc.name, err, rwTail(logs.String(), 1500))
			}
			_ = c.Close()
			if strings.Contains(logs.String(), "listener workers warmed") {
				t.Logf("%s: %s", tc.name, rwGrep(logs.String(), "listener workers warmed"))
			}
		})
	}
}

func rwTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func rwGrep(s, w string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, w) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRedTeamWarmSIGTERMDuringStartupWarmup: SIGTERM as soon as the
// listener answers, while the start-up warm-up (2,500 connections) runs:
// serve stops within drain_delay + a little, exit 0, no error logged.
func TestRedTeamWarmSIGTERMDuringStartupWarmup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	rwNoSettle = true
	defer func() { rwNoSettle = false }()
	cmd, _, logs := rwServeLimited(t, bin, 20000, time.Now().Add(time.Hour), "{ max_conns: 20000, warm_workers: 10000 }")
	// After "serving", so the warm-up is under way (serve's signal handler
	// is installed before its listener opens: TestServeSIGTERMAsSoonAsListening).
	for !strings.Contains(logs.String(), `"msg":"serving"`) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	warmedBefore := strings.Contains(logs.String(), "listener workers warmed")
	t0 := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t.Logf("warm-up finished before SIGTERM: %v", warmedBefore)
	exited := rwWait(cmd)
	select {
	case err := <-exited:
		took := time.Since(t0)
		t.Logf("exit %v after %v\n%s", err, took, rwTail(logs.String(), 2500))
		if err != nil || took > 4*time.Second {
			t.Fatalf("serve: exit %v after %v", err, took)
		}
		if strings.Contains(logs.String(), `"level":"error"`) {
			t.Fatalf("an error logged:\n%s", logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop 15 s after SIGTERM during the warm-up:\n%s", rwTail(logs.String(), 2500))
	}
}
