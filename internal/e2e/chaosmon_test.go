package e2e

import (
	"testing"
	"time"
)

// The chaos MONITOR reads every argument of a script call for the token
// ids it names, the last one too: its closing quote hid the last token of a
// batch reserve, so a reservation a zombie master ran for it (an allowed
// loss) was judged by its confirm alone, on the new master, and failed
// seed 328 as "lost after the failover" (decisions §63).
func TestChaosMonitorReadsTheLastArgument(t *testing.T) {
	m := &chaosMonitor{t: t, first: map[string]time.Time{}, calls: map[string][]chaosCall{}, confirmed: map[string]time.Time{}}
	m.line(`+1796652479.146447 [0 127.0.0.1:47118] "EVALSHA" "ef31" "7" "seckill:{ca:0}:stock:sku1" "1796652479122" "0" "u26" "1" "1" "sku1:sarDLi4a6aRRoutfLJOHHg" "u57" "1" "1" "sku1:tJGVgHs_iysuNv0aA_OShw"`, "127.0.0.1:1")
	for _, id := range []string{"sarDLi4a6aRRoutfLJOHHg", "tJGVgHs_iysuNv0aA_OShw"} {
		if at, ok := m.ran(id); !ok || at.UnixMicro() != 1796652479146447 {
			t.Errorf("%s: ran %v %v, want at the line's time", id, at, ok)
		}
		if cs := m.callsOf(id); len(cs) != 1 || cs[0].addr != "127.0.0.1:1" {
			t.Errorf("%s: calls %v", id, cs)
		}
	}
}
