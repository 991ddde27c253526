package config

import (
	"strings"
	"testing"
)

// Two routes whose last literals share a stem but differ after a "." are
// told apart by the proxy's matcher (a literal matches itself, or itself
// followed by "."+ext: "buy.json" never matches "buy.xml"), yet routeKey
// cuts both at their first "." and the validator refuses the second as a
// duplicate of the first.
func TestReviewDistinctExtRoutesAccepted(t *testing.T) {
	for _, tt := range []struct{ r1, r2 string }{
		{`{ path: "/shop/buy.json", sku_from: "query:sku" }`, `{ path: "/shop/buy.xml", sku_from: "query:sku" }`},
		{`{ path: "/api/seckill/v1.1", sku_from: "query:sku" }`, `{ path: "/api/seckill/v1.2", sku_from: "query:sku" }`},
	} {
		give := cliRTHead + "activities:\n" + cliRTAct("a1", tt.r1) + cliRTAct("a2", tt.r2)
		for _, e := range cliRTParse(t, give) {
			if strings.Contains(e.Msg, "already used") {
				t.Errorf("routes %s and %s are refused as one route: %s:%d: %s", tt.r1, tt.r2, e.File, e.Line, e.Msg)
			}
		}
	}
}
