package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func TestRedisKilledRefusesFast(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	a := newActivity("act_k", 10, 2, 1)
	mustPreheat(t, s, a)
	tok := mustReserve(t, s, a, "u1", 1, lua.OK).Token

	srv.Kill()
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{name: "reserve", call: func() error { _, err := s.Reserve(c, reserveReq(a, "u2", 1)); return err }},
		{name: "confirm", call: func() error { _, err := s.Confirm(c, tok, a.Shards, ""); return err }},
		{name: "release", call: func() error { _, err := s.Release(c, tok, a.Shards, "", 0, true); return err }},
		{name: "ping", call: func() error { return s.Ping(c) }},
	}
	for _, tt := range calls {
		if err := tt.call(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with redis down = %v, want ErrUnavailable", tt.name, err)
		}
		if c.Err() != nil {
			t.Fatalf("%s took the whole 3 s deadline", tt.name)
		}
	}

	// Back up (empty, no persistence): the same Store reconnects by itself.
	srv.Restart(t)
	eventually(t, 5*time.Second, "reconnect", func() bool { return s.Ping(ctx(t)) == nil })
	mustReserve(t, s, a, "u2", 1, lua.NotReady)
}

func TestOpenWithRedisDown(t *testing.T) {
	port := redistest.FreePort(t)
	cfg := redisConfig([]string{"127.0.0.1:" + strconv.Itoa(port)}, false)
	if _, err := store.OpenNow(cfg, zap.NewNop()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("OpenNow with redis down = %v, want ErrUnavailable", err)
	}
	s := openStore(t, cfg)
	a := newActivity("act_od", 4, 2, 1)
	if _, err := s.Reserve(ctx(t), reserveReq(a, "u1", 1)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve before redis = %v, want ErrUnavailable", err)
	}
	if _, err := s.Preheat(ctx(t), a, false, time.Now()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Preheat before redis = %v, want ErrUnavailable", err)
	}
	if _, err := s.Client(); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Client before redis = %v, want ErrUnavailable", err)
	}

	redistest.StartOn(t, port)
	eventually(t, 5*time.Second, "connect after redis starts", func() bool { return s.Ping(ctx(t)) == nil })
	mustPreheat(t, s, a)
	mustReserve(t, s, a, "u1", 1, lua.OK)
	wantStatus(t, s, a, 3, 1, 0)
}

func TestOpenRejectsNoAddress(t *testing.T) {
	if _, err := store.Open(redisConfig(nil, false), zap.NewNop()); err == nil {
		t.Fatal("Open with no address succeeded")
	}
}
