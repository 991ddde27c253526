package admission

import (
	"net/netip"
	"testing"
)

// Blocklist IP entries: a bare IPv6 address blocks the per-IP limiter's
// client (its /64 by default), a CIDR prefix every address in it, IPv4
// (mapped or not) its own address; expired entries block nothing.
func TestBL12BlockedIPPrefixes(t *testing.T) {
	b := &blockSets{ip: map[netip.Prefix]int64{}}
	for _, s := range []string{"2001:db8:1:2::10", "2001:db8:ff00::/40", "192.0.2.7", "198.51.100.0/24", "::ffff:203.0.113.9", "2001:db8:9::1"} {
		p, ok := blockPrefix(s, 32, 64)
		if !ok {
			t.Fatalf("blockPrefix(%q) refused", s)
		}
		exp := int64(2000)
		if s == "2001:db8:9::1" {
			exp = 500 // expired at now 1000
		}
		b.ip[p] = exp
		if p.Addr().Is4() {
			b.bits4 = append(b.bits4, p.Bits())
		} else {
			b.bits6 = append(b.bits6, p.Bits())
		}
	}
	tests := []struct {
		ip   string
		want bool
	}{
		{"2001:db8:1:2::10", true},
		{"2001:db8:1:2::11", true}, // same /64
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", true},
		{"2001:db8:1:3::10", false},     // the next /64
		{"2001:db8:ff12:3456::1", true}, // inside the /40
		{"2001:db8:fe00::1", false},     // outside it
		{"192.0.2.7", true},
		{"::ffff:192.0.2.7", true}, // mapped
		{"192.0.2.8", false},
		{"198.51.100.200", true}, // the /24
		{"203.0.113.9", true},    // entered mapped
		{"2001:db8:9::1", false}, // expired
	}
	for _, tt := range tests {
		if got := b.blockedIP(netip.MustParseAddr(tt.ip), 1000); got != tt.want {
			t.Errorf("blockedIP(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
	if _, ok := blockPrefix("2001:db8::/129", 32, 64); ok {
		t.Errorf("a prefix longer than the address was accepted")
	}
}
