// Package load drives a target over HTTP: a spike waveform scheduled open-loop
// (latency measured from each request's intended send time, so a slow server
// cannot hide its latency by slowing the generator), or a closed loop of C
// workers; per-worker histograms and counters merged at the end.
package load

import (
	"context"
	"math"
	"time"
)

// Clock is the time source of the scheduler, injected so tests can run a
// whole waveform on a fake clock in microseconds.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t or when ctx ends, whichever is first.
	SleepUntil(ctx context.Context, t time.Time)
}

// RealClock is the wall clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps with a timer; short waits spin-yield instead, because
// timer granularity (~50 µs–1 ms) would otherwise bunch requests at high rates.
func (RealClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// Waveform is the spike: a linear ramp from 0 to Peak requests/s over Ramp,
// Peak held for Hold, then nothing.
type Waveform struct {
	Peak float64
	Ramp time.Duration
	Hold time.Duration
}

// Total is the number of requests the waveform sends.
func (w Waveform) Total() int64 {
	return int64(math.Floor(w.Peak*w.Ramp.Seconds()/2 + w.Peak*w.Hold.Seconds()))
}

// Duration is how long the waveform lasts.
func (w Waveform) Duration() time.Duration { return w.Ramp + w.Hold }

// At returns the offset from the start at which request k (0-based) is due:
// the inverse of the cumulative count N(t) = Peak·t²/(2·Ramp) during the ramp
// and Peak·Ramp/2 + Peak·(t−Ramp) during the hold. Computing each time from
// k (not from the previous send) means a scheduler that fell behind catches up
// instead of silently lowering the rate.
func (w Waveform) At(k int64) time.Duration {
	if w.Peak <= 0 {
		return 0
	}
	r := w.Ramp.Seconds()
	rampCount := w.Peak * r / 2
	x := float64(k)
	var sec float64
	if x < rampCount {
		sec = math.Sqrt(2 * x * r / w.Peak)
	} else {
		sec = r + (x-rampCount)/w.Peak
	}
	return time.Duration(sec * float64(time.Second))
}

// Schedule calls emit(k, intended) for every request of w at its intended
// time, for k < limit (limit ≤ 0: the whole waveform), and returns how many it
// emitted. emit may block (all workers busy): the intended times do not move,
// so the queueing delay shows up in the measured latency (coordinated
// omission correction). It stops early when ctx ends or emit returns false.
func Schedule(ctx context.Context, clk Clock, w Waveform, limit int64, emit func(k int64, intended time.Time) bool) int64 {
	total := w.Total()
	if limit > 0 && limit < total {
		total = limit
	}
	start := clk.Now()
	var k int64
	for ; k < total; k++ {
		if ctx.Err() != nil {
			return k
		}
		due := start.Add(w.At(k))
		if clk.Now().Before(due) {
			clk.SleepUntil(ctx, due)
		}
		if !emit(k, due) {
			return k + 1
		}
	}
	return k
}
