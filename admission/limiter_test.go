package admission_test

import (
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
)

func TestLimiterBucket(t *testing.T) {
	l := admission.NewLimiter(10, 3, 1024)
	now := time.Unix(1000, 0).UnixNano()
	for i := 0; i < 3; i++ {
		if ok, _ := l.AllowString("k", now); !ok {
			t.Fatalf("request %d within burst refused", i)
		}
	}
	ok, wait := l.AllowString("k", now)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("4th = %v wait %v, want refused, wait 100ms", ok, wait)
	}
	if ok, _ := l.AllowString("k", now+int64(99*time.Millisecond)); ok {
		t.Fatal("allowed before the next token")
	}
	if ok, _ := l.AllowString("k", now+int64(100*time.Millisecond)); !ok {
		t.Fatal("refused after the next token was due")
	}
	if ok, _ := l.AllowString("other", now); !ok {
		t.Fatal("another key shares the bucket")
	}
	var nilL *admission.Limiter
	if ok, _ := nilL.AllowString("x", now); !ok {
		t.Fatal("a nil limiter (no limit configured) refused")
	}
}

// TestLimiterClockStepBack: a key used just before the host's clock steps
// back a minute is not refused for that minute: it is drained, as it was,
// and has its next token one interval later by the new clock.
func TestLimiterClockStepBack(t *testing.T) {
	l := admission.NewLimiter(10, 3, 1024)
	ahead := time.Unix(1060, 0).UnixNano()
	for {
		if ok, _ := l.AllowString("k", ahead); !ok {
			break
		}
	}
	now := time.Unix(1000, 0).UnixNano() // the clock put right
	ok, wait := l.AllowString("k", now)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("after the step back: %v wait %v, want refused for one interval (100ms), not a minute", ok, wait)
	}
	if ok, _ := l.AllowString("k", now+int64(100*time.Millisecond)); !ok {
		t.Fatal("refused one interval after the step back")
	}
}

// TestLimiterLateRequestNoBypass: requests read the clock before they
// take the stripe's lock, so one that read it earlier can be decided after
// one that read it later. A late request is not a clock step back: taken
// as one, its TAT would be clamped to its own (earlier) now + tau and the
// key forgiven the difference each time, a bypass a scalper gets for free
// from a busy host. Over one simulated second of a request every 1 ms, each
// followed by a copy that read the clock 5 ms earlier, the key is admitted
// at most rate*1s + burst times.
func TestLimiterLateRequestNoBypass(t *testing.T) {
	const rate, burst = 100, 1
	l := admission.NewLimiter(rate, burst, 1024)
	start := time.Unix(1000, 0).UnixNano()
	admitted := 0
	for ms := int64(0); ms < 1000; ms++ {
		now := start + ms*int64(time.Millisecond)
		for _, at := range []int64{now, now - int64(5*time.Millisecond)} {
			if ok, _ := l.AllowString("scalper", at); ok {
				admitted++
			}
		}
	}
	if bound := rate + burst; admitted > bound {
		t.Fatalf("admitted %d in one second, bound %d: late requests forgave debt", admitted, bound)
	}
}

// TestLimiterWaitAfterSmallStepBack: a step back under limLag holds the
// stripe's time still, and a refused request is decided at that time. Its
// wait is still counted from its own clock: a client told to retry after
// it must find the token there, not be refused again for the step.
func TestLimiterWaitAfterSmallStepBack(t *testing.T) {
	l := admission.NewLimiter(10, 1, 1024)
	before := time.Unix(1000, 0).UnixNano()
	if ok, _ := l.AllowString("k", before); !ok {
		t.Fatal("first request refused")
	}
	now := before - int64(500*time.Millisecond) // the clock stepped back 500 ms
	ok, wait := l.AllowString("k", now)
	if ok {
		t.Fatal("a drained key allowed after a step back of 500 ms")
	}
	if ok, again := l.AllowString("k", now+int64(wait)); !ok {
		t.Fatalf("told to wait %v after the step back, retried then and refused again (wait %v): the wait was counted from the stripe's time, not the request's", wait, again)
	}
}

