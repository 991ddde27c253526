package admin

import (
	"context"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Dashboard serves the live page at / and its data at /dashboard.json:
// per activity, remaining stock per SKU, answers by code (the page turns
// counter deltas into rates), and the p99 of buy latency.
type Dashboard struct {
	Store   *store.Store
	Metrics *metrics.Metrics
	Config  func() *config.Config
}

// Register adds the dashboard's routes to s.
func (d *Dashboard) Register(s *Server) {
	s.Handle("GET /{$}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(dashboardHTML))
	}))
	s.Handle("GET /dashboard.json", http.HandlerFunc(d.data))
}

type dashActivity struct {
	ID    string            `json:"id"`
	State string            `json:"state"`
	SKUs  []store.SKUStatus `json:"skus"`
	Codes map[string]int64  `json:"codes"`
	P99Ms float64           `json:"p99_ms"`
	Error string            `json:"error,omitempty"`
}

func (d *Dashboard) data(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	mfs, _ := d.Metrics.Registry.Gather()
	codes := map[string]map[string]int64{}
	hists := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "seckill_buy_outcomes_total":
			for _, m := range mf.GetMetric() {
				act, code := label(m, "activity"), label(m, "code")
				if codes[act] == nil {
					codes[act] = map[string]int64{}
				}
				if v := int64(m.GetCounter().GetValue()); v > 0 {
					codes[act][code] = v
				}
			}
		case "seckill_buy_duration_seconds":
			for _, m := range mf.GetMetric() {
				hists[label(m, "activity")] = m.GetHistogram()
			}
		}
	}
	now := time.Now()
	var out struct {
		ServerTimeMs int64          `json:"server_time_ms"`
		Activities   []dashActivity `json:"activities"`
	}
	out.ServerTimeMs = now.UnixMilli()
	cfg := d.Config()
	for i := range cfg.Activities {
		a := &cfg.Activities[i]
		da := dashActivity{ID: a.ID, Codes: codes[a.ID], P99Ms: quantileMs(hists[a.ID], 0.99)}
		st, err := d.Store.Status(ctx, a)
		if err != nil {
			da.Error = err.Error()
		}
		da.SKUs = st.SKUs
		soldOut := len(st.SKUs) > 0
		for _, k := range st.SKUs {
			soldOut = soldOut && k.Preheated && k.Remaining == 0
		}
		da.State = "open"
		switch {
		case now.Before(a.Start):
			da.State = "upcoming"
		case !now.Before(a.End):
			da.State = "ended"
		case st.Paused:
			da.State = "paused"
		case soldOut:
			da.State = "sold_out"
		}
		out.Activities = append(out.Activities, da)
	}
	writeJSON(w, http.StatusOK, out)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantileMs estimates a quantile from histogram buckets, interpolating
// linearly inside the bucket it falls in (as Prometheus'
// histogram_quantile does), in milliseconds; NaN-free for JSON.
func quantileMs(h *dto.Histogram, q float64) float64 {
	if h == nil || h.GetSampleCount() == 0 {
		return 0
	}
	rank := q * float64(h.GetSampleCount())
	b := h.GetBucket()
	sort.Slice(b, func(i, j int) bool { return b[i].GetUpperBound() < b[j].GetUpperBound() })
	lower, below := 0.0, 0.0
	for _, bk := range b {
		upper, count := bk.GetUpperBound(), float64(bk.GetCumulativeCount())
		if count >= rank {
			if count == below {
				return upper * 1000
			}
			return (lower + (upper-lower)*(rank-below)/(count-below)) * 1000
		}
		lower, below = upper, count
	}
	// Beyond the last bucket: its bound is the best that can be said.
	return b[len(b)-1].GetUpperBound() * 1000
}

const dashboardHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>seckill-proxy</title>
<style>
body{font:14px system-ui,sans-serif;margin:24px;background:#fafafa;color:#222}
h1{font-size:20px} .act{background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px 16px;margin:12px 0}
table{border-collapse:collapse} td,th{padding:3px 10px;text-align:right} th{color:#666;font-weight:500}
td:first-child,th:first-child{text-align:left} .state{font-weight:600;padding:2px 8px;border-radius:4px;background:#eee}
.open{background:#d4f7d4}.sold_out{background:#f7d4d4}.paused{background:#ffe2b3}.ended{background:#ddd}.upcoming{background:#d8e8ff}
.bad{color:#b00;font-weight:600} .muted{color:#888}
</style></head><body>
<h1>seckill-proxy <span class="muted" id="t"></span></h1>
<div id="acts"></div>
<script>
let prev = null, prevT = 0;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
async function tick(){
  let d; try { d = await (await fetch('dashboard.json')).json(); } catch(e) { return; }
  const dt = prev ? (d.server_time_ms - prevT)/1000 : 0;
  document.getElementById('t').textContent = new Date(d.server_time_ms).toISOString();
  let html = '';
  for (const a of d.activities || []) {
    const codes = a.codes || {}, old = prev && prev[a.id] ? prev[a.id] : {};
    const rate = c => dt > 0 ? ((codes[c]||0) - (old[c]||0)) / dt : 0;
    html += '<div class="act"><b>'+esc(a.id)+'</b> <span class="state '+a.state+'">'+a.state+'</span>' +
      ' &nbsp; admitted/s <b>'+rate('ADMITTED').toFixed(1)+'</b> &nbsp; p99 <b>'+a.p99_ms.toFixed(1)+' ms</b>' +
      (a.error ? ' <span class="bad">'+esc(a.error)+'</span>' : '') +
      '<table><tr><th>sku</th><th>initial</th><th>remaining</th><th>pending</th><th>confirmed</th><th>released</th><th>ok</th></tr>';
    for (const s of a.skus || []) {
      html += '<tr><td>'+esc(s.id)+'</td><td>'+s.initial+'</td><td>'+s.remaining+'</td><td>'+s.pending+'</td><td>'+
        s.confirmed+'</td><td>'+s.released+'</td><td'+(s.ok?'>ok':' class="bad">'+esc(s.problem||'BROKEN'))+
        (s.preheated?'':' <span class="muted">not preheated</span>')+'</td></tr>';
    }
    html += '</table><table><tr><th>code</th><th>total</th><th>per second</th></tr>';
    for (const c of Object.keys(codes).sort()) html += '<tr><td>'+c+'</td><td>'+codes[c]+'</td><td>'+rate(c).toFixed(1)+'</td></tr>';
    html += '</table></div>';
  }
  document.getElementById('acts').innerHTML = html;
  prev = {}; for (const a of d.activities || []) prev[a.id] = a.codes || {}; prevT = d.server_time_ms;
}
tick(); setInterval(tick, 1000);
</script></body></html>`
