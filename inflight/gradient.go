package inflight

import (
	"math"
	"time"
)

// gradient estimates how many requests the shop takes at once before it
// slows down, from the latency of the requests it answers, in the spirit of
// Netflix concurrency-limits' gradient limiters and Vegas (the code is our
// own). Per window of answers it compares their mean latency with the
// shop's unloaded latency (the lowest window mean seen):
//
//   - latency within tolerance (1.5×) of unloaded: the shop has room; the
//     limit grows by √limit, unless fewer than half of it were in use
//     (nothing learnt about a limit no one reached);
//   - above it: the limit moves a fifth of the way towards
//     limit × gradient + √limit, gradient = tolerance × unloaded / latency
//     (at least 0.5), which settles where the shop's queue holds about
//     √limit requests beyond what it works on;
//   - any timeout, 5xx or 429 in the window: the limit × 0.9.
//
// The result stays within [min, max]. The unloaded latency is the lowest
// window mean since the budget was last idle (no answer for gradIdle): it
// never drifts up under load, which would let the limit creep up with the
// shop's queue; a shop that became slower for good mid-sale keeps a lower
// limit (it is protected, not probed), and is measured afresh after a pause.
type gradient struct {
	min, max float64
	est      float64

	base     float64 // seconds; 0 until the first window
	winStart time.Time
	n, drops int
	sum      float64
	peak     int64
}

const (
	gradTolerance = 1.5
	gradSmoothing = 0.2
	gradBackoff   = 0.9
	gradIdle      = 30 * time.Second
	gradMinWindow = 100 * time.Millisecond
	gradMaxWindow = time.Second
	gradMinCount  = 10
)

func newGradient(lo, hi float64) *gradient { return &gradient{min: lo, max: hi, est: lo} }

func (g *gradient) clamp(l float64) float64 { return math.Min(g.max, math.Max(g.min, l)) }

// follow makes the fleet's limit (set by another instance) the estimate,
// within this one's bounds; it returns the estimate.
func (g *gradient) follow(l float64) float64 {
	g.est = g.clamp(l)
	return g.est
}

// sample adds one answer: its latency, whether the shop was overloaded, and
// how many requests the fleet had in flight. When it closes a window it
// returns the new estimate and true.
func (g *gradient) sample(now time.Time, rtt time.Duration, overloaded bool, inflight int64) (float64, bool) {
	if g.winStart.IsZero() || now.Sub(g.winStart) > gradIdle {
		g.winStart, g.n, g.drops, g.sum, g.peak, g.base = now, 0, 0, 0, 0, 0
	}
	g.n++
	g.sum += rtt.Seconds()
	if overloaded {
		g.drops++
	}
	g.peak = max(g.peak, inflight)
	if el := now.Sub(g.winStart); el < gradMaxWindow && (el < gradMinWindow || g.n < gradMinCount) {
		return 0, false
	}
	avg, drops, peak := g.sum/float64(g.n), g.drops, g.peak
	g.winStart, g.n, g.drops, g.sum, g.peak = now, 0, 0, 0, 0
	if g.base == 0 || avg < g.base {
		g.base = avg
	}
	l := g.est
	var next float64
	switch grad := gradTolerance * g.base / math.Max(avg, 1e-9); {
	case drops > 0:
		next = l * gradBackoff
	case grad >= 1:
		next = l
		if float64(peak) >= l/2 {
			next = l + math.Sqrt(l)
		}
	default:
		next = l*(1-gradSmoothing) + gradSmoothing*(l*math.Max(grad, 0.5)+math.Sqrt(l))
	}
	g.est = g.clamp(next)
	return g.est, true
}
