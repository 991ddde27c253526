package load

import (
	"context"
	"math"
	"testing"
	"time"
)

// fakeClock advances only when slept on.
type fakeClock struct{ now time.Time }

func (f *fakeClock) Now() time.Time { return f.now }
func (f *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	if t.After(f.now) {
		f.now = t
	}
}

func TestScheduleRateOnFakeClock(t *testing.T) {
	tests := []struct {
		name string
		w    Waveform
	}{
		{"ramp 3s hold 10s at 5000/s", Waveform{Peak: 5000, Ramp: 3 * time.Second, Hold: 10 * time.Second}},
		{"no ramp, 2s at 1000/s", Waveform{Peak: 1000, Hold: 2 * time.Second}},
		{"slow ramp 10s to 200/s", Waveform{Peak: 200, Ramp: 10 * time.Second, Hold: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			start := clk.now
			perSec := map[int]int64{}
			var last time.Duration
			n := Schedule(context.Background(), clk, tt.w, 0, func(k int64, at time.Time) bool {
				if !at.Equal(clk.now) {
					t.Fatalf("request %d emitted at %v, intended %v", k, clk.now.Sub(start), at.Sub(start))
				}
				off := at.Sub(start)
				if off < last {
					t.Fatalf("time went backwards at %d", k)
				}
				last = off
				perSec[int(off/time.Second)]++
				return true
			})
			if n != tt.w.Total() {
				t.Fatalf("emitted %d, want %d", n, tt.w.Total())
			}
			if last > tt.w.Duration() {
				t.Fatalf("last request at %v, after the waveform's end %v", last, tt.w.Duration())
			}
			// Each whole second's count within ±5% of the waveform's
			// integral over that second.
			for s := 0; s < int(tt.w.Duration()/time.Second); s++ {
				want := integral(tt.w, float64(s+1)) - integral(tt.w, float64(s))
				if want < 100 {
					continue // ±5% of a handful of requests is below one request
				}
				if got := float64(perSec[s]); math.Abs(got-want) > 0.05*want {
					t.Errorf("second %d: %v requests, want %.0f ±5%%", s, got, want)
				}
			}
			// Hold phase overall: rate within ±5% of peak.
			var hold int64
			r := int(tt.w.Ramp / time.Second)
			for s := r; s < r+int(tt.w.Hold/time.Second); s++ {
				hold += perSec[s]
			}
			if rate := float64(hold) / tt.w.Hold.Seconds(); math.Abs(rate-tt.w.Peak) > 0.05*tt.w.Peak {
				t.Errorf("hold rate %.1f/s, want %.0f ±5%%", rate, tt.w.Peak)
			}
		})
	}
}

// integral is the expected cumulative count at t seconds.
func integral(w Waveform, t float64) float64 {
	r := w.Ramp.Seconds()
	if t <= r {
		return w.Peak * t * t / (2 * r)
	}
	return w.Peak*r/2 + w.Peak*(math.Min(t, r+w.Hold.Seconds())-r)
}

func TestScheduleKeepsIntendedTimesWhenBlocked(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	start := clk.now
	w := Waveform{Peak: 100, Hold: time.Second}
	var lateness []time.Duration
	Schedule(context.Background(), clk, w, 0, func(k int64, at time.Time) bool {
		lateness = append(lateness, clk.now.Sub(at))
		if k == 10 {
			clk.now = clk.now.Add(200 * time.Millisecond) // a stalled emit: workers all busy
		}
		return true
	})
	// The 20 requests due during the stall go out late, with their original
	// intended times, so their latency includes the stall.
	if lateness[11] < 180*time.Millisecond || lateness[11] > 200*time.Millisecond {
		t.Fatalf("request after stall is %v late, want ~190ms", lateness[11])
	}
	if len(lateness) != 100 || start.Add(w.At(99)).After(start.Add(time.Second)) {
		t.Fatalf("sent %d", len(lateness))
	}
}

func TestScheduleLimitAndCancel(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	w := Waveform{Peak: 1000, Hold: 10 * time.Second}
	if n := Schedule(context.Background(), clk, w, 42, func(int64, time.Time) bool { return true }); n != 42 {
		t.Fatalf("limit: %d", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := Schedule(ctx, clk, w, 0, func(k int64, _ time.Time) bool {
		if k == 5 {
			cancel()
		}
		return true
	})
	if n != 6 {
		t.Fatalf("cancel: %d", n)
	}
}
