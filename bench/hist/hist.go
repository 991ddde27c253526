// Package hist is a fixed-memory, log-linear latency histogram in the style of
// HdrHistogram: values below 2^subBits are exact, above that every power of two
// is split into 2^(subBits-1) equal buckets, so the relative error of any
// reported value is bounded by 2^-(subBits) (0.4% with the default 8 bits)
// regardless of magnitude. Recording is one shift and an increment, with no
// allocation and no lock: each worker owns its histogram and the results are
// merged at the end.
package hist

import (
	"errors"
	"math"
	"math/bits"
	"time"
)

// MaxValue is the largest value (in the caller's unit, microseconds for
// latencies) a histogram tracks exactly; larger values are clamped to it.
// 2^36 µs is about 19 hours, far beyond any request timeout.
const MaxValue = int64(1)<<36 - 1

// DefaultSubBits gives 0.4% worst-case relative precision in about 30 KiB.
const DefaultSubBits = 8

// ErrIncompatible is returned by Merge when the histograms differ in precision.
var ErrIncompatible = errors.New("hist: histograms have different precision")

// Histogram counts int64 values into log-linear buckets. The zero value is not
// usable; build one with New. Not safe for concurrent use.
type Histogram struct {
	subBits uint
	counts  []int64
	total   int64
	min     int64
	max     int64
	sum     float64
}

// New returns an empty histogram whose buckets are at most 2^-(subBits-1) of
// their value wide. subBits must lie in [2, 16]; out-of-range values are
// clamped, because a wrong precision is not worth failing a benchmark over.
func New(subBits int) *Histogram {
	if subBits < 2 {
		subBits = 2
	}
	if subBits > 16 {
		subBits = 16
	}
	sb := uint(subBits)
	top := uint(bits.Len64(uint64(MaxValue)))
	n := (1 << sb) + int(top-sb)*(1<<(sb-1))
	return &Histogram{subBits: sb, counts: make([]int64, n), min: math.MaxInt64}
}

// index maps a value to its bucket.
func (h *Histogram) index(v int64) int {
	u := uint64(v)
	if u < 1<<h.subBits {
		return int(u)
	}
	// k is how far the value must be shifted so that it lands in
	// [2^(subBits-1), 2^subBits): each k is one power of two split into
	// 2^(subBits-1) linear buckets.
	k := uint(bits.Len64(u)) - h.subBits
	half := uint64(1) << (h.subBits - 1)
	return int(uint64(1)<<h.subBits + uint64(k-1)*half + (u>>k - half))
}

// bounds returns the lowest and highest value that land in bucket i.
func (h *Histogram) bounds(i int) (lo, hi int64) {
	full := 1 << h.subBits
	if i < full {
		return int64(i), int64(i)
	}
	half := full >> 1
	j := i - full
	k := uint(j/half) + 1
	m := uint64(half + j%half)
	lo = int64(m << k)
	hi = lo + int64(uint64(1)<<k) - 1
	return lo, hi
}

// Record adds one value. Negative values count as 0, values above MaxValue as
// MaxValue, so a clock hiccup cannot corrupt the histogram.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if v > MaxValue {
		v = MaxValue
	}
	h.counts[h.index(v)]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// RecordDuration records d in microseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(d.Microseconds()) }

// Merge adds every count of o into h.
func (h *Histogram) Merge(o *Histogram) error {
	if o == nil || o.total == 0 {
		return nil
	}
	if o.subBits != h.subBits {
		return ErrIncompatible
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
	return nil
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return h.total }

// Max is the largest recorded value (exact), 0 when empty.
func (h *Histogram) Max() int64 { return h.max }

// Min is the smallest recorded value (exact), 0 when empty.
func (h *Histogram) Min() int64 {
	if h.total == 0 {
		return 0
	}
	return h.min
}

// Mean is the exact arithmetic mean, 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return h.sum / float64(h.total)
}

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding the ceil(q*count)-th smallest value, clamped to the exact
// min and max so that Quantile(1) is the true maximum. 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := int64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			lo, hi := h.bounds(i)
			v := lo + (hi-lo)/2
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// QuantileDuration is Quantile for histograms recorded in microseconds.
func (h *Histogram) QuantileDuration(q float64) time.Duration {
	return time.Duration(h.Quantile(q)) * time.Microsecond
}

// Reset empties the histogram, keeping its memory.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.total, h.sum, h.max, h.min = 0, 0, 0, math.MaxInt64
}
