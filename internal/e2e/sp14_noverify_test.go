package e2e

import (
	"fmt"
	"testing"
)

// TestSP14NoVerifyOddStatusSameVerdict: without verify.url, a shop answer
// that is not a status the proxy can judge (101 to a request that asked
// for no upgrade, a status below 100) is an unknown outcome in sync mode
// (proxy/buytransport.go: "what it did with the buy is unknown"); the
// queue worker must judge it the same, not release a unit the shop may
// have taken.
func TestSP14NoVerifyOddStatusSameVerdict(t *testing.T) {
	Soak(t)
	cases := []struct{ name, raw string }{
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"},
		{"099", "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n"},
	}
	for i, tc := range cases {
		for _, mode := range []string{"sync", "queue"} {
			t.Run(tc.name+"-"+mode, func(t *testing.T) {
				shop := sp14StartShop(t, sp14Raw(tc.raw, false))
				act := fmt.Sprintf("sp14nv%d%s", i, mode)
				p := sp14Proxy(t, shop, Activity{ID: act, Mode: mode, NoVerify: true})
				if mode == "queue" {
					p.StartQueue(t)
					sp14QueueBuy(t, p, shop, act, "victim", "pending")
				} else {
					r := sp14BuyReq(p, act, "victim", "")
					b, _ := shop.buyOf("victim")
					sp14Check(t, p, shop, sp14Case{name: tc.name, code: "UPSTREAM_TIMEOUT", status: 504, state: "pending"}, r, b)
				}
			})
		}
	}
}
