package reservation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// TestReconcileReleasesOrphanedQueued: a queued reservation whose stream
// entry was never written (store.Reserve writes the entry after the reply,
// so a reserve that ran after its buyer was told STORE_UNAVAILABLE is never
// read by a worker; if its abort cannot land either, the record stays) is
// invisible to the workers. A reconcile pass reports it; with --repair it
// is released (reason unlisted), never sent, since Redis cannot tell it
// from a reserve whose buyer was told nothing is held; a fresh one (under
// a minute) is left to its own instance.
func TestReconcileReleasesOrphanedQueued(t *testing.T) {
	a := newActivity("orph", 5, 1)
	a.Mode = config.ModeQueue
	st, srv := setup(t, a)
	tok := reserve(t, st, a, "u1", time.Now().UnixMilli(), true)
	res, log := "seckill:{orph:0}:res", "seckill:{orph:0}:log"
	if n, _ := srv.Do("XLEN", log); n != "1" {
		t.Fatalf("XLEN after a queued reserve = %s, want 1 (the buyer's call enqueues it)", n)
	}
	// The crash: no entry, the record without one, as reserve.lua leaves it.
	rec, _ := srv.Do("HGET", res, tok.Field())
	id := rec[strings.LastIndexByte(rec, '|')+1:]
	for _, cmd := range [][]string{{"XDEL", log, id}, {"HSET", res, tok.Field(), strings.TrimSuffix(rec, id)},
		{"HINCRBY", "seckill:{orph:0}:stock:sku1", "u", "1"}} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	rc, _ := newReconciler(st)
	run := func(at time.Time, repair bool) []string {
		rep, err := rc.Run(tctx(t), []*config.Activity{a}, repair, at)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return rep.Activities[0].Notes
	}
	if notes := run(time.Now(), true); len(notes) != 0 {
		t.Errorf("a record a second old: %v, want nothing done yet", notes)
	}
	later := time.Now().Add(2 * time.Minute)
	if notes := strings.Join(run(later, false), "\n"); !strings.Contains(notes, "1 queued reservation(s) had no stream entry") {
		t.Errorf("report without repair: %q", notes)
	}
	if n, _ := srv.Do("XLEN", log); n != "0" {
		t.Fatalf("XLEN after a report = %s, want 0", n)
	}
	if notes := strings.Join(run(later, true), "\n"); !strings.Contains(notes, "released (reason unlisted)") {
		t.Errorf("repair: %q", notes)
	}
	if notes := run(later, true); len(notes) != 0 { // idempotent: nothing left to find
		t.Errorf("a second repair: %v, want nothing found", notes)
	}
	if n, _ := srv.Do("XLEN", log); n != "0" {
		t.Fatalf("XLEN after repair = %s, want 0 (never sent)", n)
	}
	if rec2, _ := srv.Do("HGET", res, tok.Field()); !strings.HasPrefix(rec2, "x|") || !strings.Contains(rec2, "|unlisted|") {
		t.Errorf("record after repair = %q, want released, reason unlisted", rec2)
	}
	if u, _ := srv.Do("HGET", "seckill:{orph:0}:stock:sku1", "u"); u != "0" {
		t.Errorf("entries still to come = %s, want 0", u)
	}
	if k := status(t, st, a); k.Pending != 0 || k.Remaining != 5 {
		t.Errorf("status %+v: want nothing pending, 5 remaining", k)
	}
	// The buyer may buy again: the release gave their unit back.
	reserve(t, st, a, "u1", time.Now().UnixMilli(), true)
}
