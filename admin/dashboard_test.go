package admin

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestQuantileMs(t *testing.T) {
	u := func(f float64) *float64 { return &f }
	c := func(n uint64) *uint64 { return &n }
	h := &dto.Histogram{SampleCount: c(100), Bucket: []*dto.Bucket{
		{UpperBound: u(0.001), CumulativeCount: c(50)},
		{UpperBound: u(0.010), CumulativeCount: c(90)},
		{UpperBound: u(0.100), CumulativeCount: c(100)},
	}}
	tests := []struct {
		name string
		q    float64
		want float64 // ms
	}{
		{"median at the first bound", 0.5, 1},
		{"p70 halfway into the second bucket", 0.7, 5.5},
		{"p99 near the top of the last", 0.99, 91},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantileMs(h, tt.q); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("quantileMs(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
	if got := quantileMs(nil, 0.99); got != 0 {
		t.Fatalf("empty histogram: %v", got)
	}
}
