package admission_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// A buy held in a fair_start window is judged at release by the running
// config (Apply), not by the one it arrived with: a reload that drops the
// activity, switches its mode, drops its SKU or moves its window refuses
// it, and nothing is reserved.
func TestFairStartHeldBuyJudgedByReloadedConfig(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	base := func() *config.Config {
		cfg := testConfig(t, t0, noLimits())
		a := &cfg.Activities[0]
		a.Start, a.End = t0, t0.Add(time.Hour)
		a.FairStart, a.FairStartSpread = 200*time.Millisecond, 10*time.Millisecond
		a.SKUs = append(a.SKUs, config.SKU{ID: "sku2", Stock: 10})
		cfg.Server.FairStartMaxHeld = 100
		return cfg
	}
	for _, tc := range []struct {
		name string
		edit func(c *config.Config)
		want admission.Code
	}{
		{"unchanged", func(*config.Config) {}, admission.Admitted},
		{"gone", func(c *config.Config) { c.Activities[0].ID = "other" }, admission.Ended},
		{"mode", func(c *config.Config) { c.Activities[0].Mode = config.ModeQueue }, admission.NotReady},
		{"postponed", func(c *config.Config) {
			c.Activities[0].Start = t0.Add(time.Hour)
			c.Activities[0].End = t0.Add(2 * time.Hour)
		}, admission.NotStarted},
		{"ended", func(c *config.Config) { c.Activities[0].End = t0.Add(220 * time.Millisecond) }, admission.Ended},
		{"sku dropped", func(c *config.Config) { c.Activities[0].SKUs = c.Activities[0].SKUs[:1] }, admission.UnknownItem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0.Add(10 * time.Millisecond))
			fs := newFake()
			p := admission.New(fs, metrics.New(), zapNop(), clk.now)
			t.Cleanup(p.Close)
			old := base()
			p.Apply(old)
			done := make(chan admission.Decision, 1)
			go func() {
				done <- p.Decide(bg(t), &admission.Request{Activity: &old.Activities[0], SKU: "sku2", Qty: 1, User: "u1",
					IP: netip.MustParseAddr("10.0.0.1")})
			}()
			time.Sleep(50 * time.Millisecond) // held
			next := base()
			tc.edit(next)
			p.Apply(next)
			clk.add(300 * time.Millisecond) // past the spread (and a new end)
			var d admission.Decision
			select {
			case d = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("held buy never released")
			}
			if d.Code != tc.want {
				t.Errorf("released after the reload: %v, want %v", d.Code, tc.want)
			}
			if n := fs.reserves.Load(); tc.want != admission.Admitted && n != 0 {
				t.Errorf("%d reserve calls for a refused held buy", n)
			}
		})
	}
}
