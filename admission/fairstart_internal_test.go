package admission

import (
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// tcpPair returns both ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// wrapped embeds the connection as fasthttp's perIPConn does.
type wrapped struct {
	net.Conn
	n int
}

func TestConnGone(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		server, client := tcpPair(t)
		var c net.Conn = server
		if wrap {
			c = &wrapped{Conn: server}
		}
		if connGone(c) {
			t.Fatalf("wrap %v: open connection reported gone", wrap)
		}
		// A pipelined byte waiting: still there, and the byte is not eaten.
		if _, err := client.Write([]byte("G")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // let it cross loopback
		if connGone(c) {
			t.Fatalf("wrap %v: connection with unread bytes reported gone", wrap)
		}
		buf := make([]byte, 1)
		_ = server.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := server.Read(buf); n != 1 || buf[0] != 'G' {
			t.Fatalf("wrap %v: the peeked byte was consumed: read %d %q %v", wrap, n, buf[:n], err)
		}
		_ = server.SetReadDeadline(time.Time{})
		client.Close()
		deadline := time.Now().Add(5 * time.Second)
		for !connGone(c) {
			if time.Now().After(deadline) {
				t.Fatalf("wrap %v: closed connection never reported gone", wrap)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if connGone(nil) {
		t.Errorf("nil connection reported gone")
	}
}

// Slots open earliest first and only once the clock reaches them; the pen
// never holds more than max.
func TestFairPenSlots(t *testing.T) {
	m := metrics.New()
	var nowNs atomic.Int64
	nowNs.Store(time.Unix(1000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, nowNs.Load()) }
	f := newFairPen(clock, m.FairHeld, m.FairReleases)
	defer f.close()
	f.max.Store(2)
	if !f.enter() || !f.enter() || f.enter() {
		t.Fatalf("pen of 2 let in a third")
	}
	f.leave()
	f.leave()
	a := &config.Activity{Start: time.Unix(1000, 0), FairStart: 500 * time.Millisecond, FairStartSpread: 500 * time.Millisecond}
	for i := range 10000 {
		ms := f.releaseAt(a, strconv.Itoa(i), "")
		if ms < 1000_500 || ms > 1001_000 {
			t.Fatalf("release at %d ms, want within [1000500, 1001000]", ms)
		}
	}
	early, late := f.slot(1000_600), f.slot(1000_800)
	if f.slot(1000_600) != early {
		t.Fatalf("one ms, two channels")
	}
	select {
	case <-early:
		t.Fatalf("slot released before its time")
	case <-time.After(20 * time.Millisecond):
	}
	nowNs.Store(time.Unix(1000, 700*int64(time.Millisecond)).UnixNano())
	select {
	case <-early:
	case <-time.After(5 * time.Second):
		t.Fatalf("slot not released once due")
	}
	select {
	case <-late:
		t.Fatalf("later slot released early")
	case <-time.After(20 * time.Millisecond):
	}
	f.close()
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatalf("close left a slot shut")
	}
}

// One moment per buyer: every copy of a buyer's buy, on every instance
// (pens with the fleet's key), is let on at the same millisecond, and the
// moments of many buyers cover the spread evenly; another key gives other
// moments (a buyer without the secret cannot compute theirs).
func TestFairMomentPerBuyer(t *testing.T) {
	m := metrics.New()
	clock := func() time.Time { return time.Unix(1000, 0) }
	a := &config.Activity{ID: "act", Start: time.Unix(1000, 0), FairStart: 500 * time.Millisecond, FairStartSpread: 500 * time.Millisecond}
	f1, f2, other := newFairPen(clock, m.FairHeld, m.FairReleases), newFairPen(clock, m.FairHeld, m.FairReleases), newFairPen(clock, m.FairHeld, m.FairReleases)
	defer f1.close()
	defer f2.close()
	defer other.close()
	f1.setKey("fleet secret")
	f2.setKey("fleet secret")
	other.setKey("another secret")
	var buckets [10]int
	differ := 0
	const buyers = 20000
	for i := range buyers {
		who := "u:" + strconv.Itoa(i)
		ms := f1.releaseAt(a, who, "")
		if ms2 := f2.releaseAt(a, who, ""); ms2 != ms {
			t.Fatalf("buyer %s: instance 1 lets on at %d, instance 2 at %d", who, ms, ms2)
		}
		if f1.releaseAt(a, who, "") != ms {
			t.Fatalf("buyer %s: two copies, two moments", who)
		}
		if other.releaseAt(a, who, "") != ms {
			differ++
		}
		if ms < 1000_500 || ms > 1001_000 {
			t.Fatalf("release at %d ms, want within [1000500, 1001000]", ms)
		}
		buckets[min((ms-1000_500)/50, 9)]++
	}
	for i, n := range buckets {
		// 2,000 expected per 50 ms bucket; 6 sd is about ±270.
		if n < 1700 || n > 2300 {
			t.Errorf("bucket %d (of 50 ms) holds %d of %d buyers, want about 2000: %v", i, n, buyers, buckets)
		}
	}
	if differ < buyers*9/10 {
		t.Errorf("another key gave another moment to only %d of %d buyers", differ, buyers)
	}
}

// With no user on the route, a held buy's moment follows its client as the
// per-IP limiter names it: an IPv6 client rotating its interface id within
// its /64 draws the same moment, not a fresh one per address.
func TestFairBuyerCutsIPv6ToItsPrefix(t *testing.T) {
	l := &limiters{cfg: config.Limits{IPv4Prefix: 32, IPv6Prefix: 64}}
	a := fairBuyer(&Request{IP: netip.MustParseAddr("2001:db8:1:2::1")}, l)
	b := fairBuyer(&Request{IP: netip.MustParseAddr("2001:db8:1:2:dead:beef:0:7")}, l)
	c := fairBuyer(&Request{IP: netip.MustParseAddr("2001:db8:1:3::1")}, l)
	if a != b {
		t.Errorf("two addresses of one /64: %q and %q", a, b)
	}
	if a == c {
		t.Errorf("two /64s share a moment: %q", a)
	}
	if u := fairBuyer(&Request{User: "alice", IP: netip.MustParseAddr("2001:db8:1:2::1")}, l); u != "u:alice" {
		t.Errorf("a user's buy is named by the user: %q", u)
	}
	if v4 := fairBuyer(&Request{IP: netip.MustParseAddr("192.0.2.7")}, l); v4 != "a:192.0.2.7" {
		t.Errorf("IPv4 at /32: %q", v4)
	}
}

// TestRTFFairMomentKeyedBySeed: with the activity's preheat seed, pens
// holding different signing keys (a rotation half done across a fleet,
// or a reload inside the window) give a buyer one moment; another seed
// gives other moments.
func TestRTFFairMomentKeyedBySeed(t *testing.T) {
	m := metrics.New()
	clock := func() time.Time { return time.Unix(1000, 0) }
	a := &config.Activity{ID: "act", Start: time.Unix(1000, 0), FairStart: 500 * time.Millisecond, FairStartSpread: 500 * time.Millisecond}
	oldK, newK := newFairPen(clock, m.FairHeld, m.FairReleases), newFairPen(clock, m.FairHeld, m.FairReleases)
	defer oldK.close()
	defer newK.close()
	oldK.setKey("old secret")
	newK.setKey("new secret")
	differ := 0
	for i := range 1000 {
		who := "u:" + strconv.Itoa(i)
		ms := oldK.releaseAt(a, who, "seed-1")
		if ms2 := newK.releaseAt(a, who, "seed-1"); ms2 != ms {
			t.Fatalf("buyer %s: %d with the old signing key, %d with the new, one seed", who, ms, ms2)
		}
		if oldK.releaseAt(a, who, "seed-2") != ms {
			differ++
		}
	}
	if differ < 900 {
		t.Errorf("another seed moved only %d of 1000 buyers' moments", differ)
	}
}
