package admin

import (
	"context"
	"net/http"
	"sort"
	"sync"
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

	status dashStatus
}

// dashStatus is the activities' Redis status the dashboard shows, shared
// by every poll: read at most once per dashMaxAge, one read in flight, so
// open pages and a curl loop on /dashboard.json (no token) cost Redis what
// /metrics' collector does (decisions §19), not one status per poll.
type dashStatus struct {
	mu      sync.Mutex
	snap    *dashSnap
	running chan struct{} // closed when the read in flight ends; nil if none
}

// dashSnap is one read: the config it read (the dashboard lists its
// activities, so a reload shows within dashMaxAge) and, per activity in
// its order, the status or the error (errors are kept as long).
type dashSnap struct {
	cfg  *config.Config
	at   time.Time // when the read began (ended, if a status failed)
	st   []store.ActivityStatus
	errs []error
}

const (
	dashMaxAge      = time.Second
	dashReadTimeout = 2 * time.Second
)

// snapshot returns a read begun less than dashMaxAge ago, starting one
// (or waiting for the one in flight) when there is none; nil if the
// caller went away meanwhile.
func (d *Dashboard) snapshot(ctx context.Context) *dashSnap {
	c := &d.status
	c.mu.Lock()
	if c.snap != nil && time.Since(c.snap.at) < dashMaxAge {
		snap := c.snap
		c.mu.Unlock()
		return snap
	}
	if c.running == nil {
		c.running = make(chan struct{})
		go d.read(c.running)
	}
	running := c.running
	c.mu.Unlock()
	select {
	case <-running: // bounded by dashReadTimeout
	case <-ctx.Done():
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// read reads every activity's status into d.status and closes done.
func (d *Dashboard) read(done chan struct{}) {
	snap := &dashSnap{cfg: d.Config(), at: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), dashReadTimeout)
	defer cancel()
	for i := range snap.cfg.Activities {
		st, err := d.Store.Status(ctx, &snap.cfg.Activities[i])
		snap.st, snap.errs = append(snap.st, st), append(snap.errs, err)
		if err != nil {
			// An error is kept from when it was known: a read that waited
			// out the timeout is not stale at once, or with Redis stalled
			// every poll would start another.
			snap.at = time.Now()
		}
	}
	d.status.mu.Lock()
	d.status.snap, d.status.running = snap, nil
	d.status.mu.Unlock()
	close(done)
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
	// Buy is the cumulative histogram of buy latency: the page takes the
	// difference between two polls to draw the p99 of the last second.
	Buy   *dashHist `json:"buy,omitempty"`
	Error string    `json:"error,omitempty"`
}

// dashHist is a cumulative latency histogram: upper bounds in seconds,
// cumulative counts per bound, and the total count (the +Inf bucket).
type dashHist struct {
	LE []float64 `json:"le"`
	C  []uint64  `json:"c"`
	N  uint64    `json:"n"`
}

// addHist adds h into into (same buckets: one histogram vector), or starts it.
func addHist(into *dashHist, h *dto.Histogram) *dashHist {
	if h == nil {
		return into
	}
	b := h.GetBucket()
	if into == nil {
		into = &dashHist{LE: make([]float64, len(b)), C: make([]uint64, len(b))}
		for i, bk := range b {
			into.LE[i] = bk.GetUpperBound()
		}
	}
	if len(b) != len(into.C) {
		return into
	}
	for i, bk := range b {
		into.C[i] += bk.GetCumulativeCount()
	}
	into.N += h.GetSampleCount()
	return into
}

func (d *Dashboard) data(w http.ResponseWriter, r *http.Request) {
	snap := d.snapshot(r.Context())
	if snap == nil {
		return // the poller went away
	}
	mfs, _ := d.Metrics.Registry.Gather()
	codes := map[string]map[string]int64{}
	hists := map[string]*dto.Histogram{}
	var shop *dashHist // winners forwarded to the shop (passthrough apart)
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
		case "seckill_upstream_duration_seconds":
			for _, m := range mf.GetMetric() {
				if label(m, "outcome") != "passthrough" {
					shop = addHist(shop, m.GetHistogram())
				}
			}
		}
	}
	now := time.Now()
	var out struct {
		ServerTimeMs int64          `json:"server_time_ms"`
		Activities   []dashActivity `json:"activities"`
		// Shop is the latency of winners' requests to the shop.
		Shop *dashHist `json:"shop,omitempty"`
	}
	out.ServerTimeMs = now.UnixMilli()
	out.Shop = shop
	for i := range snap.cfg.Activities {
		a := &snap.cfg.Activities[i]
		da := dashActivity{ID: a.ID, Codes: codes[a.ID], P99Ms: quantileMs(hists[a.ID], 0.99), Buy: addHist(nil, hists[a.ID])}
		st, err := snap.st[i], snap.errs[i]
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
