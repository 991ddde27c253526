package reservation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/inflight"
)

// A queue worker's send that got no answer after the request may have been
// written (a connection cut, a reset, a shutdown mid-send) keeps its
// in-flight slot one more upstream.timeout, as the proxy's own sends do;
// only a send that provably never left frees it at once.
func TestQueueSendOutcome(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, c := range []struct {
		name   string
		ctx    context.Context
		status int
		err    error
		want   inflight.Outcome
	}{
		{"answered", live, 200, nil, inflight.Answered},
		{"refused by the shop", live, 409, nil, inflight.Answered},
		{"shop overloaded", live, 503, nil, inflight.Overloaded},
		{"shop says 429", live, http.StatusTooManyRequests, nil, inflight.Overloaded},
		{"dial failed", live, 0, fmt.Errorf("post: %w", dial), inflight.NotSent},
		{"request never built", live, 0, fmt.Errorf("%w: bad route", errNotSent), inflight.NotSent},
		{"cut after sending", live, 0, io.ErrUnexpectedEOF, inflight.Unknown},
		{"reset after sending", live, 0, &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, inflight.Unknown},
		{"shutdown mid-send", gone, 0, context.Canceled, inflight.Unknown},
		{"shutdown before sending", gone, 0, fmt.Errorf("post: %w", dial), inflight.NotSent},
	} {
		if got := sendOutcome(c.ctx, c.status, c.err); got != c.want {
			t.Errorf("%s: sendOutcome = %v, want %v", c.name, got, c.want)
		}
	}
}
