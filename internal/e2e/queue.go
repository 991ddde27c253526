package e2e

import (
	"testing"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// StartQueue runs p's queue workers as serve does: for queue-mode
// activities and sync ones that spill into the queue (upstream.overflow:
// queue), sending with slots of p's in-flight budgets, held while p's clock
// guard does not trust the clock. They stop when the
// test ends, before p does.
func (p *Proxy) StartQueue(t testing.TB) *reservation.Queue {
	t.Helper()
	return p.StartQueueLog(t, zap.NewNop())
}

// StartQueueLog is StartQueue with the workers logging to log.
func (p *Proxy) StartQueueLog(t testing.TB, log *zap.Logger) *reservation.Queue {
	t.Helper()
	q := reservation.NewQueue(p.Store, p.Metrics, log, reservation.QueueOptions{
		Consumer: "e2e-" + p.Addr, Inflight: p.Server.Inflight(), Hold: p.Pipeline.ClockProblem,
	})
	q.Start(p.Cfg)
	t.Cleanup(q.Stop)
	return q
}
