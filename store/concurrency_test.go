package store_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

type attempt struct {
	user string
	res  store.ReserveResult
	err  error
}

// spike has every user try `tries` times (round by round, shuffled within a
// round) from `workers` goroutines at once, and returns every answer.
func spike(t *testing.T, s *store.Store, a *config.Activity, users, tries, workers int) []attempt {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var jobs []attempt
	for try := 0; try < tries; try++ {
		round := make([]attempt, users)
		for i := range round {
			round[i].user = "user-" + strconv.Itoa(i)
		}
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		jobs = append(jobs, round...)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				jobs[i].res, jobs[i].err = s.Reserve(c, reserveReq(a, jobs[i].user, 1))
				cancel()
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			t.Fatalf("Reserve(%s): %v", j.user, j.err)
		}
	}
	return jobs
}

// checkSpike asserts exact winners and the per-user limit, and returns the
// winning tokens.
func checkSpike(t *testing.T, s *store.Store, a *config.Activity, jobs []attempt) []store.Token {
	t.Helper()
	stock := a.SKUs[0].Stock
	wins := map[string]int64{}
	var tokens []store.Token
	seen := map[store.Token]bool{}
	for _, j := range jobs {
		switch j.res.Code {
		case lua.OK:
			wins[j.user]++
			if seen[j.res.Token] {
				t.Fatalf("token %v issued twice", j.res.Token)
			}
			seen[j.res.Token] = true
			tokens = append(tokens, j.res.Token)
		case lua.Empty, lua.Pending:
		default:
			t.Fatalf("Reserve(%s) = %v, want OK, EMPTY or PENDING", j.user, j.res.Code)
		}
	}
	if int64(len(tokens)) != stock {
		t.Fatalf("%d units reserved, want exactly %d", len(tokens), stock)
	}
	for u, n := range wins {
		if n > a.PerUserLimit {
			t.Fatalf("user %s won %d units, limit %d", u, n, a.PerUserLimit)
		}
	}
	for _, j := range jobs {
		// Only a buyer holding a pending reservation can be told PENDING.
		if j.res.Code == lua.Pending && wins[j.user] == 0 {
			t.Fatalf("user %s got PENDING without a reservation", j.user)
		}
	}
	wantStatus(t, s, a, 0, stock, 0)
	return tokens
}

func confirmAll(t *testing.T, s *store.Store, a *config.Activity, tokens []store.Token) {
	t.Helper()
	for i, tok := range tokens {
		if code, err := s.Confirm(ctx(t), tok, a.Shards, "O-"+strconv.Itoa(i)); err != nil || code != lua.OK {
			t.Fatalf("Confirm(%v) = %v, %v", tok, code, err)
		}
	}
}

func TestConcurrentSpikeExactWinners(t *testing.T) {
	tests := []struct {
		name   string
		stock  int64
		shards int
		limit  int64
		users  int
	}{
		{name: "stock 100 over 4 shards, limit 1", stock: 100, shards: 4, limit: 1, users: 2000},
		{name: "stock 100 over 4 shards, limit 2", stock: 100, shards: 4, limit: 2, users: 2000},
		{name: "stock 7 over 8 shards, some empty", stock: 7, shards: 8, limit: 1, users: 500},
	}
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newActivity("act_c"+strconv.Itoa(i), tt.stock, tt.shards, tt.limit)
			mustPreheat(t, s, a)
			jobs := spike(t, s, a, tt.users, 3, 200)
			tokens := checkSpike(t, s, a, jobs)
			for _, tok := range tokens {
				rec, ok, err := s.Lookup(ctx(t), tok, a.Shards)
				if err != nil || !ok || rec.State != store.StatePending || store.HomeShard(rec.User, a.Shards) != tok.Shard {
					t.Fatalf("Lookup(%v) = %+v, %v, %v", tok, rec, ok, err)
				}
			}
			confirmAll(t, s, a, tokens)
			wantStatus(t, s, a, 0, 0, tt.stock)
			if n, err := s.SettleMoves(ctx(t), a, 0, time.Now()); err != nil || n != 0 {
				t.Fatalf("SettleMoves after the spike = %d, %v; want 0 (no move left behind)", n, err)
			}
			wantStatus(t, s, a, 0, 0, tt.stock)
		})
	}
}
