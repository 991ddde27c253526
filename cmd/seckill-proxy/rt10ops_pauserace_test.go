package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// Red team round 10, operator errors: two operators at once.

// One operator runs `preheat --force` (a rehearsal reset, or new stock
// before the sale) while another, seeing something wrong, runs `pause`.
// PreheatLocked (store/activity.go) reads the meta hash at its start and,
// after writing every shard, rewrites the meta with DEL + HSET carrying
// the "paused" value it read then: a pause that landed in between is
// silently undone. The second operator was told "rt10: paused" (exit 0),
// and the activity is on sale. The kill switch must survive a concurrent
// preheat (e.g. write the meta fields with HSET without DEL, leaving
// "paused" alone, or re-read it under the lease).
func TestRT10OpsPauseDuringForcedPreheatIsUndone(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Now().Add(time.Hour)
	var skus []string
	const nSKU = 150
	for i := 0; i < nSKU; i++ {
		skus = append(skus, fmt.Sprintf("{ id: k%03d, stock: 100 }", i))
	}
	path := rt10opsConfig(t, "", srv.Addr, "http://127.0.0.1:1", "["+strings.Join(skus, ", ")+"]", start, "")
	// 16 shards per SKU: the forced preheat below writes 2400 shards.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), "shards: 2\n", "shards: 16\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	want(t, 0, "rt10: created", "preheat", "-c", path)
	cfg, st := openStore(t, path)
	a := &cfg.Activities[0]
	before, err := st.Flags(context.Background(), "rt10")
	if err != nil || !before.Ready {
		t.Fatalf("flags: %+v %v", before, err)
	}
	last := st.SKUKeys("rt10", a.SKUs[nSKU-1].ID, a.Shards).Shards[a.Shards-1].Stock

	done := make(chan error, 1)
	go func() {
		_, err := st.Preheat(context.Background(), a, true, time.Now())
		done <- err
	}()
	// Wait until the forced preheat has wiped the old shards (it has read
	// the meta by then) and pause while it writes the new ones.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := srv.Do("EXISTS", last)
		if err == nil && n == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forced preheat never wiped the last shard")
		}
		time.Sleep(time.Millisecond)
	}
	want(t, 0, "rt10: paused", "pause", "-c", path, "rt10")
	ver, _ := srv.Do("HGET", st.MetaKey("rt10"), "ver")
	if ver != fmt.Sprint(before.Ver) {
		t.Skipf("the preheat finished before the pause (ver %s → %s): no overlap this run", fmt.Sprint(before.Ver), ver)
	}
	if err := <-done; err != nil {
		t.Fatalf("forced preheat: %v", err)
	}
	paused, _ := srv.Do("HGET", st.MetaKey("rt10"), "paused")
	if paused != "1" {
		t.Errorf("`pause` (exit 0, \"rt10: paused\") ran during a forced preheat; after it the meta says paused=%q: the kill switch was silently undone", paused)
	}
}
