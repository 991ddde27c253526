package admission_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// leaseOnly is a real store whose reserve step always succeeds without
// Redis: the fleet-rate test counts admissions, not reservations.
type leaseOnly struct {
	*store.Store
	leases atomic.Int64
}

func (l *leaseOnly) Reserve(_ context.Context, q store.ReserveRequest) (store.ReserveResult, error) {
	return store.ReserveResult{Code: lua.OK}, nil
}

func (l *leaseOnly) LeaseAdmission(ctx context.Context, act string, rate float64, burst int, want int64) (int64, time.Duration, error) {
	l.leases.Add(1)
	return l.Store.LeaseAdmission(ctx, act, rate, burst, want)
}

// TestFleetAdmissionRate: 3 instances sharing one Redis, admission_rate
// 2,000/s (burst 1,000), offered 10,000/s for 10 s in total: the fleet
// admits 2,000*10 + 1,000 within ±5%, with far fewer Redis calls than
// admissions. Real time, because the bucket runs on Redis TIME.
func TestFleetAdmissionRate(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s real-time test")
	}
	const (
		rate, burst = 2000, 1000
		offered     = 10_000 // per second, whole fleet
		secs        = 10
	)
	srv := redistest.Start(t)
	cfg := realConfig(t, 1, 1)
	a := &cfg.Activities[0]
	a.AdmissionRate = config.Rate{Rate: rate, Burst: burst}
	rc := redisCfg([]string{srv.Addr}, false)
	var stores []*leaseOnly
	var pipes []*admission.Pipeline
	for i := 0; i < 3; i++ {
		in := startInstance(t, rc, cfg, time.Now)
		lo := &leaseOnly{Store: in.st}
		stores = append(stores, lo)
		p := admission.New(lo, in.m, zapNop(), time.Now)
		t.Cleanup(p.Close)
		pipes = append(pipes, p)
	}
	preheat(t, stores[0].Store, a)
	for _, p := range pipes {
		p.Apply(cfg)
	}

	var admitted, busy, other atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i, p := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per := float64(offered) / float64(len(pipes))
			sent := 0
			for {
				el := time.Since(start)
				if el >= secs*time.Second {
					return
				}
				for target := int(el.Seconds() * per); sent < target; sent++ {
					r := req(a, "f"+strconv.Itoa(i)+"-"+strconv.Itoa(sent))
					switch p.Decide(context.Background(), r).Code {
					case admission.Admitted:
						admitted.Add(1)
					case admission.Busy:
						busy.Add(1)
					default:
						other.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	want := float64(rate*secs + burst)
	got := float64(admitted.Load())
	var calls int64
	for _, s := range stores {
		calls += s.leases.Load()
	}
	t.Logf("admitted %d (want %.0f ±5%%), busy %d, other %d, lease calls %d over %d instances",
		admitted.Load(), want, busy.Load(), other.Load(), calls, len(pipes))
	if other.Load() != 0 {
		t.Fatalf("%d answers neither ADMITTED nor BUSY", other.Load())
	}
	if got < want*0.95 || got > want*1.05 {
		t.Fatalf("admitted %0.f, want %.0f ±5%%", got, want)
	}
	if calls*5 > admitted.Load() {
		t.Fatalf("%d lease calls for %d admissions: want batches, not one call per request", calls, admitted.Load())
	}
}
