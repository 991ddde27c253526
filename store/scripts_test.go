package store_test

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
)

// scriptsHeld reports how many of the proxy's scripts srv holds compiled.
func scriptsHeld(t testing.TB, srv *redistest.Server) (held, all int) {
	t.Helper()
	args := []string{"SCRIPT", "EXISTS"}
	for _, body := range lua.All() {
		h := sha1.Sum([]byte(body))
		args = append(args, hex.EncodeToString(h[:]))
	}
	out, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("SCRIPT EXISTS: %v", err)
	}
	return strings.Count(out, "1"), len(args) - 2
}

// TestPreheatLoadsScripts: after a preheat, the first burst of buys on a
// Redis that never ran a script is all EVALSHA — not one EVAL, which is
// what every buy in flight sent when the reserve script was loaded by the
// first buy's NOSCRIPT (seed 002 §4.2: load scripts before the sale).
func TestPreheatLoadsScripts(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("load", 50, 2, 1)
	if held, _ := scriptsHeld(t, srv); held != 0 {
		t.Fatalf("a fresh redis-server holds %d scripts", held)
	}
	mustPreheat(t, s, a)
	if held, all := scriptsHeld(t, srv); held != all {
		t.Fatalf("after preheat redis holds %d of the %d scripts", held, all)
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	batchCalls0, batchBuyers0 := s.ReserveBatchStats()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Reserve(ctx(t), reserveReq(a, "u"+strconv.Itoa(i), 1)); err != nil {
				t.Errorf("reserve: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := redistest.ParseStat(srv.Info("commandstats", "cmdstat_eval"), "calls"); n != 0 {
		t.Fatalf("the first burst sent %d EVALs, want 0 (scripts loaded at preheat)", n)
	}
	// Redis decided at least one buyer per unit (the reserve gate keeps the
	// calls that could only say EMPTY from Redis, so not one per buyer; a
	// batched call decides several: decisions §28).
	batchCalls, batchBuyers := s.ReserveBatchStats()
	calls := evalCalls(srv)
	if n := calls - (batchCalls - batchCalls0) + (batchBuyers - batchBuyers0); n < 50 {
		t.Fatalf("buyers decided by EVALSHA = %d (%d calls, %d of them batches of %d buyers), want >= 50",
			n, calls, batchCalls-batchCalls0, batchBuyers-batchBuyers0)
	}
	wantStatus(t, s, a, 0, 50, 0)
}

// TestScriptsReloadedAfterRestart: a Redis that restarts (or a replica
// that takes over) holds no scripts; an instance that keeps them loaded
// loads them again as soon as it can reach Redis, before any buy asks.
func TestScriptsReloadedAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	s.KeepScriptsLoaded()
	full := func() bool { held, all := scriptsHeld(t, srv); return held == all }
	eventually(t, 5*time.Second, "scripts loaded at start", full)

	srv.Kill()
	time.Sleep(300 * time.Millisecond) // the instance sees its connection go, and retries meanwhile
	srv.Restart(t)                     // empty: a new redis-server holds no scripts (see TestPreheatLoadsScripts)
	eventually(t, 10*time.Second, "scripts loaded again after the restart", full)
}
