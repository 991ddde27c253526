package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSoakCallsAreFound: every e2e.Soak call is one `make test-soak` runs.
// A test that calls it anywhere but its own top level (a subtest, a
// helper) would be skipped by `make test` and never picked by
// scripts/soak-tests.sh, so it would run nowhere.
func TestSoakCallsAreFound(t *testing.T) {
	out, err := exec.Command("../../scripts/soak-tests.sh").Output()
	if err != nil {
		t.Fatalf("scripts/soak-tests.sh: %v", err)
	}
	listed := map[string]bool{}
	for _, n := range strings.Split(strings.TrimSpace(string(out)), "|") {
		listed[n] = true
	}
	files, _ := filepath.Glob("*_test.go")
	calls := 0
	for _, f := range files {
		if f == "soak_test.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fn := ""
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "func ") {
				fn, _, _ = strings.Cut(strings.TrimPrefix(line, "func "), "(")
			}
			if !strings.Contains(line, "Soak(t)") || strings.HasPrefix(strings.TrimSpace(line), "//") || strings.Contains(line, "func ") {
				continue
			}
			calls++
			if line != "\tSoak(t)" && line != "\te2e.Soak(t)" || !strings.HasPrefix(fn, "Test") || !listed[fn] {
				t.Errorf("%s:%d: %q in %s: make test-soak would not run it (a Test function's top-level `Soak(t)` only)", f, i+1, line, fn)
			}
		}
	}
	if calls == 0 || calls != len(listed) {
		t.Errorf("%d Soak calls, %d tests listed by scripts/soak-tests.sh", calls, len(listed))
	}
}
