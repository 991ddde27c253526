package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Red team round 10, operator errors: seckill-bench's own flags.

// `seckill-bench shop --fail-rate 2` (or -1, NaN; `--timeout-rate 1.5`;
// `--latency -1s`) starts the shop as if the value made sense: a fraction
// above 1 or below 0 is silently clamped by the comparison with a random
// number, so a bench run meant to fail 2 % of orders (`--fail-rate 2`,
// percent for a fraction) fails every one, and the report blames the
// proxy. `--stock`, `--db` and `--log-format` already say what is wrong
// with exit 2. Want exit 2 with a message, before listening.
func TestRT10OpsBenchShopRejectsImpossibleRates(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second fault, cluster or memory run: the plain pass of make test runs it")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir, "./../seckill-bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build seckill-bench: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "seckill-bench")
	for _, args := range [][]string{
		{"--fail-rate", "2"},
		{"--timeout-rate", "1.5"},
		{"--latency", "-1s"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"shop", "--listen", "127.0.0.1:0"}, args...)...)
		out, _ := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("seckill-bench shop %v: the shop started (or exit %v), want exit 2 with a message\n%s", args, cmd.ProcessState, out)
		}
	}
}
