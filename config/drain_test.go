package config

import "testing"

// server.drain_delay and server.shutdown_timeout: bounds, at their lines.
func TestDrainSettings(t *testing.T) {
	checkErrors(t, okAct+"server:\n  drain_delay: -1s\n", []wantErr{{9, "server.drain_delay must be between 0s and 5m, got -1s"}})
	checkErrors(t, okAct+"server:\n  drain_delay: 6m\n", []wantErr{{9, "server.drain_delay must be between 0s and 5m"}})
	checkErrors(t, okAct+"server:\n  shutdown_timeout: 2s\n", []wantErr{{9, "server.shutdown_timeout (2s) must be at least upstream.timeout (3s)"}})
	cfg, err := Parse("t.yaml", []byte(okAct+"server: {drain_delay: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.DrainDelay != 0 || cfg.Server.ShutdownTimeout != 2*cfg.Upstream.Timeout+5e9 {
		t.Errorf("server = %+v", cfg.Server)
	}
}

// server.max_clock_skew: default 1s, 0 turns the check off, bounds at its line.
func TestMaxClockSkew(t *testing.T) {
	checkErrors(t, okAct+"server:\n  max_clock_skew: -1s\n", []wantErr{{9, "server.max_clock_skew must be between 0s (no check) and 1m, got -1s"}})
	checkErrors(t, okAct+"server:\n  max_clock_skew: 2m\n", []wantErr{{9, "server.max_clock_skew must be between 0s (no check) and 1m, got 2m0s"}})
	cfg, err := Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.MaxClockSkew != DefaultMaxClockSkew {
		t.Errorf("default max_clock_skew = %s", cfg.Server.MaxClockSkew)
	}
	if cfg, err = Parse("t.yaml", []byte(okAct+"server: {max_clock_skew: 0s}\n")); err != nil || cfg.Server.MaxClockSkew != 0 {
		t.Errorf("max_clock_skew: 0s → %v, %v", cfg, err)
	}
}
