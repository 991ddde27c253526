package settlelog

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// TestRTCSettleLogOneLineASecond: a wave of confirms whose records are gone
// (a forced preheat under a sale) writes one line a second per kind, each
// naming the token's activity and SKU; other codes write nothing and cost
// no allocation.
func TestRTCSettleLogOneLineASecond(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	c := New(zap.New(core))
	for range 1000 {
		c.Settled("confirm", "act.sku9.0.AAAAAAAAAAAAAAAAAAAAAA", lua.Unknown)
		c.Settled("confirm", "act.sku9.0.AAAAAAAAAAAAAAAAAAAAAA", lua.Released)
	}
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines for 2000 confirms within a second, want 2 (one per kind)", n)
	}
	for _, e := range logs.All() {
		f := e.ContextMap()
		if f["activity"] != "act" || f["sku"] != "sku9" {
			t.Errorf("line %q: fields %v, want the token's activity and sku", e.Message, f)
		}
	}
	if a := testing.AllocsPerRun(100, func() { c.Settled("confirm", "act.sku9.0.AAAAAAAAAAAAAAAAAAAAAA", lua.OK) }); a != 0 {
		t.Errorf("an OK confirm allocates %v", a)
	}
	var zero *Confirms
	zero.Settled("confirm", "x", lua.Unknown) // no logger: nothing, no panic
}
