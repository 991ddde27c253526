// Package demo is `make demo`: a throwaway redis-server, the demo shop, a
// seckill-proxy configured in front of it, one spike, and the verdict —
// everything started is stopped again, also on Ctrl-C or error.
package demo

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/bench"
	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/report"
	"github.com/seckill-proxy/seckill-proxy/bench/shop"
	"github.com/seckill-proxy/seckill-proxy/bench/verify"
)

// Options of the demo.
type Options struct {
	ProxyBin    string
	Users       int
	Tries       int
	Stock       int64
	Concurrency int
	// Keep leaves the temp dir (configs, logs, database) in place.
	Keep bool
	Out  io.Writer // the report
	Err  io.Writer // progress and where things are
}

// Activity and SKU the demo sells.
const (
	Activity = "act_demo"
	SKU      = "30021"
)

// ErrNoRedis is returned when redis-server is not installed.
var ErrNoRedis = errors.New("redis-server not found in PATH: run `apt-get install -y redis-server`")

// Run performs the demo. It returns an error wrapping bench.ErrInvariant
// when the stock does not add up.
func Run(ctx context.Context, o Options) (err error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Err, "demo: "+format+"\n", a...) }
	redisBin, lerr := exec.LookPath("redis-server")
	if lerr != nil {
		return ErrNoRedis
	}
	if o.ProxyBin == "" {
		return errors.New("--proxy-bin is required (build it: go build -o bin/seckill-proxy ./cmd/seckill-proxy)")
	}
	proxyBin, lerr := exec.LookPath(o.ProxyBin)
	if lerr != nil {
		return fmt.Errorf("proxy binary %s: %w", o.ProxyBin, lerr)
	}
	if proxyBin, lerr = filepath.Abs(proxyBin); lerr != nil {
		return fmt.Errorf("proxy binary: %w", lerr)
	}

	dir, err := os.MkdirTemp("", "seckill-demo-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		if o.Keep || err != nil {
			say("logs, config and database kept in %s", dir)
		} else if rerr := os.RemoveAll(dir); rerr != nil {
			say("could not remove %s: %v", dir, rerr)
		}
	}()

	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	listen := "127.0.0.1:" + strconv.Itoa(ports[1])
	adminListen := "127.0.0.1:" + strconv.Itoa(ports[2])

	// Redis: throwaway, no persistence.
	say("starting redis-server on %s", redisAddr)
	redisCmd := exec.Command(redisBin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	redisCmd.SysProcAttr = sysProcAttr()
	if err := redisCmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	stops = append(stops, func() { stopProcess(redisCmd, 5*time.Second) })
	if err := waitRedis(ctx, redisAddr, 10*time.Second); err != nil {
		return err
	}

	// The shop, in-process, on SQLite, checking signatures.
	secret := randomHex(16)
	adminToken := randomHex(16)
	// The status command run by verify needs them too.
	if err := os.Setenv("SECKILL_SIGNING_SECRET", secret); err != nil {
		return fmt.Errorf("set SECKILL_SIGNING_SECRET: %w", err)
	}
	if err := os.Setenv("SECKILL_ADMIN_TOKEN", adminToken); err != nil {
		return fmt.Errorf("set SECKILL_ADMIN_TOKEN: %w", err)
	}
	logger := zap.NewNop()
	sh, err := shop.New(ctx, shop.Config{DB: "sqlite:" + filepath.Join(dir, "shop.db"), SigningSecret: secret}, logger)
	if err != nil {
		return fmt.Errorf("demo shop: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = sh.Close() // the listen error is the one to report
		return fmt.Errorf("demo shop listen: %w", err)
	}
	go sh.Serve(ln) //nolint:errcheck // ends with Close
	// Teardown: the run's outcome is already decided.
	stops = append(stops, func() { _ = sh.Close() })
	shopURL := "http://" + ln.Addr().String()
	say("demo shop on %s (SQLite %s)", shopURL, filepath.Join(dir, "shop.db"))

	cfgPath := filepath.Join(dir, "seckill.yaml")
	if err := os.WriteFile(cfgPath, []byte(Config(listen, adminListen, shopURL, redisAddr, o.Stock, time.Now())), 0o600); err != nil {
		return fmt.Errorf("write proxy config: %w", err)
	}
	say("proxy config %s", cfgPath)

	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, perr := exec.CommandContext(pctx, proxyBin, "preheat", "-c", cfgPath).CombinedOutput()
	cancel()
	if perr != nil {
		return fmt.Errorf("%s preheat -c %s: %w\n%s", proxyBin, cfgPath, perr, out)
	}
	say("preheated %d units of %s/%s", o.Stock, Activity, SKU)

	logf, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		return fmt.Errorf("proxy log: %w", err)
	}
	defer func() { _ = logf.Close() }() // the proxy's log; the proxy has been stopped by then
	proxyCmd := exec.Command(proxyBin, "serve", "-c", cfgPath)
	proxyCmd.Stdout, proxyCmd.Stderr = logf, logf
	proxyCmd.SysProcAttr = sysProcAttr()
	if err := proxyCmd.Start(); err != nil {
		return fmt.Errorf("start %s serve: %w", proxyBin, err)
	}
	// exited is closed (a broadcast) so both the readiness wait and the
	// final stop can watch it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = proxyCmd.Wait(); close(exited) }()
	stops = append(stops, func() { stopStarted(proxyCmd, exited, 10*time.Second) })
	say("seckill-proxy serve on %s (admin %s), log %s", listen, adminListen, logf.Name())
	if err := waitHTTP(ctx, "http://"+listen+"/_seckill/time", 15*time.Second, exited); err != nil {
		select {
		case <-exited:
			err = fmt.Errorf("%w (%v)", err, waitErr)
		default:
		}
		return fmt.Errorf("%w\nlast proxy log lines:\n%s", err, tail(logf.Name(), 15))
	}

	say("firing %d users × %d tries, concurrency %d", o.Users, o.Tries, o.Concurrency)
	res, err := bench.Execute(ctx, bench.Options{
		Name: "demo",
		Load: load.Config{
			Target: "http://" + listen, Activity: Activity, SKUs: []string{SKU},
			Users: o.Users, Tries: o.Tries, Concurrency: o.Concurrency, XFF: true, UserPrefix: "u",
			Timeout: 10 * time.Second, Progress: o.Err,
		},
		RedisAddr: redisAddr, ShopURL: shopURL, ProxyBin: proxyBin, ProxyConfig: cfgPath, PerUserLimit: 1,
		Log: o.Err,
	})
	if res == nil {
		return err
	}
	report.Print(o.Out, res)
	sum, serr := verify.FetchSummary(context.Background(), shopURL, Activity)
	fmt.Fprintln(o.Out)
	if serr == nil {
		fmt.Fprintf(o.Out, "orders created by the shop: %d (stock %d)\n", sum.Orders, o.Stock)
	}
	fmt.Fprintf(o.Out, "latency p50 %s ms, p99 %s ms\n", report.FormatMS(res.Latency.P50), report.FormatMS(res.Latency.P99))
	if err != nil {
		fmt.Fprintf(o.Out, "stock adds up: NO — %v\n", err)
		return err
	}
	fmt.Fprintln(o.Out, "stock adds up: yes (initial = remaining + pending + confirmed, shop orders == confirmed, no user above the limit)")
	return nil
}

