package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// pd12Monitor records the commands Redis runs (MONITOR) until stop,
// which returns them: one line each, "<time> [<db> <client>] "CMD" "arg"...".
func pd12Monitor(t *testing.T, r *e2e.Redis) (stop func() []string) {
	t.Helper()
	c, err := net.Dial("tcp", r.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "MONITOR\r\n")
	br := bufio.NewReader(c)
	if l, err := br.ReadString('\n'); err != nil || strings.TrimSpace(l) != "+OK" {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(strings.TrimPrefix(l, "+"))
		}
	}()
	return func() []string {
		const marker = "pd12-monitor-end"
		if _, err := r.Node.Do("ECHO", marker); err != nil {
			t.Fatal(err)
		}
		var out []string
		for l := range lines {
			if strings.Contains(l, marker) {
				break
			}
			out = append(out, l)
		}
		c.Close()
		return out
	}
}

// pd12StatusReads counts the status reads in MONITOR lines: an HGETALL of
// the meta key not run for the flags' client-side cache (which sends it in
// a MULTI after a PTTL of the same key, on the same connection).
func pd12StatusReads(lines []string, metaKey string) int {
	prev := map[string]string{} // client → its previous command
	n := 0
	for _, l := range lines {
		open, close := strings.Index(l, "["), strings.Index(l, "]")
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(l[open+1 : close])
		client := f[len(f)-1]
		cmd := strings.TrimSpace(l[close+1:])
		if strings.EqualFold(cmd, `"HGETALL" "`+metaKey+`"`) && !strings.HasPrefix(strings.ToUpper(prev[client]), `"PTTL"`) {
			n++
		}
		prev[client] = cmd
	}
	return n
}

// TestPD12ActivityPageRedisStalled: with Redis stalled (CLIENT PAUSE ALL,
// longer than a status read may wait), 600 countdown pages asking after
// the cached state is too old to show run one status read between them,
// not one each, and are answered the SPEC's 503 STORE_UNAVAILABLE. The
// second burst, after the first read failed, runs at most one more read
// (the failure is kept briefly; the others do not wait on Redis).
func TestPD12ActivityPageRedisStalled(t *testing.T) {
	e2e.Soak(t)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL,
		Activities: []e2e.Activity{{ID: "pd12pub", SKUs: []config.SKU{{ID: "a", Stock: 10}, {ID: "b", Stock: 10}}, Shards: 2}}}.Config(t)
	p := e2e.StartProxy(t, cfg)
	p.Preheat(t, "pd12pub")
	uri := "/_seckill/activities/pd12pub"
	if codes := rc12Burst(t, p.Addr, uri, 1); codes[200] != 1 {
		t.Fatalf("warm-up: %v", codes)
	}
	time.Sleep(1100 * time.Millisecond) // the cached state is older than the SPEC's "lag < 1 s"

	stop := pd12Monitor(t, r)
	if _, err := r.Node.Do("CLIENT", "PAUSE", "6000", "ALL"); err != nil {
		t.Fatal(err)
	}
	first := rc12Burst(t, p.Addr, uri, 300)
	second := rc12Burst(t, p.Addr, uri, 300)
	resp, err := http.Get("http://" + p.Addr + uri)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("Redis paused: first burst %v, second %v, then %d %s", first, second, resp.StatusCode, body)
	// The marker's ECHO waits for the pause to end: every read the proxy
	// sent has run by then.
	lines := stop()
	got := pd12StatusReads(lines, p.Store.MetaKey("pd12pub"))
	t.Logf("status reads sent while Redis was paused: %d", got)
	if first[503] != 300 || second[503] != 300 {
		t.Errorf("with Redis paused every answer should be 503 STORE_UNAVAILABLE: first burst %v, second %v", first, second)
	}
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"STORE_UNAVAILABLE"`) {
		t.Errorf("GET %s with Redis paused: %d %s, want 503 with code STORE_UNAVAILABLE", uri, resp.StatusCode, body)
	}
	if got > 3 {
		t.Errorf("601 GET %s with Redis paused sent %d status reads (one per request waiting on Redis); want one in flight at a time, the failure kept briefly", uri, got)
	}

	// Redis back: the page shows the state again.
	for i := 0; ; i++ {
		if codes := rc12Burst(t, p.Addr, uri, 1); codes[200] == 1 {
			break
		} else if i == 50 {
			t.Fatalf("Redis back, GET %s still answers %v", uri, codes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
