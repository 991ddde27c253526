package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 10, operator errors: a half-done preheat.

// A forced preheat (the rehearsal reset before the sale) fails midway:
// here the operator's Redis user may not HSET (an ACL missing a command;
// a Redis restart, a network cut or a timeout at the same point does the
// same). PreheatLocked (store/activity.go) wipes the old shards first and
// writes the meta hash last, so the meta still says ready=1 with the old
// stock while the shards are gone. The operator fixes the user and runs
// the plain `preheat` again, as README says ("idempotent when stock is
// already as configured"): it compares only the meta with the config
// (sameStock), answers "unchanged", exit 0, and loads nothing. The sale
// then has no stock keys (status: BROKEN, shard missing; buyers NOT_READY)
// though the operator was told all is loaded. Want: the retried preheat
// loads the stock (a preheat that wipes should first mark the meta not
// ready), or at least does not say "unchanged" with exit 0.
func TestRT10OpsHalfDoneForcedPreheatThenUnchanged(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := srv.Do("ACL", "SETUSER", "rt10nohset", "on", ">pw", "~*", "&*", "+@all", "-hset"); err != nil {
		t.Fatalf("acl: %v", err)
	}
	start := time.Now().Add(time.Hour)
	shop := "http://127.0.0.1:1"
	path := rt10opsConfig(t, "", srv.Addr, shop, "[{ id: s1, stock: 10 }]", start, "")
	want(t, 0, "rt10: created", "preheat", "-c", path)

	// The same file, as the user without HSET.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RT10OPS_REDIS_PW", "pw")
	limited := strings.Replace(string(raw), "timeout: 1s }", "timeout: 1s, username: rt10nohset, password_env: RT10OPS_REDIS_PW }", 1)
	lpath := path + ".limited.yaml"
	if err := os.WriteFile(lpath, []byte(limited), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("preheat", "-c", lpath, "--force")
	if code == 0 {
		t.Skipf("the forced preheat did not fail: %s%s", out, errs)
	}

	// The retry with the right user.
	code, out, errs = cliRun("preheat", "-c", path)
	scode, sout, serrs := cliRun("status", "-c", path)
	if scode != 0 {
		t.Errorf("a forced preheat failed midway, then `preheat` (retry): exit %d %q %q; status exit %d:\n%s%s",
			code, strings.TrimSpace(out), strings.TrimSpace(errs), scode, sout, serrs)
	}
}
