package config

import (
	"strings"
	"testing"
)

func TestShadowMode(t *testing.T) {
	c, err := Parse("t.yaml", []byte(trafficBase+"    mode: shadow\n    shadow_headers: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &c.Activities[0]
	sh := a.Shadow()
	if !a.IsShadow() || !a.ShadowHeaders || sh == nil || a.ShadowOrSelf() != sh {
		t.Fatalf("shadow activity: %+v, copy %v", a, sh)
	}
	if sh.ID != "a1~shadow" || sh.Mode != ModeSync || sh.Shadow() != nil || len(sh.SKUs) != 1 || sh.SKUs[0].Stock != 1 ||
		sh.PerUserLimit != a.PerUserLimit || !sh.Start.Equal(a.Start) {
		t.Fatalf("shadow copy %+v", sh)
	}
	// Not shadow: no copy, the activity stands for itself.
	c, err = Parse("t.yaml", []byte(trafficBase))
	if err != nil {
		t.Fatal(err)
	}
	if a := &c.Activities[0]; a.Shadow() != nil || a.ShadowOrSelf() != a {
		t.Fatalf("sync activity has a shadow copy")
	}
	tests := []struct{ name, give, want string }{
		{"headers without shadow", "    mode: queue\n    shadow_headers: true\n", `t.yaml:8: activity "a1": shadow_headers applies only to mode: shadow (mode is "queue")`},
		{"headers default mode", "    shadow_headers: true\n", `t.yaml:7: activity "a1": shadow_headers applies only to mode: shadow (mode is "sync")`},
		{"headers not a bool", "    mode: shadow\n    shadow_headers: maybe\n", "t.yaml:8: activity.shadow_headers"},
		{"bad mode", "    mode: shadows\n", `t.yaml:7: activity "a1": mode must be "sync", "queue" or "shadow", got "shadows"`},
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
