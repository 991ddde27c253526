package inflight

import (
	"math"
	"testing"
	"time"
)

// simShop is a shop whose latency grows with the requests it works on at
// once beyond its knee: base up to knee, base × c/knee above.
type simShop struct {
	base time.Duration
	knee float64
}

func (s simShop) latency(c float64) time.Duration {
	return time.Duration(float64(s.base) * math.Max(1, c/s.knee))
}

// drive runs the estimator against the shop for d of simulated time with
// demand senders always waiting (capped by the limit), and returns the
// estimates window by window.
func drive(g *gradient, shop simShop, demand float64, d time.Duration) []float64 {
	var out []float64
	now := time.Unix(0, 0)
	end := now.Add(d)
	for now.Before(end) {
		c := math.Max(1, math.Min(math.Round(g.est), demand))
		rtt := shop.latency(c)
		// c requests complete per rtt: one sample every rtt/c.
		now = now.Add(time.Duration(float64(rtt) / c))
		if l, ok := g.sample(now, rtt, false, int64(c)); ok {
			out = append(out, l)
		}
	}
	return out
}

func TestGradientConvergesNearTheKnee(t *testing.T) {
	tests := []struct {
		name     string
		knee     float64
		min, max float64
	}{
		{"knee 8", 8, 1, 64},
		{"knee 4 (the issue's shop)", 4, 1, 32},
		{"knee 50", 50, 5, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGradient(tt.min, tt.max)
			ests := drive(g, simShop{base: 20 * time.Millisecond, knee: tt.knee}, 1e9, 60*time.Second)
			last := ests[len(ests)/2:]
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, l := range last {
				lo, hi = math.Min(lo, l), math.Max(hi, l)
			}
			t.Logf("estimates in the second half: %.1f..%.1f (knee %g)", lo, hi, tt.knee)
			// It finds the knee (the shop's latency starts rising there)
			// and keeps the shop's queue short: within 1..3 × the knee,
			// far from either bound.
			if lo < tt.knee || hi > 3*tt.knee {
				t.Fatalf("estimates %.1f..%.1f, want within [%g, %g]", lo, hi, tt.knee, 3*tt.knee)
			}
		})
	}
}

func TestGradientBacksOffOnFailures(t *testing.T) {
	g := newGradient(2, 100)
	g.est = 50
	now := time.Unix(0, 0)
	var last float64
	for i := 0; i < 500; i++ {
		now = now.Add(10 * time.Millisecond)
		if l, ok := g.sample(now, 10*time.Millisecond, true, 50); ok {
			last = l
		}
	}
	if last != 2 {
		t.Fatalf("after 5 s of failures the limit is %.1f, want the floor 2", last)
	}
}

func TestGradientDoesNotGrowUnused(t *testing.T) {
	g := newGradient(1, 100)
	g.est = 10
	// Demand 3: the limit of 10 is never reached, latency stays flat.
	ests := drive(g, simShop{base: 10 * time.Millisecond, knee: 50}, 3, 10*time.Second)
	if l := ests[len(ests)-1]; l != 10 {
		t.Fatalf("an unused limit moved to %.1f, want 10", l)
	}
}

func TestGradientStaysWithinBounds(t *testing.T) {
	// A shop with no knee would let it grow for ever: the bound holds.
	g := newGradient(2, 16)
	ests := drive(g, simShop{base: 10 * time.Millisecond, knee: 1e9}, 1e9, 20*time.Second)
	for _, l := range ests {
		if l < 2 || l > 16 {
			t.Fatalf("estimate %.1f outside [2, 16]", l)
		}
	}
	if l := ests[len(ests)-1]; l != 16 {
		t.Fatalf("a shop that never slows down leaves the limit at %.1f, want the bound 16", l)
	}
}
