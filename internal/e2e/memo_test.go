package e2e_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRepeatBuyersFromMemory (issue 10): the repeat clicks of winners are
// answered 409 ALREADY_PURCHASED from the buyer memo, with no script run
// after each buyer's first repeat; a refund by the operator (release on
// another client) reaches the instance through Redis's invalidation, and
// the refunded buyer buys again.
func TestRepeatBuyersFromMemory(t *testing.T) {
	f := newFixture(t)
	const n = 20
	var first string
	for i := range n {
		won := f.buy(actOpen, "rm"+strconv.Itoa(i))
		wantWin(t, won)
		if i == 0 {
			first = won.Token()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.p.Server.WaitConfirms(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wantCode(t, f.buy(actOpen, "rm"+strconv.Itoa(i)), "ALREADY_PURCHASED", 409)
	}
	// The scripts Redis ran for these buyers, from MONITOR: a count of
	// every EVALSHA also counts the fleet heartbeat's, every 500 ms, which
	// a slow run (-race, a loaded box) met (CI, 2026-12-07).
	mon := memoMonitor(t, f.redis.Addrs[0])
	saved := f.p.Counter(f.p.Metrics.RedisSaved, "buyer_memo")
	for range 5 {
		for i := range n {
			wantCode(t, f.buy(actOpen, "rm"+strconv.Itoa(i)), "ALREADY_PURCHASED", 409)
		}
	}
	if d := mon.scriptsFor(t, "rm"); d != 0 {
		t.Errorf("%d remembered repeats ran %d scripts, want 0", 5*n, d)
	}
	if d := f.p.Counter(f.p.Metrics.RedisSaved, "buyer_memo") - saved; d != 5*n {
		t.Errorf("seckill_redis_calls_saved_total{reason=buyer_memo} rose by %v, want %d", d, 5*n)
	}
	f.p.WantStock(t, actOpen, 100-n, 0, n)

	// The operator refunds rm0 through the admin listener's own client (the
	// release command): the proxy hears of it only from Redis.
	st, err := store.OpenNow(f.p.Cfg.Redis, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tok, err := store.ParseToken(first)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := st.Release(ctx, tok, f.act(t, actOpen).Shards, "refund", time.Now().UnixMilli(), false); err != nil || code != lua.OK {
		t.Fatalf("Release = %v, %v", code, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := f.buy(actOpen, "rm0")
		if r.Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a refunded buyer still refused after 5 s: %d %s", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memoMonitor counts, through MONITOR, the script calls Redis runs with an
// argument that starts with a prefix.
type memoMon struct {
	mu    sync.Mutex
	lines []string
	addr  string
}

func memoMonitor(t *testing.T, addr string) *memoMon {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	br := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("monitor: %q %v", l, err)
	}
	m := &memoMon{addr: addr}
	go func() {
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, l)
			m.mu.Unlock()
		}
	}()
	return m
}

// scriptsFor is how many EVAL/EVALSHA calls named an argument starting
// with prefix, up to now: an ECHO sent after them marks where MONITOR has
// caught up.
func (m *memoMon) scriptsFor(t *testing.T, prefix string) int {
	t.Helper()
	mark := "memo-monitor-mark-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := redistest.Do(m.addr, "ECHO", mark); err != nil {
		t.Fatalf("ECHO: %v", err)
	}
	n := 0
	e2e.Eventually(t, 5*time.Second, "MONITOR caught up", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		n = 0
		for _, l := range m.lines {
			if strings.Contains(l, mark) {
				return true
			}
			if (strings.Contains(l, "] \"EVALSHA\"") || strings.Contains(l, "] \"EVAL\"")) && strings.Contains(l, " \""+prefix) {
				n++
			}
		}
		return false
	})
	return n
}
