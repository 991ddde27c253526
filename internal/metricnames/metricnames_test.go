package metricnames

import "testing"

func TestExported(t *testing.T) {
	got := Exported()
	for _, n := range []string{
		"seckill_buy_outcomes_total", // a counter vector nobody incremented
		"seckill_buy_duration_seconds_bucket",
		"seckill_session_lookup_duration_seconds_count", // a plain histogram
		"seckill_fleet_instances",
		"seckill_redis_memory_used_bytes", // nested in metrics.Gauges
		"seckill_stock_invariant_ok",
		"seckill_scheduled_preheats_total", // registered by the preheat scheduler
	} {
		if !got[n] {
			t.Errorf("%s not found among %d names", n, len(got))
		}
	}
	for _, n := range []string{"seckill_buy_outcomes_total_bucket", "seckill_nope"} {
		if got[n] {
			t.Errorf("%s must not be exported", n)
		}
	}
	if u := Unknown(`rate(seckill_buy_outcomes_total[1m]) / seckill_made_up`, got); len(u) != 1 || u[0] != "seckill_made_up" {
		t.Errorf("Unknown = %v", u)
	}
}
