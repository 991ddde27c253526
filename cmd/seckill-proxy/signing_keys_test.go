package main

import (
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// TestSecretWarningsPerSigningKey: serve warns for each signing key whose
// variable is empty, naming the key; the current one's warning says
// winners will be refused.
func TestSecretWarningsPerSigningKey(t *testing.T) {
	t.Setenv("SECKILL_TEST_TOKEN", "t")
	t.Setenv("SECKILL_TEST_KEY_NEW", "")
	t.Setenv("SECKILL_TEST_KEY_OLD", "")
	cfg := &config.Config{Admin: config.Admin{TokenEnv: "SECKILL_TEST_TOKEN"}, Upstream: config.Upstream{SigningKeys: []config.SigningKey{
		{ID: "2026-12", SecretEnv: "SECKILL_TEST_KEY_NEW"}, {ID: "2026-11", SecretEnv: "SECKILL_TEST_KEY_OLD"}}}}
	got := secretWarnings(cfg)
	if len(got) != 2 || !strings.Contains(got[0], `$SECKILL_TEST_KEY_NEW (key "2026-12")`) || !strings.Contains(got[0], "refuse every winner") ||
		!strings.Contains(got[1], `$SECKILL_TEST_KEY_OLD (key "2026-11")`) {
		t.Fatalf("warnings: %q", got)
	}
	t.Setenv("SECKILL_TEST_KEY_NEW", "n")
	if got := secretWarnings(cfg); len(got) != 1 || !strings.Contains(got[0], "2026-11") {
		t.Fatalf("old key unset: %q", got)
	}
	t.Setenv("SECKILL_TEST_KEY_OLD", "o")
	if got := secretWarnings(cfg); len(got) != 0 {
		t.Fatalf("all set: %q", got)
	}
}
