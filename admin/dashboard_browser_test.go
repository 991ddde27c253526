package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// chromiumBin finds a headless-capable Chromium, or "".
func chromiumBin() string {
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

// headless runs Chromium on url with a virtual-time budget of wait and
// returns what it printed. Virtual time stands still while a fetch is
// pending, so the page's 1 s timers fire as fast as its polls return: the
// test's server holds each poll for pollDelay to space them in real time.
func headless(t *testing.T, bin, url string, wait time.Duration, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait+20*time.Second)
	defer cancel()
	size := "--window-size=1280,1000"
	if len(extra) > 0 && strings.HasPrefix(extra[0], "--screenshot") {
		size = "--window-size=1280,620" // the charts, not the empty page below
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), size,
		"--virtual-time-budget=" + strconv.Itoa(int(wait.Milliseconds()))}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, lastLines(stderr.String(), 20))
	}
	return out
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

var (
	reScript   = regexp.MustCompile(`(?s)<script>.*?</script>`)
	reTicks    = regexp.MustCompile(`id="ticks">(\d+)<`)
	reChart    = regexp.MustCompile(`(?s)<svg class="chart" data-chart="(\w+)" data-activity="([^"]*)".*?</svg>`)
	reSeries   = regexp.MustCompile(`<polyline data-series="([^"]+)" data-points="(\d+)"`)
	reSKURow   = regexp.MustCompile(`<tr><td>([^<]+)</td><td>(\d+)</td><td>(\d+)</td>`)
	reButtonOp = regexp.MustCompile(`<button data-op="(pause|resume)">`)
)

// The live dashboard in headless Chromium, against a proxy under load:
// after a few seconds of polling it has drawn, per activity, the stock of
// every SKU, the answers/s by code and the buy p99 as lines of several
// points, the shop's latency, and it shows the pause/resume buttons.
// SECKILL_DASHBOARD_PNG=path also saves a screenshot (docs/dashboard.png).
func TestDashboardRendersInChromium(t *testing.T) {
	bin := chromiumBin()
	if bin == "" {
		t.Skip("chromium not installed (apt-get install -y chromium)")
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	const act = "flash"
	f := newFixtureWith(t, token, []e2e.Activity{{ID: act, Shards: 4, SKUs: []config.SKU{{ID: "phone", Stock: 20000}, {ID: "case", Stock: 40}}}})
	f.admin(t, "POST", "/admin/preheat?activity="+act, 200, nil)

	// Load: a few buyers a millisecond apart, every one a new user, on
	// both SKUs (the small one sells out: SOLD_OUT answers).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				sku := "phone"
				if i%3 == 0 {
					sku = "case"
				}
				e2e.Do(nil, f.proxy, e2e.Req{URI: "/api/seckill/" + act + "/" + sku + "/buy",
					Header: [][2]string{{"X-User-Id", fmt.Sprintf("u%d-%d", w, i)}}})
				sent.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// The page's polls, a second apart in real time as in a browser.
	const pollDelay = 800 * time.Millisecond
	paced := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/dashboard.json" {
			time.Sleep(pollDelay)
		}
		f.adm.Config.Handler.ServeHTTP(w, r)
	}))
	defer paced.Close()

	dom := string(headless(t, bin, paced.URL+"/", 5*time.Second, "--dump-dom"))
	dom = reScript.ReplaceAllString(dom, "") // what rendered, not the code that draws it
	m := reTicks.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no #ticks in the page:\n%s", lastLines(dom, 30))
	}
	if n, _ := strconv.Atoi(m[1]); n < 3 {
		t.Fatalf("page polled %d times in 5 s, want at least 3 (every second)", n)
	}
	charts := map[string]map[string]int{} // kind/activity -> series -> points
	for _, c := range reChart.FindAllStringSubmatch(dom, -1) {
		key := c[1] + "/" + c[2]
		charts[key] = map[string]int{}
		for _, s := range reSeries.FindAllStringSubmatch(c[0], -1) {
			charts[key][s[1]], _ = strconv.Atoi(s[2])
		}
	}
	want := map[string][]string{
		"stock/" + act:   {"phone", "case"},
		"answers/" + act: {"ADMITTED", "SOLD_OUT"},
		"p99/" + act:     {"p99"},
		"shop/":          {"p99", "p50"},
	}
	for key, names := range want {
		got, ok := charts[key]
		if !ok {
			t.Errorf("chart %s not drawn (charts: %v)", key, charts)
			continue
		}
		for _, n := range names {
			if got[n] < 2 {
				t.Errorf("chart %s: series %s has %d points, want a line (>= 2): %v", key, n, got[n], got)
			}
		}
	}
	rows := map[string][2]int{}
	for _, r := range reSKURow.FindAllStringSubmatch(dom, -1) {
		i, _ := strconv.Atoi(r[2])
		rem, _ := strconv.Atoi(r[3])
		rows[r[1]] = [2]int{i, rem}
	}
	if r := rows["phone"]; r[0] != 20000 || r[1] >= 20000 {
		t.Errorf("phone row: initial %d remaining %d, want 20000 and fewer (sent %d buys)", r[0], r[1], sent.Load())
	}
	if r := rows["case"]; r[0] != 40 || r[1] != 0 {
		t.Errorf("case row: initial %d remaining %d, want 40 sold out", r[0], r[1])
	}
	if ops := reButtonOp.FindAllStringSubmatch(dom, -1); len(ops) != 2 {
		t.Errorf("pause/resume buttons: %v", ops)
	}
	if !strings.Contains(dom, `id="token"`) {
		t.Error("no admin token field")
	}

	if path := os.Getenv("SECKILL_DASHBOARD_PNG"); path != "" {
		shot := t.TempDir() + "/dashboard.png"
		headless(t, bin, paced.URL+"/", 10*time.Second, "--screenshot="+shot)
		raw, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s (%d bytes)", path, len(raw))
	}
}
