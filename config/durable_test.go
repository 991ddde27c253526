package config

import (
	"strings"
	"testing"
	"time"
)

func TestDurableWinnersConfig(t *testing.T) {
	c, err := Parse("t.yaml", []byte(trafficBase))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Redis.DurableWinners; d.Enabled() || d != (DurableWinners{}) {
		t.Fatalf("durable winners on without a block: %+v", d)
	}
	c, err = Parse("t.yaml", []byte(trafficBase+"redis:\n  durable_winners: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Redis.DurableWinners; !d.Enabled() || d.Replicas != 1 || d.Timeout != 50*time.Millisecond || d.OnTimeout != DurableRefuse || d.FSync {
		t.Fatalf("defaults not applied: %+v", d)
	}
	c, err = Parse("t.yaml", []byte(trafficBase+"redis:\n  durable_winners: {replicas: 2, timeout: 1s, on_timeout: forward, fsync: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Redis.DurableWinners; d.Replicas != 2 || d.Timeout != time.Second || d.OnTimeout != DurableForward || !d.FSync {
		t.Fatalf("explicit values lost: %+v", d)
	}
	c, err = Parse("t.yaml", []byte(trafficBase+"redis:\n  durable_winners: {replicas: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.DurableWinners.Enabled() {
		t.Fatal("replicas: 0 must switch durable winners off")
	}
	tests := []struct{ name, give, want string }{
		{"replicas", "redis:\n  durable_winners:\n    replicas: 17\n", "t.yaml:9: redis.durable_winners.replicas must be 0 (off) to 16, got 17"},
		{"negative", "redis:\n  durable_winners:\n    replicas: -1\n", "t.yaml:9: redis.durable_winners.replicas must be 0 (off) to 16"},
		{"timeout zero", "redis:\n  durable_winners:\n    timeout: 0s\n", "t.yaml:9: redis.durable_winners.timeout must be 1ms to 5s, got 0s"},
		{"timeout long", "redis:\n  durable_winners:\n    timeout: 6s\n", "t.yaml:9: redis.durable_winners.timeout must be 1ms to 5s, got 6s"},
		{"timeout fraction", "redis:\n  durable_winners:\n    timeout: 1500us\n", "t.yaml:9: redis.durable_winners.timeout must be whole milliseconds"},
		{"on_timeout", "redis:\n  durable_winners:\n    on_timeout: wait\n", `t.yaml:9: redis.durable_winners.on_timeout must be "refuse" or "forward", got "wait"`},
		{"unknown key", "redis:\n  durable_winners:\n    replica: 1\n", `t.yaml:9: unknown key "replica" in redis.durable_winners (did you mean "replicas"?)`},
		{"not a mapping", "redis:\n  durable_winners: yes\n", "t.yaml:8: redis.durable_winners: want a mapping"},
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
