package lua_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Every embedded script is in All (so preflight loads it), under its file
// name.
func TestAllListsEveryScript(t *testing.T) {
	src, err := os.ReadFile("embed.go")
	if err != nil {
		t.Fatal(err)
	}
	all := lua.All()
	files := regexp.MustCompile(`//go:embed (\w+)\.lua`).FindAllStringSubmatch(string(src), -1)
	if len(files) == 0 {
		t.Fatal("no //go:embed lines in embed.go")
	}
	for _, f := range files {
		name := f[1]
		if name == "fence" || name == "giveback" {
			continue // a fragment: runs as part of the scripts that include it, listed in those forms
		}
		if all[name] == "" {
			t.Errorf("lua.All has no %q: add %s.lua there so preflight loads it", name, name)
		}
	}
	for name, s := range all {
		if strings.TrimSpace(s) == "" {
			t.Errorf("lua.All[%q] is empty", name)
		}
	}
}
