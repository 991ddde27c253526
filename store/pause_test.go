package store_test

import (
	"strconv"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// A pause before any preheat must not leave a meta key that lives forever;
// the preheat that follows sets the activity's own expiry and keeps the pause.
func TestPauseBeforePreheatExpires(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("early", 10, 2, 1)
	if err := s.SetPaused(ctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	ttl, err := srv.Do("PTTL", s.MetaKey(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.ParseInt(ttl, 10, 64); n <= 0 {
		t.Fatalf("meta PTTL after pause = %s, want an expiry", ttl)
	}
	mustPreheat(t, s, a)
	f, err := s.Flags(ctx(t), a.ID)
	if err != nil || !f.Paused || !f.Ready {
		t.Fatalf("after preheat flags = %+v, %v; want ready and still paused", f, err)
	}
}
