package store_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Winners decided in batches (reservebatch.lua): exact winners, nobody
// above the limit, every token once, stock adds up — with a user's three
// tries often in flight at once, so one batch holds the same user twice.
func TestBatchedReserveExactWinners(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	for i, shards := range []int{1, 3} {
		t.Run(strconv.Itoa(shards)+" shards", func(t *testing.T) {
			a := newActivity("act_b"+strconv.Itoa(i), 1500, shards, 2)
			mustPreheat(t, s, a)
			calls0, buyers0 := s.ReserveBatchStats()
			jobs := spike(t, s, a, 1000, 3, 200)
			tokens := checkSpike(t, s, a, jobs)
			calls, buyers := s.ReserveBatchStats()
			calls, buyers = calls-calls0, buyers-buyers0
			if calls == 0 || buyers < 2*calls {
				t.Fatalf("%d batched calls for %d buyers: the spike was not decided in batches", calls, buyers)
			}
			t.Logf("%d batched calls, %.1f buyers each", calls, float64(buyers)/float64(calls))
			confirmAll(t, s, a, tokens)
			wantStatus(t, s, a, 0, 0, a.SKUs[0].Stock)
		})
	}
}

// Buyers keep coming while Redis stalls, so batches are in Redis, waiting
// in the instance, and sent after their buyers gave up. Every buyer told
// "unavailable" holds nothing once the aborts ran, each of them wins at
// once afterwards, and stock adds up.
func TestBatchedReserveStallHoldsNothing(t *testing.T) {
	for _, tt := range stalls {
		t.Run(tt.name, func(t *testing.T) {
			srv, s := stallStore(t)
			const stock = 100000
			a := newActivity("act_bstall", stock, 1, 1)
			mustPreheat(t, s, a)
			warm(t, s, a, "warm")
			if _, err := s.SoldOut(ctx(t), a.ID, testSKU, a.Shards); err != nil {
				t.Fatal(err)
			}
			var (
				mu        sync.Mutex
				winners   int64
				refused   []string
				next      atomic.Int64
				stop      atomic.Bool
				wg        sync.WaitGroup
				calls0, _ = s.ReserveBatchStats()
			)
			for w := 0; w < 40; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						user := fmt.Sprintf("b%d", next.Add(1))
						res, err := s.Reserve(ctx(t), reserveReq(a, user, 1))
						mu.Lock()
						switch {
						case errors.Is(err, store.ErrUnavailable):
							refused = append(refused, user)
						case err != nil:
							t.Errorf("Reserve(%s): %v", user, err)
						case res.Code == lua.OK:
							winners++
						default:
							t.Errorf("Reserve(%s) = %v", user, res.Code)
						}
						mu.Unlock()
					}
				}()
			}
			time.Sleep(50 * time.Millisecond) // batches are flowing
			wait := tt.start(t, srv)
			wait()
			time.Sleep(50 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			if len(refused) == 0 {
				t.Fatal("no buyer was refused during the stall")
			}
			if calls, _ := s.ReserveBatchStats(); calls == calls0 {
				t.Fatal("no batched call: the test did not exercise reservebatch.lua")
			}
			// No reconciler: aborts settle what the stall left.
			eventually(t, 5*time.Second, "only the winners' units pending", func() bool {
				st := status(t, s, a)
				return st.OK && st.Pending == winners
			})
			wantStatus(t, s, a, stock-winners, winners, 0)
			for _, u := range refused {
				mustReserve(t, s, a, u, 1, lua.OK)
			}
			n := winners + int64(len(refused))
			wantStatus(t, s, a, stock-n, n, 0)
			t.Logf("%d winners, %d refused during the stall", winners, len(refused))
		})
	}
}

// One try each, more buyers than units, all at once: once every buyer is
// answered no unit is left anywhere. A batch tells many buyers of one shard
// EMPTY together and they go to the donors at once; when a steal moved half
// a donor (more than its buyer took), the others found the donors dry and
// heard SOLD_OUT while the surplus sat on their home shard (up to 8 units of
// 100 left, 1 round in 10). steal.lua now moves exactly what is needed.
func TestNoUnitLeftWhenAllAnswered(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	for i := range 8 {
		a := newActivity("act_left"+strconv.Itoa(i), 100, 4, 1)
		mustPreheat(t, s, a)
		jobs := spike(t, s, a, 500, 1, 500)
		won := 0
		for _, j := range jobs {
			if j.res.Code == lua.OK {
				won++
			}
		}
		if st := status(t, s, a); won != 100 || st.Remaining != 0 {
			t.Fatalf("round %d: %d winners of 500 buyers for 100 units, %d units left after every buyer was answered", i, won, st.Remaining)
		}
	}
}
