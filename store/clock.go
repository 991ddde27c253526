package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// NodeClock is one Redis node's clock as this host sees it.
type NodeClock struct {
	Addr string
	// Offset is the node's TIME less this host's clock at the middle of
	// the round trip: positive when Redis is ahead.
	Offset time.Duration
	// RTT is the round trip the offset was read over.
	RTT time.Duration
	// Err is set when the node did not answer TIME; the other fields are
	// then zero.
	Err error
}

// Least is the least the two clocks can differ: the offset less half the
// round trip (TIME may have been read anywhere within it).
func (c NodeClock) Least() time.Duration { return max(c.Offset.Abs()-c.RTT/2, 0) }

// clockSamples is how many TIME calls one measurement takes; the one with
// the shortest round trip is kept (the least uncertain).
const clockSamples = 3

// MeasureClock reads n's TIME between two readings of now, clockSamples
// times, and returns the offset read over the shortest round trip.
func MeasureClock(ctx context.Context, n rueidis.Client, now func() time.Time) (offset, rtt time.Duration, err error) {
	rtt = -1
	for range clockSamples {
		t0 := now()
		arr, err := n.Do(ctx, n.B().Time().Build()).AsStrSlice()
		t1 := now()
		if err != nil {
			return 0, 0, wrap(err)
		}
		if len(arr) != 2 {
			return 0, 0, fmt.Errorf("TIME answered %q", arr)
		}
		sec, err1 := strconv.ParseInt(arr[0], 10, 64)
		usec, err2 := strconv.ParseInt(arr[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("TIME answered %q", arr)
		}
		d := t1.Sub(t0)
		if rtt >= 0 && d >= rtt {
			continue
		}
		rtt = d
		offset = time.Unix(sec, usec*1000).Sub(t0.Add(d / 2))
	}
	return offset, rtt, nil
}

// Clocks measures the clock of every node the client talks to (the one
// node, or every node of a cluster), sorted by address. A node that does
// not answer within the command timeout has Err set.
func (s *Store) Clocks(ctx context.Context, now func() time.Time) ([]NodeClock, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	var out []NodeClock
	for addr, n := range c.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, max(2*s.timeout, 500*time.Millisecond))
		off, rtt, err := MeasureClock(cctx, n, now)
		cancel()
		out = append(out, NodeClock{Addr: addr, Offset: off, RTT: rtt, Err: err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// JudgeClocks picks the node whose clock is furthest from this host's (by
// Least) among those that answered, and says what is wrong when it is
// further than bound ("" when within it). ok is false when no node answered.
func JudgeClocks(nodes []NodeClock, bound time.Duration) (worst NodeClock, ok bool, problem string) {
	for _, n := range nodes {
		if n.Err == nil && (!ok || n.Least() > worst.Least()) {
			worst, ok = n, true
		}
	}
	if !ok || worst.Least() <= bound {
		return worst, ok, ""
	}
	way := "behind"
	if worst.Offset < 0 {
		way = "ahead of"
	}
	return worst, true, fmt.Sprintf("this host's clock is %s %s Redis %s (round trip %s), more than server.max_clock_skew %s",
		worst.Offset.Abs().Round(time.Millisecond), way, worst.Addr, worst.RTT.Round(time.Microsecond), bound)
}
