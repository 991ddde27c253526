package admission_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// A graceful stop (Drain) or Close while buys are held in a fair_start
// window answers every held buy 503 BUSY with Retry-After, at once and
// nothing reserved, and refuses any buy offered to the pen afterwards: no
// held buy is let on before its release moment (Close let every held buy
// go at once, seconds early, from a stopping instance: red-team finding,
// cmd/seckill-proxy TestRC12SigtermReleasesHeldFairStartBuysEarly).
func TestSD12DrainRefusesHeldFairStartBuys(t *testing.T) {
	for _, how := range []string{"Drain", "Close"} {
		t.Run(how, func(t *testing.T) {
			const stock, held = 10, 20
			srv := redistest.Start(t)
			cfg := realConfig(t, stock, 2)
			a := &cfg.Activities[0]
			// The window runs for the whole test: only the stop ends a hold.
			a.Start, a.FairStart, a.FairStartSpread = time.Now(), 10*time.Minute, time.Second
			cfg.Server.FairStartMaxHeld = 100
			in := startInstance(t, redisCfg([]string{srv.Addr}, false), cfg, time.Now)
			preheat(t, in.st, a)
			before := scriptCalls(srv)

			out := make(chan admission.Decision, held)
			for i := 0; i < held; i++ {
				go func(i int) { out <- in.pipe.Decide(bg(t), req(a, "held"+strconv.Itoa(i))) }(i)
			}
			eventually(t, 5*time.Second, "every buy held", func() bool { return testutil.ToFloat64(in.m.FairHeld) == held })
			if how == "Drain" {
				in.pipe.Drain()
			} else {
				in.pipe.Close()
			}
			for i := 0; i < held; i++ {
				select {
				case d := <-out:
					if d.Code != admission.Busy || d.RetryAfter <= 0 || d.Token.ID != "" {
						t.Errorf("held buy at %s: %v (retry after %v, token %q), want BUSY with Retry-After, nothing reserved", how, d.Code, d.RetryAfter, d.Token.ID)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%d of %d held buys still held 5 s after %s", held-i, held, how)
				}
			}
			if how == "Drain" {
				// Offered to the pen after the stop began: refused at once.
				if d := in.pipe.Decide(bg(t), req(a, "late")); d.Code != admission.Busy || d.RetryAfter <= 0 {
					t.Errorf("buy after Drain: %v (retry after %v), want BUSY with Retry-After", d.Code, d.RetryAfter)
				}
			}
			if n := testutil.ToFloat64(in.m.FairHeld); n != 0 {
				t.Errorf("seckill_fair_start_held %v after %s, want 0", n, how)
			}
			if n := testutil.ToFloat64(in.m.FairReleases.WithLabelValues("released")); n != 0 {
				t.Errorf("%v held buys let on after %s, want none", n, how)
			}
			if after := scriptCalls(srv); after != before {
				t.Errorf("%d script calls after %s: held buys went on to Redis", after-before, how)
			}
			st, err := in.st.Status(bg(t), a)
			if err != nil {
				t.Fatal(err)
			}
			if k := st.SKUs[0]; k.Remaining != stock || k.Pending != 0 || k.Confirmed != 0 {
				t.Errorf("after %s: remaining %d pending %d confirmed %d, want %d untouched", how, k.Remaining, k.Pending, k.Confirmed, stock)
			}
		})
	}
}
