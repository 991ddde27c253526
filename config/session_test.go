package config

import (
	"reflect"
	"testing"
	"time"
)

func TestSessionDefaults(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(okAct+"identity:\n  user:\n    session: {cookie: JSESSIONID, url: \"http://shop/whoami\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Identity.User
	want := Source{Session: Session{Cookie: "JSESSIONID", URL: "http://shop/whoami", UserFrom: "json:/user_id",
		TTL: 30 * time.Second, NegativeTTL: 2 * time.Second, Timeout: 300 * time.Millisecond,
		MaxInFlight: DefaultSessionMaxInFlight, CacheSize: DefaultSessionCacheSize}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("identity.user = %+v, want %+v", got, want)
	}
	if cfg.Identity.Device.Session != (Session{}) {
		t.Errorf("device got session defaults: %+v", cfg.Identity.Device)
	}
}

func TestSessionValidation(t *testing.T) {
	user := okAct + "identity:\n  user:\n    session:\n"
	tests := []struct {
		name string
		give string
		want []wantErr
	}{
		{"session and header", okAct + "identity:\n  user:\n    header: X-User-Id\n    session: {cookie: s, url: \"http://x/w\"}\n",
			[]wantErr{{9, "identity.user: set exactly one of header, cookie, query, session or jwt"}}},
		{"no credential", user + "      url: http://x/w\n", []wantErr{{10, "identity.user.session: set cookie or header"}}},
		{"cookie and header", user + "      cookie: s\n      header: X-S\n      url: http://x/w\n", []wantErr{{10, "set exactly one of cookie or header"}}},
		{"bad cookie name", user + "      cookie: \"a b\"\n      url: http://x/w\n", []wantErr{{11, `"a b" is not a valid cookie name`}}},
		{"no url", user + "      cookie: s\n", []wantErr{{10, "identity.user.session.url is required"}}},
		{"bad url", user + "      cookie: s\n      url: \"ftp://x\"\n", []wantErr{{12, "identity.user.session.url must start with http://"}}},
		{"bad user_from", user + "      cookie: s\n      url: http://x/w\n      user_from: \"query:u\"\n", []wantErr{{13, "identity.user.session.user_from must be json:/pointer or header:NAME"}}},
		{"ttl zero", user + "      cookie: s\n      url: http://x/w\n      ttl: 0s\n", []wantErr{{13, "identity.user.session.ttl must be between 1ms and 24h0m0s, got 0s"}}},
		{"negative_ttl", user + "      cookie: s\n      url: http://x/w\n      negative_ttl: -1s\n", []wantErr{{13, "identity.user.session.negative_ttl must be between"}}},
		{"timeout", user + "      cookie: s\n      url: http://x/w\n      timeout: 1m\n", []wantErr{{13, "identity.user.session.timeout must be between 1ms and 10s, got 1m0s"}}},
		{"max_in_flight", user + "      cookie: s\n      url: http://x/w\n      max_in_flight: 0\n", []wantErr{{13, "identity.user.session.max_in_flight must be between 1 and"}}},
		{"cache_size", user + "      cookie: s\n      url: http://x/w\n      cache_size: 0\n", []wantErr{{13, "identity.user.session.cache_size must be between 1 and"}}},
		{"unknown key", user + "      cookie: s\n      url: http://x/w\n      tll: 1s\n", []wantErr{{13, `unknown key "tll" in identity.user.session (did you mean "ttl"?)`}}},
		{"device session", okAct + "identity:\n  device:\n    session: {cookie: s, url: \"http://x/w\"}\n", []wantErr{{10, "identity.device.session: a session look-up names the buyer only"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, tt.give, tt.want)
		})
	}
}

func TestSessionAccepts(t *testing.T) {
	give := okAct + "identity:\n  user:\n    session:\n      header: X-Session\n      url: \"https://shop.internal/whoami\"\n" +
		"      user_from: \"header:X-User\"\n      ttl: 1m\n      negative_ttl: 5s\n      timeout: 1s\n      max_in_flight: 8\n      cache_size: 1000\n"
	if errs := parseErrors(t, give); len(errs) > 0 {
		t.Errorf("unexpected errors:\n%s", (&Errors{List: errs}).Error())
	}
}
