package config

import (
	"slices"
	"strings"
	"testing"
)

// withKeys is okAct with upstream.signing_keys set to keys (block lines
// under "  signing_keys:", which is line 3).
func withKeys(keys string) string {
	return strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  signing_keys:\n"+keys, 1)
}

func TestSigningKeysConfig(t *testing.T) {
	t.Setenv("SIG_NEW", "new-secret")
	t.Setenv("SIG_OLD", "old-secret")
	t.Setenv(DefaultSigningSecretEnv, "legacy")
	c, err := Parse("t.yaml", []byte(withKeys("    - {id: \"2026-12\", secret_env: SIG_NEW}\n    - {id: \"2026-11\", secret_env: SIG_OLD}\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := []SigningKey{{ID: "2026-12", SecretEnv: "SIG_NEW"}, {ID: "2026-11", SecretEnv: "SIG_OLD"}}
	if got := c.SigningKeys(); !slices.Equal(got, want) || c.SigningSecret() != "new-secret" || c.Upstream.SigningSecretEnv != "" {
		t.Errorf("keys = %+v, secret %q, signing_secret_env %q", got, c.SigningSecret(), c.Upstream.SigningSecretEnv)
	}
	// Without signing_keys, signing_secret_env (default or set) is the one key "default".
	c, err = Parse("t.yaml", []byte(okAct))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SigningKeys(); !slices.Equal(got, []SigningKey{{ID: DefaultSigningKeyID, SecretEnv: DefaultSigningSecretEnv}}) || c.SigningSecret() != "legacy" {
		t.Errorf("legacy keys = %+v, secret %q", got, c.SigningSecret())
	}
}

func TestSigningKeysValidation(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		{"both forms", strings.Replace(withKeys("    - {id: a, secret_env: A}\n"), "  signing_keys:", "  signing_secret_env: S\n  signing_keys:", 1),
			[]wantErr{{3, "signing_secret_env and upstream.signing_keys are exclusive"}}},
		{"empty list", strings.Replace(okAct, "url: http://127.0.0.1:8081", "url: http://127.0.0.1:8081\n  signing_keys: []", 1),
			[]wantErr{{3, "upstream.signing_keys needs at least one key"}}},
		{"id missing", withKeys("    - {secret_env: A}\n"), []wantErr{{4, "key id is required"}}},
		{"id pattern", withKeys("    - {id: \"2026/12\", secret_env: A}\n    - {id: \"" + strings.Repeat("x", 33) + "\", secret_env: B}\n"),
			[]wantErr{{4, `key id "2026/12" must match [A-Za-z0-9._-]{1,32}`}, {5, "must match"}}},
		{"id twice", withKeys("    - id: k1\n      secret_env: A\n    - id: k1\n      secret_env: B\n"), []wantErr{{6, `key id "k1" is already listed at line 4`}}},
		{"env missing", withKeys("    - {id: k1}\n"), []wantErr{{4, `key "k1": secret_env is required`}}},
		{"env invalid", withKeys("    - {id: k1, secret_env: \"MY KEY\"}\n"), []wantErr{{4, `key "k1": secret_env "MY KEY" is not a valid environment variable name`}}},
		{"env twice", withKeys("    - id: k1\n      secret_env: A\n    - id: k2\n      secret_env: A\n"), []wantErr{{7, `key "k2": secret_env A is already used at line 5`}}},
		{"unknown key field", withKeys("    - {id: k1, secret_env: A, secret: x}\n"), []wantErr{{4, `unknown key "secret"`}}},
		{"legacy env invalid", upstream("url: http://x, signing_secret_env: \"A B\""), []wantErr{{1, "upstream.signing_secret_env"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, tt.give, tt.want)
		})
	}
}
