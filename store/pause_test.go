package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
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

// Extending an activity's end after preheat: preheating again (stock
// unchanged) pushes every key's expiry out with it, never in.
func TestPreheatExtendsExpiry(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("longer", 10, 2, 1)
	mustPreheat(t, s, a)
	if r, err := s.Reserve(ctx(t), reserveReq(a, "u1", 1)); err != nil || r.Code != 1 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	pttl := func(key string) int64 {
		v, err := srv.Do("PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	k := s.SKUKeys(a.ID, testSKU, a.Shards).Shards[0]
	before := pttl(k.Stock)

	b := *a
	b.End = a.End.Add(48 * time.Hour)
	out, err := s.Preheat(ctx(t), &b, false, time.Now())
	if err != nil || out != store.PreheatUnchanged {
		t.Fatalf("preheat again: %v %v", out, err)
	}
	for _, key := range []string{s.MetaKey(a.ID), k.Stock} {
		if got := pttl(key); got < before+47*time.Hour.Milliseconds() {
			t.Errorf("%s PTTL %d ms after extending end by 48 h, was %d", key, got, before)
		}
	}
	// A shorter window never shortens a key's life.
	c := *a
	c.End = a.End.Add(-30 * time.Minute)
	if _, err := s.Preheat(ctx(t), &c, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := pttl(k.Stock); got < before+47*time.Hour.Milliseconds() {
		t.Errorf("PTTL shrank to %d ms", got)
	}
}

func TestSettingsWarnings(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		want  int
	}{
		{"defaults", nil, 0},
		{"noeviction with a limit", []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, 0},
		{"an evicting policy", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, tt.extra...)
			s := openStore(t, redisConfig([]string{srv.Addr}, false))
			if got := s.SettingsWarnings(ctx(t)); len(got) != tt.want {
				t.Fatalf("warnings %q, want %d", got, tt.want)
			}
		})
	}
}
