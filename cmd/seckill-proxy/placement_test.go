package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestStatusPlacement (issue 11 §3): on a cluster, status shows the
// shards per master and warns once a reshard made them uneven; a forced
// preheat places them evenly again.
func TestStatusPlacement(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cfgPath := clusterLifeConfig(t, cl, 8)
	want(t, 0, "kact: created (1 SKUs, 8 units, 4 shards)", "preheat", "-c", cfgPath)
	out, errs := want(t, 0, "kact: 4 shards over 3 masters:", "status", "-c", cfgPath)
	if strings.Contains(errs, "warning") || strings.Contains(out, "not placed") {
		t.Fatalf("an even placement warned:\n%s\n%s", out, errs)
	}

	// Reshard: one shard's slot joins the master holding two of them.
	_, st := openStore(t, cfgPath)
	per := map[string][]int{}
	for i, sk := range st.SKUKeys("kact", "sku1", 4).Shards {
		m, err := cl.MasterFor(sk.Stock)
		if err != nil {
			t.Fatal(err)
		}
		per[m.Addr] = append(per[m.Addr], i)
	}
	var two, one string
	for addr, shards := range per {
		switch len(shards) {
		case 2:
			two = addr
		case 1:
			one = addr
		}
	}
	if two == "" || one == "" {
		t.Fatalf("4 shards on 3 masters: %v, want 2/1/1", per)
	}
	slot, _ := cl.Slot(st.SKUKeys("kact", "sku1", 4).Shards[per[one][0]].Stock)
	if err := cl.MoveSlot(slot, cl.Server(two)); err != nil {
		t.Fatal(err)
	}
	out, errs = want(t, 0, "warning: kact: its 4 shards sit unevenly on the 3 masters (3/1/0)", "status", "-c", cfgPath)
	t.Logf("status after the reshard:\n%s%s", out, errs)
	if !strings.Contains(out, two+"=3") {
		t.Fatalf("status does not show 3 shards on %s:\n%s", two, out)
	}
	code, out, _ := cliRun("status", "-c", cfgPath, "--json")
	var doc struct {
		Activities []store.ActivityStatus `json:"activities"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
	}
	if p := doc.Activities[0].Placement; p == nil || p.Even || p.PerMaster[two] != 3 || !p.Placed {
		t.Fatalf("status --json placement: %+v", p)
	}

	want(t, 0, "kact: overwritten", "preheat", "-c", cfgPath, "--force")
	out, errs = want(t, 0, "kact: 4 shards over 3 masters:", "status", "-c", cfgPath)
	if strings.Contains(errs, "warning") {
		t.Fatalf("re-placed, still warned:\n%s\n%s", out, errs)
	}
}
