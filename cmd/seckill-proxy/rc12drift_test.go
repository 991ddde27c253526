package main

import (
	"os"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 12, the CLI against a config that drifted from the
// fleet's.
//
// The fleet sells from one Redis under key_prefix "seckill". The operator's
// copy of the file has drifted (another key_prefix: a staging copy, a
// rename half rolled out). Something looks wrong and they run `pause`:
// SetPaused (store/activity.go) writes "paused" into a meta hash of its own
// making, and the command says "kact: paused", exit 0, while every
// instance keeps selling. `status` with the same file shows "not
// preheated", exit 0. Nothing tells the operator the switch they pulled is
// not the sale's: the meta the kill switch writes holds no stock, no
// generation, no preheat record.
func TestRC12PauseWithDriftedPrefixSaysPaused(t *testing.T) {
	srv := redistest.Start(t)
	fleet := lifeConfig(t, srv.Addr, "http://127.0.0.1:9", 10, "")
	if code, _, errs := cliRun("preheat", "-c", fleet); code != 0 {
		t.Fatalf("preheat: %s", errs)
	}
	raw, err := os.ReadFile(fleet)
	if err != nil {
		t.Fatal(err)
	}
	drifted := fleet + ".drifted.yaml"
	if err := os.WriteFile(drifted, []byte(strings.Replace(string(raw), "timeout: 1s }", "timeout: 1s, key_prefix: sekill }", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("pause", "-c", drifted, "kact")
	t.Logf("pause with the drifted file: exit %d, stdout %q, stderr %q", code, out, errs)
	paused, _ := srv.Do("HGET", "seckill:{kact}:meta", "paused")
	if paused == "1" {
		t.Skip("the drifted file's prefix reached the sale's meta")
	}
	if code == 0 && !strings.Contains(strings.ToLower(out+errs), "not preheated") && !strings.Contains(strings.ToLower(out+errs), "warning") {
		t.Errorf("`pause kact` with a file whose key_prefix is not the fleet's: exit 0, %q, no warning; the sale is not paused (the fleet's meta has paused=%q)", strings.TrimSpace(out), paused)
	}
}
