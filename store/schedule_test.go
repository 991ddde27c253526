package store_test

import (
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// PreheatRecord says whether, when and by whom stock was loaded; the
// scheduler's mark is written only on loaded stock and dropped by the next
// preheat.
func TestPreheatRecord(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("rec_act", 10, 2, 1)
	r, err := s.PreheatRecord(ctx(t), a.ID)
	if err != nil || r.Ready || !r.At.IsZero() || r.ScheduledBy != "" {
		t.Fatalf("before preheat: %+v %v", r, err)
	}
	// Not loaded: the mark writes nothing (and creates no meta key).
	if err := s.MarkScheduledPreheat(ctx(t), a.ID, "inst-1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.Do("EXISTS", s.MetaKey(a.ID)); n != "0" {
		t.Fatalf("mark created the meta key")
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	if _, err := s.Preheat(ctx(t), a, false, at); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkScheduledPreheat(ctx(t), a.ID, "inst-1"); err != nil {
		t.Fatal(err)
	}
	r, err = s.PreheatRecord(ctx(t), a.ID)
	if err != nil || !r.Ready || !r.At.Equal(at) || r.ScheduledBy != "inst-1" {
		t.Fatalf("after a scheduled preheat: %+v %v (want at %v)", r, err, at)
	}
	// Flags still read the same meta hash.
	if f, err := s.Flags(ctx(t), a.ID); err != nil || !f.Ready || f.Shards != 2 {
		t.Fatalf("flags: %+v %v", f, err)
	}
	if _, err := s.Preheat(ctx(t), a, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r, _ = s.PreheatRecord(ctx(t), a.ID); !r.Ready || r.ScheduledBy != "" {
		t.Fatalf("after a forced preheat by hand: %+v", r)
	}
}
