package shop

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/hist"
)

// orderLatency records how long the shop takes per order attempt, from the
// handler's start to its answer (database pool and row-lock waits
// included), and the most orders it worked on at once: what a load does to
// the shop, as seen from inside it (issue 11 §1's benchmark). GET
// /internal/latency reads it, POST /internal/latency/reset clears it.
type orderLatency struct {
	mu   sync.Mutex
	h    *hist.Histogram
	cur  atomic.Int64
	peak atomic.Int64
}

func newOrderLatency() *orderLatency { return &orderLatency{h: hist.New(hist.DefaultSubBits)} }

// start counts one order in; the returned func records it out.
func (l *orderLatency) start() func() {
	t0 := time.Now()
	c := l.cur.Add(1)
	for p := l.peak.Load(); c > p && !l.peak.CompareAndSwap(p, c); p = l.peak.Load() {
	}
	return func() {
		d := time.Since(t0)
		l.cur.Add(-1)
		l.mu.Lock()
		l.h.RecordDuration(d)
		l.mu.Unlock()
	}
}

// LatencySummary is what GET /internal/latency answers (microseconds).
type LatencySummary struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50_us"`
	P90   int64 `json:"p90_us"`
	P99   int64 `json:"p99_us"`
	P999  int64 `json:"p999_us"`
	Max   int64 `json:"max_us"`
	// PeakConcurrent is the most orders the shop worked on at once.
	PeakConcurrent int64 `json:"peak_concurrent"`
}

func (l *orderLatency) summary() LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LatencySummary{Count: l.h.Count(), P50: l.h.Quantile(0.5), P90: l.h.Quantile(0.9), P99: l.h.Quantile(0.99),
		P999: l.h.Quantile(0.999), Max: l.h.Max(), PeakConcurrent: l.peak.Load()}
}

func (l *orderLatency) reset() {
	l.mu.Lock()
	l.h.Reset()
	l.mu.Unlock()
	l.peak.Store(l.cur.Load())
}

func (s *Shop) handleLatency(ctx *fasthttp.RequestCtx, reset bool) {
	if reset {
		s.lat.reset()
	}
	writeJSON(ctx, fasthttp.StatusOK, s.lat.summary())
}
