package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// The exceptions stream keeps what the reconciler found, once per piece of
// evidence, stays bounded at about exceptions_max entries however many
// findings come, and expires with the activity's keys.
func TestExceptionsStreamBoundedDedupedExpiring(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	expireAt := time.Now().Add(time.Hour).UnixMilli()
	at := time.UnixMilli(time.Now().UnixMilli()).UTC()
	e := store.Exception{Activity: "exa", Kind: "unsettled", Severity: "note", SKU: "sku1", Token: "exa.sku1.0.x",
		User: "o'brien, \"jr\"", Qty: 1, State: "pending", Shop: "unknown", At: at, Reason: "pending beyond pending_timeout, left"}
	n, err := s.RecordExceptions(ctx(t), "exa", []store.Exception{e, e}, 100, expireAt)
	if err != nil || n != 1 {
		t.Fatalf("record twice in one pass: %d %v", n, err)
	}
	// Same evidence in a later pass (a later time): not recorded again.
	again := e
	again.At = at.Add(time.Minute)
	if n, err := s.RecordExceptions(ctx(t), "exa", []store.Exception{again}, 100, expireAt); err != nil || n != 0 {
		t.Fatalf("same evidence again: %d %v", n, err)
	}
	// New evidence (the finding became an alert) is.
	alert := again
	alert.Severity = "alert"
	if n, err := s.RecordExceptions(ctx(t), "exa", []store.Exception{alert}, 100, expireAt); err != nil || n != 1 {
		t.Fatalf("new evidence: %d %v", n, err)
	}
	got, err := s.Exceptions(ctx(t), "exa")
	if err != nil || len(got) != 2 {
		t.Fatalf("read back: %+v %v", got, err)
	}
	g := got[0]
	g.ID = ""
	if g != e || got[1].Severity != "alert" || !got[1].At.Equal(alert.At) {
		t.Fatalf("read back:\n got %+v\nwant %+v", got, e)
	}

	// Bounded: 1,500 distinct findings with exceptions_max 100.
	var many []store.Exception
	for i := range 1500 {
		x := e
		x.Token = "exa.sku1.0.t" + strconv.Itoa(i)
		many = append(many, x)
	}
	if n, err := s.RecordExceptions(ctx(t), "exa", many, 100, expireAt); err != nil || n != len(many) {
		t.Fatalf("record many: %d %v", n, err)
	}
	xlen, _ := srv.Do("XLEN", s.ExceptionsKey("exa"))
	// MAXLEN ~ trims whole stream nodes (stream-node-max-entries, 100).
	if l, _ := strconv.Atoi(xlen); l < 100 || l > 200 {
		t.Fatalf("stream length %s, want 100..200", xlen)
	}
	seen, _ := srv.Do("HLEN", s.ExceptionsKey("exa")+":seen")
	if l, _ := strconv.Atoi(seen); l < 1 || l > 201 {
		t.Fatalf("fingerprints kept: %s, want at most 2 × 100 + 1", seen)
	}
	last, err := s.Exceptions(ctx(t), "exa")
	if err != nil || last[len(last)-1].Token != "exa.sku1.0.t1499" {
		t.Fatalf("newest kept: %v %v", len(last), err)
	}
	for _, k := range []string{s.ExceptionsKey("exa"), s.ExceptionsKey("exa") + ":seen"} {
		ms, _ := srv.Do("PEXPIRETIME", k)
		if v, _ := strconv.ParseInt(ms, 10, 64); v != expireAt {
			t.Fatalf("%s expires at %s, want %d", k, ms, expireAt)
		}
	}
}