// TestLimiterSetRateKeepsDebt: a fleet share changing (SetRate) keeps each
// key's state: a drained key stays refused, an untouched one stays full,
// and the new rate applies from then on.
func TestLimiterSetRateKeepsDebt(t *testing.T) {
	l := admission.NewLimiter(30, 6, 1024) // one of 1 instances
	now := time.Unix(1000, 0).UnixNano()
	for {
		if ok, _ := l.AllowString("hot", now); !ok {
			break
		}
	}
	l.SetRate(10, 2) // one of 3 instances: rate 30/3, burst 6/3
	if ok, _ := l.AllowString("hot", now); ok {
		t.Fatal("a drained key was given a fresh bucket by the rescale")
	}
	for i := 0; i < 2; i++ {
		if ok, _ := l.AllowString("cold", now); !ok {
			t.Fatalf("untouched key refused at %d within its new burst", i)
		}
	}
	if ok, _ := l.AllowString("cold", now); ok {
		t.Fatal("burst above the new share")
	}
	// One token per 100 ms at the new rate.
	if ok, _ := l.AllowString("cold", now+int64(100*time.Millisecond)); !ok {
		t.Fatal("refused at the new rate")
	}
	l.SetRate(10, 0.5) // a burst share below one token is one token
	if ok, _ := l.AllowString("new", now); !ok {
		t.Fatal("burst share < 1 refused a fresh key")
	}
}

// TestLimiterHotKeyUnderFlood: a flood of one-off keys several times the
// table's capacity never lets a hot key out of its bucket, and the table
// does not grow.
func TestLimiterHotKeyUnderFlood(t *testing.T) {
	const rate, burst, secs = 10, 20, 10
	l := admission.NewLimiter(rate, burst, 4096) // tiny table: 512 sets of 8
	hot := netip.MustParseAddr("203.0.113.7")
	now := time.Unix(1000, 0).UnixNano()
	admitted := 0
	oneOff := 0
	for ms := 0; ms < secs*1000; ms++ {
		t0 := now + int64(ms)*int64(time.Millisecond)
		for j := 0; j < 20; j++ { // 20,000 distinct keys per second
			oneOff++
			a := netip.AddrFrom4([4]byte{10, byte(oneOff >> 16), byte(oneOff >> 8), byte(oneOff)})
			if ok, _ := l.AllowAddr(a, t0); !ok {
				t.Fatalf("one-off key %v refused on its first request", a)
			}
		}
		if ok, _ := l.AllowAddr(hot, t0); ok {
			admitted++
		}
	}
	if max := rate*secs + burst; admitted > max {
		t.Fatalf("hot key admitted %d, want <= %d", admitted, max)
	}
	if admitted < rate*secs {
		t.Fatalf("hot key admitted %d, want about %d: its bucket is too strict", admitted, rate*secs+burst)
	}
	if l.Bytes() != 4096*16 {
		t.Fatalf("table is %d bytes, want fixed %d", l.Bytes(), 4096*16)
	}
}

