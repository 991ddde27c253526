package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// downStore is a TrafficStore whose Redis is unreachable: every lease
// fetch fails after a short while.
type downStore struct{ TrafficStore }

func (downStore) LeaseAdmission(context.Context, string, float64, int, int64) (int64, time.Duration, error) {
	time.Sleep(5 * time.Millisecond)
	return 0, 0, errors.New("redis unavailable")
}

// TestLeaseRedisDownIsNotBusy: with Redis down, requests that waited for
// another request's failed fetch answer store-down like the fetcher, never
// BUSY (the admission rate was not exceeded). Seen in the cluster failover
// test: a few buys answered 503 BUSY while a master was down.
func TestLeaseRedisDownIsNotBusy(t *testing.T) {
	var l lease
	l.init(config.Rate{Rate: 1000000, Burst: 1000000})
	now := time.Now
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[leaseResult]int{}
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				r, _ := l.take(context.Background(), downStore{}, "a", now)
				mu.Lock()
				got[r]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got[leaseDown] != 64*20 {
		t.Fatalf("results with Redis down: %v (down=%d, busy=%d); want every one down", got, leaseDown, leaseBusy)
	}
}

// flakyStore grants every lease in full unless down; it records the sizes asked.
type flakyStore struct {
	TrafficStore
	down  bool
	wants []int64
}

func (f *flakyStore) LeaseAdmission(_ context.Context, _ string, _ float64, _ int, want int64) (int64, time.Duration, error) {
	f.wants = append(f.wants, want)
	if f.down {
		return 0, 0, errors.New("redis unavailable")
	}
	return want, 0, nil
}

// TestLeaseBatchSurvivesOutage: failed fetches during a Redis outage do not
// count as a lease spent slowly; the batch is not halved down to one token
// per fetch, which after the outage turned concurrent buyers into BUSY.
func TestLeaseBatchSurvivesOutage(t *testing.T) {
	var l lease
	l.init(config.Rate{Rate: 1000000, Burst: 1000000})
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	f := &flakyStore{}
	if r, _ := l.take(context.Background(), f, "a", now); r != leaseOKFetched {
		t.Fatalf("first take = %v", r)
	}
	first := f.wants[0]
	f.down = true
	for i := 0; i < 30; i++ {
		clock = clock.Add(2 * leaseTTL) // the lease expired: every take fetches
		if r, _ := l.take(context.Background(), f, "a", now); r != leaseDown {
			t.Fatalf("take with Redis down = %v", r)
		}
	}
	f.down = false
	clock = clock.Add(2 * leaseTTL)
	if r, _ := l.take(context.Background(), f, "a", now); r != leaseOKFetched {
		t.Fatalf("take after the outage = %v", r)
	}
	if after := f.wants[len(f.wants)-1]; after < first/2 {
		t.Fatalf("first lease asked %d, the one after 30 failed fetches %d (asks: %v)", first, after, f.wants)
	}
}

// shortStore is a fleet bucket that is empty: nothing granted, one token
// in wait.
type shortStore struct {
	TrafficStore
	asked int
	wait  time.Duration
}

func (s *shortStore) LeaseAdmission(context.Context, string, float64, int, int64) (int64, time.Duration, error) {
	s.asked++
	return 0, s.wait, nil
}

// TestLeaseClockStepBack: a drained fleet bucket seen just before the
// host's clock steps back a minute does not hold the activity BUSY on this
// instance for that minute: the bucket is asked again once its wait is
// over by the new clock.
func TestLeaseClockStepBack(t *testing.T) {
	var l lease
	l.init(config.Rate{Rate: 10, Burst: 10})
	st := &shortStore{wait: 100 * time.Millisecond}
	base := time.Unix(1000, 0)
	at := func(d time.Duration) func() time.Time { return func() time.Time { return base.Add(d) } }
	if r, _ := l.take(context.Background(), st, "a", at(time.Minute)); r != leaseBusy || st.asked != 1 {
		t.Fatalf("empty bucket, clock a minute ahead: %v, asked %d", r, st.asked)
	}
	// The clock put right, a little later than the wait by it.
	r, wait := l.take(context.Background(), st, "a", at(200*time.Millisecond))
	if st.asked != 2 {
		t.Fatalf("after the step back the bucket was not asked again (%v, wait %v): the activity is held BUSY for the step", r, wait)
	}
}

// TestLeaseLateRequestIsNotAStepBack: a request that read the clock a few
// ms before one that found the fleet bucket dry, and was decided after it,
// would be taken for a clock step back and send the next request to Redis
// before the wait (review rv16). No request is late: the lease reads the
// clock under its lock, before the fetch and after it, so the times it
// decides by come in the order it decides (TestLeaseSmallClockStepBack
// for why not a slack instead).
func TestLeaseLateRequestIsNotAStepBack(t *testing.T) {
	var l lease
	l.init(config.Rate{Rate: 10, Burst: 10})
	st := &shortStore{wait: 100 * time.Millisecond}
	base := time.Unix(1000, 0)
	reads := 0
	at := func(d time.Duration) func() time.Time {
		return func() time.Time {
			reads++
			if l.mu.TryLock() {
				l.mu.Unlock()
				t.Errorf("clock read %d outside the lease's lock: a request may be decided after one that read it later", reads)
			}
			return base.Add(d)
		}
	}
	if r, _ := l.take(context.Background(), st, "a", at(0)); r != leaseBusy || st.asked != 1 || reads != 2 {
		t.Fatalf("empty bucket: %v, asked %d, clock read %d times", r, st.asked, reads)
	}
	for i := 0; i < 50; i++ {
		l.take(context.Background(), st, "a", at(time.Millisecond*time.Duration(i)))
	}
	if st.asked != 1 {
		t.Fatalf("%d more fetches to Redis before the bucket's wait", st.asked-1)
	}
}

// TestLeaseSmallClockStepBack: a step back under a second (an NTP step:
// ntpd steps offsets over 128 ms) is a step back too. A drained fleet
// bucket seen just before it must not hold the activity BUSY on this
// instance for the step: at 1,000/s the bucket's wait is 20 ms, and 30 ms
// after an 800 ms step back the bucket is asked again, not in 790 ms.
func TestLeaseSmallClockStepBack(t *testing.T) {
	var l lease
	l.init(config.Rate{Rate: 1000, Burst: 1000})
	st := &shortStore{wait: 20 * time.Millisecond}
	base := time.Unix(1000, 0)
	at := func(d time.Duration) func() time.Time { return func() time.Time { return base.Add(d) } }
	if r, _ := l.take(context.Background(), st, "a", at(0)); r != leaseBusy || st.asked != 1 {
		t.Fatalf("empty bucket: %v, asked %d", r, st.asked)
	}
	// The clock steps back 800 ms; 30 ms later it reads -770 ms.
	r, wait := l.take(context.Background(), st, "a", at(-770*time.Millisecond))
	if st.asked != 2 {
		t.Fatalf("30 ms after an 800 ms step back, past the bucket's 20 ms wait, the bucket was not asked (%v, wait %v): the activity is held BUSY for the step", r, wait)
	}
}
