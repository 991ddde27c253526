package config

import (
	"strings"
	"testing"
	"time"
)

func inflightConfig(upstream string) string {
	return "upstream:\n  url: \"http://127.0.0.1:8081\"\n" + upstream + `activities:
  - id: a1
    start: 2026-01-01T00:00:00+08:00
    end: 2030-01-01T00:00:00+08:00
    skus: [{id: s1, stock: 1}]
`
}

func TestInflightDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte(inflightConfig("")))
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstream
	if u.MaxInflight != 0 || u.Overflow != OverflowQueue || u.OverflowWait != 0 || u.Adaptive || c.SpillsToQueue(&c.Activities[0]) {
		t.Fatalf("defaults: %+v; want no bound (today's behaviour)", u)
	}
	c, err = Parse("t.yaml", []byte(inflightConfig("  max_inflight: 50\n")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.SpillsToQueue(&c.Activities[0]) || !c.UsesQueue(&c.Activities[0]) || c.Upstream.MinInflight != 5 {
		t.Fatalf("max_inflight 50: %+v; want overflow queue, min_inflight 5", c.Upstream)
	}
	if got := c.Upstream.InflightTTL(); got != c.Upstream.Timeout+InflightLeaseMargin {
		t.Fatalf("lease %s", got)
	}
	c, err = Parse("t.yaml", []byte(inflightConfig("  max_inflight: 5\n  overflow: wait\n")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.OverflowWait != DefaultOverflowWait || c.SpillsToQueue(&c.Activities[0]) {
		t.Fatalf("overflow wait: %+v; want overflow_wait %s and no queue", c.Upstream, DefaultOverflowWait)
	}
	if _, err := Parse("t.yaml", []byte(inflightConfig("  max_inflight: 40\n  adaptive: true\n  min_inflight: 4\n  overflow: queue\n  overflow_wait: 20ms\n"))); err != nil {
		t.Fatalf("a full block: %v", err)
	}
	_ = time.Second
}

func TestInflightValidation(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"negative", "  max_inflight: -1\n", "t.yaml:3: upstream.max_inflight must be between 0 (no bound) and 100000, got -1"},
		{"huge", "  max_inflight: 1000000\n", "t.yaml:3: upstream.max_inflight must be between"},
		{"overflow alone", "  overflow: busy\n", "t.yaml:3: upstream.overflow has no effect without upstream.max_inflight"},
		{"adaptive alone", "  adaptive: true\n", "t.yaml:3: upstream.adaptive has no effect without upstream.max_inflight"},
		{"bad overflow", "  max_inflight: 4\n  overflow: drop\n", "t.yaml:4: upstream.overflow must be \"queue\", \"wait\" or \"busy\", got \"drop\""},
		{"wait with busy", "  max_inflight: 4\n  overflow: busy\n  overflow_wait: 1s\n", "t.yaml:5: upstream.overflow_wait is not used with overflow: busy"},
		{"zero wait", "  max_inflight: 4\n  overflow: wait\n  overflow_wait: 0s\n", "t.yaml:5: upstream.overflow_wait must be positive with overflow: wait"},
		{"long wait", "  max_inflight: 4\n  overflow: wait\n  overflow_wait: 1m\n", "t.yaml:5: upstream.overflow_wait must be between 0 and 30s, got 1m0s"},
		{"min without adaptive", "  max_inflight: 4\n  min_inflight: 2\n", "t.yaml:4: upstream.min_inflight is the adaptive limit's floor"},
		{"min above max", "  max_inflight: 4\n  adaptive: true\n  min_inflight: 5\n", "t.yaml:5: upstream.min_inflight must be between 1 and upstream.max_inflight (4), got 5"},
		{"min zero", "  max_inflight: 4\n  adaptive: true\n  min_inflight: 0\n", "t.yaml:5: upstream.min_inflight must be between 1"},
		{"type", "  max_inflight: lots\n", "t.yaml:3:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(inflightConfig(tt.give)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
