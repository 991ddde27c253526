package e2e_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
)

// TestXForwardedForSeveralLines is issue 8 §5's measurement: behind a
// trusted balancer that appends its own X-Forwarded-For line, a client that
// sends its own line first and rotates it must still be limited as the one
// address the balancer saw. Every line counts, in order; the right-most
// untrusted address is the client; the shop gets one canonical line.
func TestXForwardedForSeveralLines(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 1, burst: 2 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	admitted := 0
	for i := 0; i < 20; i++ {
		r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy", Header: [][2]string{
			{"X-User-Id", "rot-" + strconv.Itoa(i)},
			{"X-Forwarded-For", "198.18.0." + strconv.Itoa(i+1)}, // the client's own, rotated
			{"X-Forwarded-For", "203.0.113.7"},                   // appended by the balancer
		}})
		switch r.Code {
		case "WIN":
			admitted++
		case "RATE_LIMITED":
		default:
			t.Fatalf("buy %d: %d %s", i, r.Status, r.Body)
		}
	}
	if admitted > 3 {
		t.Errorf("%d of 20 buys admitted from one address under per_ip {rate: 1, burst: 2}, want <= 3", admitted)
	}
	var xff []string
	for _, q := range f.shop.Requests() {
		if q.Header.Get("X-Seckill-Token") != "" && xff == nil {
			xff = q.Header.Values("X-Forwarded-For")
		}
	}
	want := "198.18.0.1, 203.0.113.7, 127.0.0.1"
	if len(xff) != 1 || xff[0] != want {
		t.Errorf("shop got X-Forwarded-For %q, want one line %q", xff, want)
	}

	// Ordinary traffic: one canonical line too.
	r := f.do(e2e.Req{Method: "GET", URI: "/catalog", Header: [][2]string{{"X-Forwarded-For", "10.9.9.9"}, {"X-Forwarded-For", "10.1.2.3, 10.4.5.6"}}})
	if e := echoOf(t, r); strings.Join(e.Header.Values("X-Forwarded-For"), "|") != "10.9.9.9, 10.1.2.3, 10.4.5.6, 127.0.0.1" {
		t.Errorf("pass-through X-Forwarded-For = %q", e.Header.Values("X-Forwarded-For"))
	}
}

// TestIPv6ClientsLimitedPerPrefix: an IPv6 client owns a whole /64, so
// rotating the interface id must not buy it new buckets (issue 8 §5).
func TestIPv6ClientsLimitedPerPrefix(t *testing.T) {
	f := newFixture(t, func(o *e2e.Options) {
		o.Limits = "{ per_ip: { rate: 1, burst: 2 }, per_device: { rate: 1000000, burst: 1000000 }, per_user: { rate: 1000000, burst: 1000000 } }"
	})
	admitted := 0
	for i := 0; i < 20; i++ {
		r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy", Header: [][2]string{
			{"X-User-Id", "v6-" + strconv.Itoa(i)},
			{"X-Forwarded-For", "2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16)},
		}})
		if r.Code == "WIN" {
			admitted++
		} else if r.Code != "RATE_LIMITED" {
			t.Fatalf("buy %d: %d %s", i, r.Status, r.Body)
		}
	}
	if admitted > 3 {
		t.Errorf("%d of 20 buys admitted from one /64, want <= 3", admitted)
	}
	// Another /64 has its own bucket.
	r := f.do(e2e.Req{URI: "/api/seckill/" + actOpen + "/" + e2e.SKU + "/buy", Header: [][2]string{
		{"X-User-Id", "v6-other"}, {"X-Forwarded-For", "2001:db8:1:3::1"}}})
	if r.Code != "WIN" {
		t.Errorf("a client of another /64: %d %s, want a win", r.Status, r.Body)
	}
}
