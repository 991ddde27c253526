package reservation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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

// noReplay's empty body goes out as no body at all: a GET buy route's
// request carries neither Transfer-Encoding nor Content-Length, a POST
// keeps its length, and the buyer's Idempotency-Key still reaches the shop.
func TestNoReplayKeepsTheWireForm(t *testing.T) {
	type seen struct {
		te   []string
		cl   string
		body string
		key  string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.TransferEncoding, r.Header.Get("Content-Length"), string(b), r.Header.Get("Idempotency-Key")}
	}))
	defer srv.Close()
	for _, c := range []struct {
		method, body string
		want         seen
	}{
		{"GET", "", seen{nil, "", "", "k"}},
		{"POST", `{"sku":"s"}`, seen{nil, "11", `{"sku":"s"}`, "k"}},
		{"POST", "", seen{nil, "0", "", "k"}},
	} {
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, srv.URL+"/buy", rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k")
		noReplay(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if s := <-got; fmt.Sprint(s) != fmt.Sprint(c.want) {
			t.Errorf("%s %q: the shop saw %+v, want %+v", c.method, c.body, s, c.want)
		}
	}
}
