package demo

import (
	"strings"
	"testing"
	"time"
)

func TestConfigHasEverythingTheProxyNeeds(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("CST", 8*3600))
	c := Config("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3", "127.0.0.1:4", 100, now)
	for _, want := range []string{
		`listen: "127.0.0.1:1"`, `token_env: SECKILL_ADMIN_TOKEN`, `url: "http://127.0.0.1:3"`,
		`signing_secret_env: SECKILL_SIGNING_SECRET`, `addrs: ["127.0.0.1:4"]`, `start: 2026-12-01T09:59:00+08:00`,
		`end: 2026-12-01T11:00:00+08:00`, `{ id: "30021", stock: 100 }`, `per_user_limit: 1`,
		`url: "http://127.0.0.1:3/internal/orders?token={token}"`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "\t") {
		t.Error("YAML must not contain tabs")
	}
}
