package redisinfo

import "testing"

func TestParseAndDiff(t *testing.T) {
	before := Parse("# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n# Memory\r\nused_memory:1000\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=5,usec=5,usec_per_call=1.00\r\n")
	after := Parse("used_cpu_sys:2.5\nused_cpu_user:3.25\nused_memory:3000\n" +
		"cmdstat_evalsha:calls=1010,usec=6100,usec_per_call=6.04\ncmdstat_eval:calls=1,usec=50,usec_per_call=50\n")
	if before.ScriptCalls != 10 || before.CPUSeconds != 3.75 || before.UsedMemory != 1000 {
		t.Fatalf("before %+v", before)
	}
	d := Diff(before, after)
	if d.ScriptCalls != 1001 || d.CPUSeconds != 2 || d.UsedMemory != 3000 {
		t.Fatalf("delta %+v", d)
	}
	if want := 6050.0 / 1001; d.UsecPerCall != want {
		t.Fatalf("usec per call %v, want %v", d.UsecPerCall, want)
	}
}
