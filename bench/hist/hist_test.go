package hist

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the reference: the ceil(q*n)-th smallest value.
func exactQuantile(sorted []int64, q float64) int64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	if r < 1 {
		r = 1
	}
	return sorted[r-1]
}

func TestIndexBoundsRoundTrip(t *testing.T) {
	h := New(DefaultSubBits)
	for _, v := range []int64{0, 1, 255, 256, 257, 511, 512, 1000, 123456, 1 << 30, MaxValue} {
		i := h.index(v)
		lo, hi := h.bounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d [%d,%d]", v, i, lo, hi)
		}
		if v >= 256 && float64(hi-lo+1)/float64(lo) > 1.0/128+1e-9 {
			t.Fatalf("bucket [%d,%d] wider than 1/128", lo, hi)
		}
	}
	if got := h.index(MaxValue); got != len(h.counts)-1 {
		t.Fatalf("max value index %d, want last %d", got, len(h.counts)-1)
	}
}

func TestQuantilesAgainstExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		gen  func() int64
	}{
		{"uniform µs..s", func() int64 { return 1 + rng.Int64N(1_000_000) }},
		{"exponential", func() int64 { return int64(rng.ExpFloat64() * 2000) }},
		{"lognormal tail", func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5 + 7)) }},
		{"bimodal", func() int64 {
			if rng.IntN(100) < 99 {
				return 300 + rng.Int64N(100)
			}
			return 50_000 + rng.Int64N(10_000)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := New(DefaultSubBits)
			vals := make([]int64, 200_000)
			for i := range vals {
				vals[i] = tt.gen()
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
				want := exactQuantile(vals, q)
				got := h.Quantile(q)
				if diff := math.Abs(float64(got - want)); diff > 0.01*float64(want)+1 {
					t.Errorf("q%.3f = %d, exact %d (err %.2f%%)", q, got, want, 100*diff/float64(want))
				}
			}
			if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] {
				t.Errorf("min/max %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
			}
		})
	}
}

func TestMergeEqualsSingle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all := New(DefaultSubBits)
	parts := []*Histogram{New(DefaultSubBits), New(DefaultSubBits), New(DefaultSubBits)}
	for i := range 30_000 {
		v := rng.Int64N(5_000_000)
		all.Record(v)
		parts[i%3].Record(v)
	}
	merged := New(DefaultSubBits)
	for _, p := range parts {
		if err := merged.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	if merged.Count() != all.Count() || merged.Max() != all.Max() || merged.Min() != all.Min() {
		t.Fatalf("merged count/min/max differ")
	}
	for _, q := range []float64{0.1, 0.5, 0.99, 0.999} {
		if merged.Quantile(q) != all.Quantile(q) {
			t.Errorf("q%v: merged %d, single %d", q, merged.Quantile(q), all.Quantile(q))
		}
	}
	if err := merged.Merge(New(5)); err != nil {
		t.Errorf("merging an empty histogram of other precision: %v", err)
	}
	other := New(5)
	other.Record(1)
	if err := merged.Merge(other); !errors.Is(err, ErrIncompatible) {
		t.Errorf("merge of different precision: %v, want ErrIncompatible", err)
	}
}

func TestEdgeCases(t *testing.T) {
	h := New(DefaultSubBits)
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Min() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	h.Record(-5)
	h.Record(MaxValue + 100)
	if h.Min() != 0 || h.Max() != MaxValue {
		t.Fatalf("clamping: min %d max %d", h.Min(), h.Max())
	}
	h.Reset()
	if h.Count() != 0 {
		t.Fatal("reset kept counts")
	}
}