// Config is the proxy YAML the demo writes (SPEC §3).
func Config(listen, admin, shopURL, redisAddr string, stock int64, now time.Time) string {
	return fmt.Sprintf(`listen: %q
admin: { listen: %q, token_env: SECKILL_ADMIN_TOKEN }
upstream: { url: %q, timeout: 3s, signing_secret_env: SECKILL_SIGNING_SECRET }
redis: { addrs: [%q] }
trusted_proxies: ["127.0.0.1/32"]
limits:
  per_ip: { rate: 1000000, burst: 1000000 }
  per_device: { rate: 1000000, burst: 1000000 }
  per_user: { rate: 1000000, burst: 1000000 }
activities:
  - id: %s
    start: %s
    end: %s
    skus: [ { id: %q, stock: %d } ]
    per_user_limit: 1
    shards: 4
    admission_rate: { rate: 1000000, burst: 1000000 }
    verify: { url: %q }
`, listen, admin, shopURL, redisAddr, Activity,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339),
		SKU, stock, shopURL+"/internal/orders?token={token}")
}

// freePorts asks the kernel for n free loopback ports. They are released
// before use, so another process could take one in between; good enough for
// a demo, and the failure is loud.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close() // only held to reserve the port number
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitRedis(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second)) // fails only on a closed conn, which the PING then reports
			_, werr := c.Write([]byte("PING\r\n"))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			_ = c.Close() // the PING's answer is all we wanted
			if werr == nil && rerr == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering PING after %s", addr, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitHTTP(ctx context.Context, url string, limit time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(limit)
	for {
		code, _, err := fasthttp.GetTimeout(nil, url, time.Second)
		if err == nil && code == fasthttp.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("GET %s: no 200 after %s (last: %d %w)", url, limit, code, err)
			}
			return fmt.Errorf("GET %s: no 200 after %s (last: %d)", url, limit, code)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("seckill-proxy serve exited before answering")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopProcess sends SIGTERM, then SIGKILL after grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stopStarted(cmd, done, grace)
}

func stopStarted(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b)
}
