package proxy

import (
	"testing"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// The matcher tells /shop/buy.json and /shop/buy.xml apart (each request
// reaches its own activity), so refusing such a config is a false refusal.
func TestReviewExtRoutesAreDistinctToMatcher(t *testing.T) {
	routes := compileRoutes([]config.Activity{
		{ID: "a1", Route: config.Route{Method: "POST", Path: "/shop/buy.json"}},
		{ID: "a2", Route: config.Route{Method: "POST", Path: "/shop/buy.xml"}},
	})
	for path, want := range map[string]string{"/shop/buy.json": "a1", "/shop/buy.xml": "a2", "/api/seckill/v1.2": ""} {
		m, kind := routes.resolve([]byte("POST"), []byte(path))
		got := ""
		if kind == routeBuy && m.act != nil {
			got = m.act.ID
		}
		m.release()
		if got != want {
			t.Errorf("POST %s -> %q (kind %d), want %q", path, got, kind, want)
		}
	}
}
