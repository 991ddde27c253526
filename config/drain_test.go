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
