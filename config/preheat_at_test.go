package config

import (
	"strings"
	"testing"
	"time"
)

func TestPreheatAt(t *testing.T) {
	c, err := Parse("t.yaml", []byte(trafficBase+"    preheat_at: -5m\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &c.Activities[0]
	at, ok := a.PreheatMoment()
	if !ok || a.PreheatAt != -5*time.Minute || !at.Equal(a.Start.Add(-5*time.Minute)) {
		t.Fatalf("preheat_at -5m: %s %v %v", a.PreheatAt, at, ok)
	}
	// Not set: not scheduled.
	c, err = Parse("t.yaml", []byte(trafficBase))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Activities[0].PreheatMoment(); ok || c.Activities[0].PreheatAt != 0 {
		t.Fatalf("no preheat_at: %s", c.Activities[0].PreheatAt)
	}
	tests := []struct {
		name, give, want string
	}{
		{"positive", "    preheat_at: 5m\n", `t.yaml:7: activity "a1": preheat_at must be negative (a time before start, e.g. -5m), got 5m0s`},
		{"zero", "    preheat_at: 0s\n", `t.yaml:7: activity "a1": preheat_at must be negative`},
		{"not a duration", "    preheat_at: 5\n", "t.yaml:7: activity.preheat_at: want a Go duration"},
		{"typo", "    preheat_at: -5 minutes\n", "t.yaml:7: activity.preheat_at: want a Go duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(trafficBase+tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
