package admin_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
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

// browser is headless Chromium driven over --remote-debugging-pipe (the
// DevTools protocol as NUL-terminated JSON on fds 3 and 4): one page,
// evaluated in real time, no extra dependency.
type browser struct {
	t       *testing.T
	w       *os.File
	r       *bufio.Reader
	id      int
	session string
	stderr  bytes.Buffer
}

func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	toChrome, ourEnd, err := os.Pipe() // chrome reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	fromChrome, chromeEnd, err := os.Pipe() // chrome writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--disable-extensions", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "about:blank")
	b := &browser{t: t, w: ourEnd, r: bufio.NewReader(fromChrome)}
	cmd.Stderr = &b.stderr
	cmd.ExtraFiles = []*os.File{toChrome, chromeEnd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	toChrome.Close()
	chromeEnd.Close()
	t.Cleanup(func() {
		ourEnd.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		fromChrome.Close()
	})
	return b
}

// call sends one DevTools command and waits (at most 15 s) for its answer;
// events in between are skipped.
func (b *browser) call(session, method string, params any, out any) {
	b.t.Helper()
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		b.t.Fatalf("devtools %s: %v\n%s", method, err, b.stderr.String())
	}
	type reply struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	got := make(chan reply, 1)
	go func() {
		for {
			line, err := b.r.ReadBytes(0)
			if err != nil {
				got <- reply{ID: -1}
				return
			}
			var r reply
			if json.Unmarshal(line[:len(line)-1], &r) == nil && r.ID == b.id {
				got <- r
				return
			}
		}
	}()
	select {
	case r := <-got:
		if r.ID < 0 {
			b.t.Fatalf("devtools %s: browser gone\n%s", method, b.stderr.String())
		}
		if r.Error != nil {
			b.t.Fatalf("devtools %s: %s", method, r.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				b.t.Fatalf("devtools %s: %v in %s", method, err, r.Result)
			}
		}
	case <-time.After(15 * time.Second):
		b.t.Fatalf("devtools %s: no answer in 15 s", method)
	}
}

// open makes a 1280×width page at url.
func (b *browser) open(url string, width, height int) {
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &tgt)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil)
}

// eval runs a JS expression in the page and decodes its value into out.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("eval %q: %s", expr, res.ExceptionDetails.Text)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			b.t.Fatalf("eval %q: %v in %s", expr, err, res.Result.Value)
		}
	}
}

// until evaluates a boolean expression every 100 ms until it is true.
func (b *browser) until(within time.Duration, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var ok bool
		b.eval(expr, &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var page string
			b.eval(`document.body ? document.body.innerText : ''`, &page)
			b.t.Fatalf("page never showed %s within %v; it shows:\n%s", what, within, page)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// What the page drew, read from its DOM.
const readPage = `(() => {
  const out = {ticks: +document.getElementById('ticks').textContent, charts: {}, rows: {}, buttons: []};
  for (const svg of document.querySelectorAll('svg.chart')) {
    const k = svg.dataset.chart + '/' + svg.dataset.activity; out.charts[k] = {};
    for (const p of svg.querySelectorAll('polyline')) out.charts[k][p.dataset.series] = +p.dataset.points;
  }
  for (const tr of document.querySelectorAll('table.skus tr')) {
    const td = [...tr.querySelectorAll('td')].map(x => x.textContent);
    if (td.length) out.rows[td[0]] = [+td[1], +td[2]];
  }
  for (const b of document.querySelectorAll('.act button')) out.buttons.push(b.dataset.op);
  return out;
})()`

// The live dashboard in headless Chromium, against a proxy under load:
// after a few seconds of polling it has drawn, per activity, the stock of
// every SKU, the answers/s by code and the buy p99 as lines of several
// points, and the shop's latency; its Pause button does nothing without
// the admin token or with a wrong one, pauses with the right one (Redis'
// flag and the page's state badge), and Resume resumes.
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

	// Load: a few buyers a few milliseconds apart, every one a new user,
	// on both SKUs (the small one sells out: SOLD_OUT answers).
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

	b := startBrowser(t, bin)
	b.open(f.adm.URL+"/", 1280, 620)
	b.until(15*time.Second, "5 polls", `!!document.getElementById('ticks') && +document.getElementById('ticks').textContent >= 5`)

	var page struct {
		Ticks   int                       `json:"ticks"`
		Charts  map[string]map[string]int `json:"charts"`
		Rows    map[string][2]int         `json:"rows"`
		Buttons []string                  `json:"buttons"`
	}
	b.eval(readPage, &page)
	want := map[string][]string{
		"stock/" + act:   {"phone", "case"},
		"answers/" + act: {"ADMITTED", "SOLD_OUT"},
		"p99/" + act:     {"p99"},
		"shop/":          {"p99", "p50"},
	}
	for key, names := range want {
		got, ok := page.Charts[key]
		if !ok {
			t.Errorf("chart %s not drawn (charts: %v)", key, page.Charts)
			continue
		}
		for _, n := range names {
			if got[n] < 2 {
				t.Errorf("chart %s: series %s has %d points, want a line (>= 2): %v", key, n, got[n], got)
			}
		}
	}
	if r := page.Rows["phone"]; r[0] != 20000 || r[1] >= 20000 {
		t.Errorf("phone row: initial %d remaining %d, want 20000 and fewer (sent %d buys)", r[0], r[1], sent.Load())
	}
	if r := page.Rows["case"]; r[0] != 40 || r[1] != 0 {
		t.Errorf("case row: initial %d remaining %d, want 40 sold out", r[0], r[1])
	}
	if strings.Join(page.Buttons, ",") != "pause,resume" {
		t.Errorf("buttons: %v", page.Buttons)
	}

	if path := os.Getenv("SECKILL_DASHBOARD_PNG"); path != "" {
		b.until(15*time.Second, "10 polls", `+document.getElementById('ticks').textContent >= 10`)
		var shot struct {
			Data string `json:"data"`
		}
		b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
		raw, err := base64.StdEncoding.DecodeString(shot.Data)
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

	// The buttons, behind the admin token.
	click := func(op, tok string) {
		b.eval(`(() => { document.getElementById('msg').textContent = '';
			document.getElementById('token').value = `+jsString(tok)+`;
			document.querySelector('#act-flash button[data-op=`+op+`]').click(); })()`, nil)
	}
	msgIs := func(s string) string {
		return `document.getElementById('msg').textContent.includes(` + jsString(s) + `)`
	}
	click("pause", "")
	b.until(5*time.Second, "a request for the token", msgIs("type the admin token first"))
	click("pause", "wrong")
	b.until(5*time.Second, "401", msgIs("pause flash: 401"))
	if f.flags(t, act).Paused {
		t.Fatal("paused by a wrong token")
	}
	click("pause", token)
	b.until(5*time.Second, "pause done", msgIs("pause flash: done"))
	if !f.flags(t, act).Paused {
		t.Fatal("Pause with the admin token did not pause")
	}
	b.until(5*time.Second, "the paused badge", `document.querySelector('#act-flash .state').textContent === 'paused'`)
	click("resume", token)
	b.until(5*time.Second, "resume done", msgIs("resume flash: done"))
	if f.flags(t, act).Paused {
		t.Fatal("Resume did not resume")
	}
	b.until(5*time.Second, "the open badge", `document.querySelector('#act-flash .state').textContent === 'open'`)
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }
