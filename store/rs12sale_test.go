package store_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestRS12PreheatRecordsSale: every preheat records in the meta what a
// restarted serve judges a file by (RecordedSales): the buy and bundle
// routes, mode, end and end + pending_timeout. A plain preheat finding the
// stock unchanged keeps the recorded routes (the running sale's: a file
// that moved them must not erase the old path) and moves the end only
// later, raising the registry's score with the keys' expiry; a forced
// preheat records anew. Shadow copies are left out; a meta without the
// record (an older build's preheat) is named unrecorded.
func TestRS12PreheatRecordsSale(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("rs12rec", 10, 2, 1)
	a.Mode, a.PendingTimeout = config.ModeSync, 3*time.Second
	a.Route = config.Route{Method: "POST", Path: "/rs12/{sku}/buy", CaseSensitive: true}
	a.BundleRoute = config.BundleRoute{Method: "PUT", Path: "/rs12/bundle"}
	mustPreheat(t, s, a)
	one := func(t *testing.T) config.Activity {
		t.Helper()
		sales, unrecorded, err := s.RecordedSales(ctx(t), time.Now())
		if err != nil || len(sales) != 1 || len(unrecorded) != 0 || sales[0].ID != a.ID {
			t.Fatalf("RecordedSales = %+v, %v, %v; want %s alone", sales, unrecorded, err, a.ID)
		}
		return sales[0]
	}
	got := one(t)
	if got.Route.Method != "POST" || got.Route.Path != "/rs12/{sku}/buy" || !got.Route.CaseSensitive ||
		got.BundleRoute != (config.BundleRoute{Method: "PUT", Path: "/rs12/bundle"}) || got.Mode != config.ModeSync ||
		got.End.UnixMilli() != a.End.UnixMilli() || got.PendingTimeout != 3*time.Second {
		t.Errorf("recorded after preheat: %+v", got)
	}

	// The same stock, a file with the route moved and the end an hour later.
	b := *a
	b.Route.Path, b.End = "/rs12moved/{sku}/buy", a.End.Add(time.Hour)
	if out, err := s.Preheat(ctx(t), &b, false, time.Now()); err != nil || out != store.PreheatUnchanged {
		t.Fatalf("plain preheat of the same stock: %v %v", out, err)
	}
	got = one(t)
	if got.Route.Path != "/rs12/{sku}/buy" || got.BundleRoute.Path != "/rs12/bundle" ||
		got.End.UnixMilli() != b.End.UnixMilli() || got.PendingTimeout != 3*time.Second {
		t.Errorf("recorded after a plain preheat (unchanged) with the route moved and the end later: %+v; want the old routes, the new end", got)
	}
	if sc, _ := srv.Do("ZSCORE", "seckill:{activities}:preheated", a.ID); sc != strconv.FormatInt(store.ExpireAt(&b), 10) {
		t.Errorf("registry score %s after the end moved, want the keys' new expiry %d", sc, store.ExpireAt(&b))
	}
	// An earlier end does not shorten the record.
	c := b
	c.End = a.End
	if _, err := s.Preheat(ctx(t), &c, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got = one(t); got.End.UnixMilli() != b.End.UnixMilli() {
		t.Errorf("recorded end %v after a preheat with an earlier end, want %v kept", got.End, b.End)
	}

	// Forced: a new record, without the bundle route.
	b.BundleRoute = config.BundleRoute{}
	if _, err := s.Preheat(ctx(t), &b, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got = one(t); got.Route.Path != "/rs12moved/{sku}/buy" || got.BundleRoute.Enabled() {
		t.Errorf("recorded after a forced preheat: %+v; want the new route, no bundle route", got)
	}

	// A shadow activity's copy is not a sale that opens.
	sh := newActivity("rs12sh", 5, 1, 1)
	sh.Mode, sh.Route = config.ModeShadow, config.Route{Method: "POST", Path: "/rs12sh/{sku}/buy"}
	cfg := &config.Config{Activities: []config.Activity{*sh}}
	cfg.PrepareShadows()
	mustPreheat(t, s, cfg.Activities[0].ShadowOrSelf())
	one(t)

	// An older build's preheat: no record.
	fields, err := srv.Do("HKEYS", s.MetaKey(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(fields) {
		if strings.HasPrefix(f, "sale_") {
			if _, err := srv.Do("HDEL", s.MetaKey(a.ID), f); err != nil {
				t.Fatal(err)
			}
		}
	}
	sales, unrecorded, err := s.RecordedSales(ctx(t), time.Now())
	if err != nil || len(sales) != 0 || len(unrecorded) != 1 || unrecorded[0] != a.ID {
		t.Errorf("RecordedSales with the record deleted = %+v, %v, %v; want %s unrecorded", sales, unrecorded, err, a.ID)
	}
	// A plain preheat (unchanged) records it then.
	mustPreheat(t, s, &b)
	if got = one(t); got.Route.Path != "/rs12moved/{sku}/buy" {
		t.Errorf("recorded after a plain preheat of an unrecorded meta: %+v", got)
	}
}
