package config

import (
	"strings"
	"testing"
	"time"
)

const trafficBase = `upstream: {url: "http://127.0.0.1:8081"}
activities:
  - id: a1
    start: 2026-01-01T00:00:00+08:00
    end: 2030-01-01T00:00:00+08:00
    skus: [{id: s1, stock: 1}]
`

func TestSignatureConfig(t *testing.T) {
	c, err := Parse("t.yaml", []byte(trafficBase+"    eligible_only: true\n    signature:\n      keys: {ios: APP_IOS_KEY}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sg := c.Activities[0].Signature
	if !sg.Enabled() || sg.Window != DefaultSignatureWindow || sg.KeyIDHeader != "X-App-Key-Id" || sg.NonceHeader != "X-App-Nonce" ||
		!c.Activities[0].EligibleOnly {
		t.Fatalf("defaults not applied: %+v", sg)
	}
	if c, _ := Parse("t.yaml", []byte(trafficBase)); c.Activities[0].Signature.Enabled() {
		t.Fatal("an activity without a signature block requires signatures")
	}
	tests := []struct {
		name, give, want string
	}{
		{"no keys", "    signature: {window: 1m}\n", "t.yaml:7: activity \"a1\": signature.keys needs at least one"},
		{"bad env", "    signature:\n      keys: {ios: 1BAD}\n", "t.yaml:8: activity \"a1\": signature.keys: \"1BAD\" is not a valid environment variable name"},
		{"bad id", "    signature:\n      keys: {\"a.b\": OK_ENV}\n", "t.yaml:8: activity \"a1\": signature.keys: key id \"a.b\""},
		{"window", "    signature:\n      keys: {ios: K}\n      window: 2h\n", "t.yaml:9: activity \"a1\": signature.window must be between"},
		{"header", "    signature:\n      keys: {ios: K}\n      nonce_header: \"a b\"\n", "t.yaml:9: activity \"a1\": signature: \"a b\" is not a valid header name"},
		{"unknown key", "    signature:\n      keyz: {ios: K}\n", "t.yaml:8: unknown key \"keyz\""},
		{"eligible type", "    eligible_only: maybe\n", "t.yaml:7: activity.eligible_only: want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(trafficBase+tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	_ = time.Second
}