// TestFloodThroughProxy is the acceptance test: one hot IP at
// 1,000 req/s among 200,000 distinct one-off IPs, all arriving through a
// trusted proxy's X-Forwarded-For, on an injected clock. The hot IP gets at
// most rate*seconds+burst (+1%), and the heap stays under a fixed bound.
func TestFloodThroughProxy(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := newClock(start)
	limits := config.Limits{PerIP: config.Rate{Rate: 10, Burst: 20}}
	cfg := testConfig(t, start, limits)
	h := newHandler(t, cfg, newFake(), clk.now)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	const secs, oneOffPerMs = 10, 20 // 10 s: 10,000 hot + 200,000 one-off requests
	var b buyCtx
	hotAdmitted, oneOff, oneOffRefused := 0, 0, 0
	for ms := 0; ms < secs*1000; ms++ {
		for j := 0; j < oneOffPerMs; j++ {
			oneOff++
			ip := "10." + strconv.Itoa(oneOff>>16&255) + "." + strconv.Itoa(oneOff>>8&255) + "." + strconv.Itoa(oneOff&255)
			b.prepare("/buy/act/sku1", "u"+strconv.Itoa(oneOff), ip)
			if h.run(&b) == 429 {
				oneOffRefused++
			}
		}
		b.prepare("/buy/act/sku1", "hot-"+strconv.Itoa(ms), "198.51.100.9, 203.0.113.7")
		switch code := h.run(&b); code {
		case 202:
			hotAdmitted++
		case 429:
			if ra := string(b.ctx.Response.Header.Peek("Retry-After")); ra != "1" {
				t.Fatalf("429 Retry-After = %q, want 1", ra)
			}
		default:
			t.Fatalf("hot request: status %d: %s", code, b.ctx.Response.Body())
		}
		clk.add(time.Millisecond)
	}
	if oneOff != 200_000 {
		t.Fatalf("sent %d one-off IPs", oneOff)
	}
	limit := float64(limits.PerIP.Rate*secs) + float64(limits.PerIP.Burst)
	if float64(hotAdmitted) > limit*1.01 {
		t.Fatalf("hot IP admitted %d, want <= %.0f (rate*seconds+burst +1%%)", hotAdmitted, limit*1.01)
	}
	if oneOffRefused != 0 {
		t.Fatalf("%d one-off IPs refused on their only request", oneOffRefused)
	}

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	const heapBound = 32 << 20
	t.Logf("hot admitted %d of 10000 (bound %.0f); heap %d MiB before, %d MiB after; admitted total %d",
		hotAdmitted, limit, before.HeapAlloc>>20, after.HeapAlloc>>20, h.admitted.Load())
	// The bound is on what the flood added (other tests of the package may
	// have left garbage of their own before this one ran).
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > heapBound {
		t.Fatalf("heap grew %d MiB during the flood, want < %d MiB", grew>>20, heapBound>>20)
	}
}

// A rate or burst whose interval or depth in ns leaves int64 must not wrap:
// 1e-12 per second became one token per nanosecond (no limit), and a deep
// bucket a burst of 1 (config fuzzing, FuzzLoad).
func TestLimiterExtremeRates(t *testing.T) {
	now := int64(1_800_000_000) * int64(time.Second)
	for _, tt := range []struct {
		name        string
		rate, burst float64
		allowed     int
	}{
		// One token a century: the bucket (capped at a century deep)
		// holds one.
		{"tiny rate", 1e-12, 2, 1},
		{"tiny fleet share", 0.001 / 1e6, 1, 1},
		{"deep bucket", 0.001, 1e9, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := admission.NewLimiter(1, 1, 16)
			l.SetRate(tt.rate, tt.burst)
			got := 0
			for i := 0; i < 1000; i++ {
				if ok, _ := l.AllowString("k", now+int64(i)); ok {
					got++
				}
			}
			if got != tt.allowed {
				t.Errorf("rate %g burst %g: %d of 1000 allowed at once, want %d", tt.rate, tt.burst, got, tt.allowed)
			}
		})
	}
}

// TestRTELimiterAllowAddrN: n tokens are taken at once or not at all, with
// the wait until all n are there; n beyond the burst costs the whole burst
// (a century's interval times n must not overflow).
func TestRTELimiterAllowAddrN(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	now := time.Unix(1000, 0).UnixNano()
	l := admission.NewLimiter(10, 5, 1024)
	if ok, _ := l.AllowAddrN(a, now, 4); !ok {
		t.Fatal("4 of a burst of 5 refused")
	}
	if ok, wait := l.AllowAddrN(a, now, 2); ok || wait != 100*time.Millisecond {
		t.Fatalf("2 with 1 left: %v wait %v, want refused, wait 100ms", ok, wait)
	}
	if ok, _ := l.AllowAddrN(a, now, 1); !ok {
		t.Fatal("the last token was taken by a refused request")
	}
	b := netip.MustParseAddr("192.0.2.2")
	if ok, _ := l.AllowAddrN(b, now, 50); !ok {
		t.Fatal("n beyond the burst on a full bucket refused: it costs the whole burst")
	}
	if ok, _ := l.AllowAddr(b, now); ok {
		t.Fatal("n beyond the burst left tokens")
	}
	slow := admission.NewLimiter(1e-12, 2, 1024) // an interval capped at a century
	if ok, _ := slow.AllowAddrN(a, now, 4); !ok {
		t.Fatal("n beyond the burst of a century's interval refused (overflow?)")
	}
	if ok, _ := slow.AllowAddrN(a, now, 4); ok {
		t.Fatal("a drained century bucket allowed")
	}
}
