package config

import (
	"testing"
	"time"
)

func TestFairStartDefaults(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(okAct+"    fair_start: 500ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &cfg.Activities[0]
	if a.FairStart != 500*time.Millisecond || a.FairStartSpread != 500*time.Millisecond {
		t.Errorf("fair_start %s spread %s, want 500ms and 500ms (spread defaults to fair_start)", a.FairStart, a.FairStartSpread)
	}
	if cfg.Server.FairStartMaxHeld != DefaultFairStartMaxHeld {
		t.Errorf("server.fair_start_max_held = %d, want %d", cfg.Server.FairStartMaxHeld, DefaultFairStartMaxHeld)
	}
	cfg, err = Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	if a := &cfg.Activities[0]; a.FairStart != 0 || a.FairStartSpread != 0 {
		t.Errorf("without fair_start: fair_start %s spread %s, want both 0 (off)", a.FairStart, a.FairStartSpread)
	}
}

func TestFairStartValidation(t *testing.T) {
	short := head + "    start: 2026-01-01T00:00:00Z\n    end: 2026-01-01T00:00:01Z\n" + skus1
	for _, tc := range []struct {
		name, give string
		want       []wantErr
	}{
		{"negative", okAct + "    fair_start: -1s\n", []wantErr{{8, "fair_start must be between 0 (off) and 10s, got -1s"}}},
		{"too long", okAct + "    fair_start: 11s\n", []wantErr{{8, "fair_start must be between 0 (off) and 10s, got 11s"}}},
		{"spread alone", okAct + "    fair_start_spread: 100ms\n", []wantErr{{8, "fair_start_spread needs fair_start"}}},
		{"spread too short", okAct + "    fair_start: 500ms\n    fair_start_spread: 1ms\n", []wantErr{{9, "fair_start_spread must be between 10ms and 10s, got 1ms"}}},
		{"spread too long", okAct + "    fair_start: 500ms\n    fair_start_spread: 1m\n", []wantErr{{9, "fair_start_spread must be between 10ms and 10s, got 1m0s"}}},
		{"past the end", short + "    fair_start: 600ms\n", []wantErr{{8, "fair_start + fair_start_spread (1.2s) must end before the activity ends (1s after start)"}}},
		{"max held zero", okAct + "server:\n  fair_start_max_held: 0\n", []wantErr{{9, "server.fair_start_max_held must be between 1 and 10000000, got 0"}}},
		{"warm workers negative", okAct + "server:\n  warm_workers: -1\n", []wantErr{{9, "server.warm_workers must be between 0 (none) and 100000, got -1"}}},
		{"warm workers above max_conns", okAct + "server:\n  max_conns: 50\n  warm_workers: 60\n", []wantErr{{10, "server.warm_workers (60) cannot exceed server.max_conns (50)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, tc.give, tc.want) })
	}
}
