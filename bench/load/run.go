package load

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/hist"
)

// Outcome names besides the SPEC codes found in answers' "code" field.
const (
	// OutcomeWin is a 2xx answer without a code that carries X-Seckill-Token:
	// a buyer admitted by the proxy and accepted by the shop.
	OutcomeWin = "WIN"
	// OutcomeOK is a 2xx answer without code or token: a win when the target
	// is the shop itself (legacy), or a bare handler's answer.
	OutcomeOK = "OK"
	// OutcomeTimeout is a request that got no answer within --timeout.
	OutcomeTimeout = "ERR_TIMEOUT"
	// OutcomeConn is a connection failure (refused, reset, closed).
	OutcomeConn = "ERR_CONN"
	// OutcomeErr is any other transport error.
	OutcomeErr = "ERR_OTHER"
)

// IsTransportError tells whether an outcome name is a transport error.
func IsTransportError(o string) bool { return strings.HasPrefix(o, "ERR_") }

// Config is one load run.
type Config struct {
	Target      string   // base URL, e.g. http://127.0.0.1:8080
	Activity    string   // fills {activity}
	SKUs        []string // fills {sku}; user i buys SKUs[i % len]
	Path        string   // template, default /api/seckill/{activity}/{sku}/buy
	Users       int      // distinct users
	Tries       int      // requests per user; 0 = as many as the waveform sends
	Concurrency int      // max requests in flight
	Rate        float64  // peak requests/s; 0 = closed loop
	Ramp, Hold  time.Duration
	XFF         bool   // send X-Forwarded-For with a per-user client IP
	UserPrefix  string // user ids are prefix+index
	Timeout     time.Duration
	// Progress receives a line every second while running; nil for none.
	Progress io.Writer
	// Clock defaults to RealClock.
	Clock Clock
	// Slowest keeps the N slowest answered requests (Result.Slowest): which
	// user and loop they were, when they were sent and what they got.
	Slowest int
}

// DefaultPath is the buy route of SPEC §3.
const DefaultPath = "/api/seckill/{activity}/{sku}/buy"

func (c *Config) normalize() error {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if len(c.SKUs) == 0 {
		c.SKUs = []string{"30021"}
	}
	if c.Users <= 0 {
		return errors.New("users must be > 0")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 100
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Rate < 0 {
		return errors.New("rate must be ≥ 0")
	}
	if c.Rate > 0 && c.Ramp+c.Hold <= 0 {
		return errors.New("open loop (--rate > 0) needs --ramp and/or --hold")
	}
	if c.Rate == 0 && c.Tries <= 0 && c.Hold <= 0 {
		c.Tries = 1
	}
	return nil
}

// Limit is the number of requests the run sends at most (0 = unbounded by
// users × tries).
func (c Config) Limit() int64 {
	if c.Tries <= 0 {
		return 0
	}
	return int64(c.Users) * int64(c.Tries)
}

// Second is what was answered during one second of the run.
type Second struct {
	Latency  *hist.Histogram
	Outcomes map[string]int64
}

// Result is the merged measurement of a run.
type Result struct {
	Config   Config
	RunID    string
	Start    time.Time
	Elapsed  time.Duration // first intended send to last answer
	Sent     int64
	Latency  *hist.Histogram // µs, from intended send time, answered requests only
	Outcomes map[string]int64
	Status   map[int]int64
	Seconds  []Second // by second of the answer since Start
	Slowest  []Slow   // the Config.Slowest slowest answered requests, slowest first
}

// Slow is one answered request, kept because it was among the slowest.
type Slow struct {
	K       int64         // the request's index in the run
	User    int           // user index (k % users)
	Try     int           // the user's how-many-th request (k / users), 0-based
	Sent    time.Duration // intended send time, since the run's start
	Latency time.Duration
	Status  int
	Outcome string
}

// keepSlow adds s to w's slowest, which holds at most n.
func (w *worker) keepSlow(n int, s Slow) {
	if len(w.slow) < n {
		w.slow = append(w.slow, s)
		return
	}
	low := 0
	for i := range w.slow {
		if w.slow[i].Latency < w.slow[low].Latency {
			low = i
		}
	}
	if s.Latency > w.slow[low].Latency {
		w.slow[low] = s
	}
}

// Answered is the number of requests that got an HTTP answer.
func (r *Result) Answered() int64 { return r.Latency.Count() }

// TransportErrors counts requests without an HTTP answer.
func (r *Result) TransportErrors() int64 {
	var n int64
	for o, c := range r.Outcomes {
		if IsTransportError(o) {
			n += c
		}
	}
	return n
}

// ServerErrors counts 5xx answers.
func (r *Result) ServerErrors() int64 {
	var n int64
	for s, c := range r.Status {
		if s >= 500 {
			n += c
		}
	}
	return n
}

// RPS is answered requests per second over the run.
func (r *Result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Answered()) / r.Elapsed.Seconds()
}

// OutcomeNames returns the outcome names sorted by count, descending.
func (r *Result) OutcomeNames() []string { return SortedOutcomes(r.Outcomes) }

// SortedOutcomes returns the names of counts sorted by count, descending,
// then by name.
func SortedOutcomes(counts map[string]int64) []string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	return names
}

// secondSubBits keeps per-second histograms at ~3% precision and ~4 KiB:
// enough for a chart, small enough for one per worker per second.
const secondSubBits = 5

// worker holds everything one goroutine measures, merged after the run so
// the hot path takes no lock.
type worker struct {
	lat      *hist.Histogram
	outcomes map[string]int64
	status   map[int]int64
	secs     []Second
	slow     []Slow
}

func (w *worker) second(i int) *Second {
	for len(w.secs) <= i {
		w.secs = append(w.secs, Second{})
	}
	s := &w.secs[i]
	if s.Latency == nil {
		s.Latency = hist.New(secondSubBits)
		s.Outcomes = map[string]int64{}
	}
	return s
}

type job struct {
	k        int64
	intended time.Time
}

// counters feed the progress line.
type counters struct {
	sent, done, errs, wins atomic.Int64
}

// Run performs one load run and returns the merged result. It returns an
// error only when the run could not start; failures of requests are
// outcomes.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("target %q: want a base URL like http://127.0.0.1:8080", cfg.Target)
	}
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	base := strings.TrimRight(cfg.Target, "/")
	paths := make([]string, len(cfg.SKUs))
	for i, sku := range cfg.SKUs {
		p := strings.ReplaceAll(cfg.Path, "{activity}", cfg.Activity)
		paths[i] = base + strings.ReplaceAll(p, "{sku}", sku)
	}
	client := &fasthttp.HostClient{
		Addr:                          addr,
		IsTLS:                         u.Scheme == "https",
		Name:                          "seckill-bench",
		MaxConns:                      cfg.Concurrency + 16,
		MaxConnWaitTimeout:            cfg.Timeout,
		MaxIdleConnDuration:           30 * time.Second,
		ReadTimeout:                   cfg.Timeout,
		WriteTimeout:                  cfg.Timeout,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
	}
	defer client.CloseIdleConnections()

	runID := randomID()
	res := &Result{
		Config:   cfg,
		RunID:    runID,
		Latency:  hist.New(hist.DefaultSubBits),
		Outcomes: map[string]int64{},
		Status:   map[int]int64{},
	}
	var cnt counters
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{lat: hist.New(hist.DefaultSubBits), outcomes: map[string]int64{}, status: map[int]int64{}}
	}

	start := cfg.Clock.Now()
	res.Start = start
	var lastDone atomic.Int64 // ns since start of the last answer

	do := func(w *worker, req *fasthttp.Request, resp *fasthttp.Response, j job) {
		user := int(j.k % int64(cfg.Users))
		idx := strconv.Itoa(user)
		req.Reset()
		req.SetRequestURI(paths[user%len(paths)])
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.Header.Set("X-User-Id", cfg.UserPrefix+idx)
		req.Header.Set("X-Device-Id", "dev-"+cfg.UserPrefix+idx)
		req.Header.Set("X-Request-Id", runID+"-"+strconv.FormatInt(j.k, 10))
		if cfg.XFF {
			req.Header.Set("X-Forwarded-For", UserIP(user))
		}
		req.SetBodyString("{}")
		cnt.sent.Add(1)
		err := client.DoTimeout(req, resp, cfg.Timeout)
		now := cfg.Clock.Now()
		since := now.Sub(start)
		for {
			old := lastDone.Load()
			if int64(since) <= old || lastDone.CompareAndSwap(old, int64(since)) {
				break
			}
		}
		sec := w.second(int(since / time.Second))
		cnt.done.Add(1)
		if err != nil {
			o := classifyErr(err)
			w.outcomes[o]++
			sec.Outcomes[o]++
			cnt.errs.Add(1)
			return
		}
		lat := now.Sub(j.intended)
		w.lat.RecordDuration(lat)
		sec.Latency.RecordDuration(lat)
		status := resp.StatusCode()
		w.status[status]++
		o := classify(status, resp)
		if o == OutcomeWin {
			cnt.wins.Add(1)
		}
		if cfg.Slowest > 0 {
			w.keepSlow(cfg.Slowest, Slow{K: j.k, User: user, Try: int(j.k / int64(cfg.Users)),
				Sent: j.intended.Sub(start), Latency: lat, Status: status, Outcome: o})
		}
		w.outcomes[o]++
		sec.Outcomes[o]++
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopProgress := progress(cfg, &cnt, start)

	var wg sync.WaitGroup
	if cfg.Rate > 0 {
		jobs := make(chan job, cfg.Concurrency)
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for j := range jobs {
					do(w, req, resp, j)
				}
			}()
		}
		wave := Waveform{Peak: cfg.Rate, Ramp: cfg.Ramp, Hold: cfg.Hold}
		res.Sent = Schedule(runCtx, cfg.Clock, wave, cfg.Limit(), func(k int64, at time.Time) bool {
			select {
			case jobs <- job{k: k, intended: at}:
				return true
			case <-runCtx.Done():
				return false
			}
		})
		close(jobs)
	} else {
		// Closed loop: each worker sends its next request when its previous
		// one is answered; the send time is the intended time.
		var next atomic.Int64
		limit := cfg.Limit()
		var deadline time.Time
		if cfg.Hold > 0 {
			deadline = start.Add(cfg.Ramp + cfg.Hold)
		}
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for runCtx.Err() == nil {
					k := next.Add(1) - 1
					if limit > 0 && k >= limit {
						return
					}
					now := cfg.Clock.Now()
					if !deadline.IsZero() && now.After(deadline) {
						return
					}
					do(w, req, resp, job{k: k, intended: now})
				}
			}()
		}
	}
	wg.Wait()
	stopProgress()
	if cfg.Rate == 0 {
		res.Sent = cnt.sent.Load()
	}
	res.Elapsed = time.Duration(lastDone.Load())

	for _, w := range workers {
		res.Slowest = append(res.Slowest, w.slow...)
		if err := res.Latency.Merge(w.lat); err != nil {
			return nil, fmt.Errorf("merge latency: %w", err)
		}
		for o, c := range w.outcomes {
			res.Outcomes[o] += c
		}
		for s, c := range w.status {
			res.Status[s] += c
		}
		for i, s := range w.secs {
			if s.Latency == nil {
				continue
			}
			for len(res.Seconds) <= i {
				res.Seconds = append(res.Seconds, Second{Latency: hist.New(secondSubBits), Outcomes: map[string]int64{}})
			}
			if err := res.Seconds[i].Latency.Merge(s.Latency); err != nil {
				return nil, fmt.Errorf("merge per-second latency: %w", err)
			}
			for o, c := range s.Outcomes {
				res.Seconds[i].Outcomes[o] += c
			}
		}
	}
	for i := range res.Seconds {
		if res.Seconds[i].Latency == nil {
			res.Seconds[i] = Second{Latency: hist.New(secondSubBits), Outcomes: map[string]int64{}}
		}
	}
	sort.Slice(res.Slowest, func(a, b int) bool { return res.Slowest[a].Latency > res.Slowest[b].Latency })
	if len(res.Slowest) > cfg.Slowest {
		res.Slowest = res.Slowest[:cfg.Slowest]
	}
	return res, nil
}

// UserIP is the client IP the bench claims for user i in X-Forwarded-For:
// 10.x.y.z, distinct for the first 16M users.
func UserIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255)
}

var codeKey = []byte(`"code"`)

// bodyCode extracts the string value of the first "code" field of a JSON
// body without a full decode: the hot path must not allocate per answer.
func bodyCode(b []byte) []byte {
	i := bytes.Index(b, codeKey)
	if i < 0 {
		return nil
	}
	b = bytes.TrimLeft(b[i+len(codeKey):], " \t\r\n")
	if len(b) == 0 || b[0] != ':' {
		return nil
	}
	b = bytes.TrimLeft(b[1:], " \t\r\n")
	if len(b) == 0 || b[0] != '"' {
		return nil
	}
	b = b[1:]
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return nil
	}
	return b[:end]
}

// classify names an HTTP answer: its SPEC code, WIN, OK or HTTP_<status>.
func classify(status int, resp *fasthttp.Response) string {
	if code := bodyCode(resp.Body()); len(code) > 0 {
		return string(code)
	}
	if status >= 200 && status < 300 {
		if len(resp.Header.Peek("X-Seckill-Token")) > 0 {
			return OutcomeWin
		}
		return OutcomeOK
	}
	return "HTTP_" + strconv.Itoa(status)
}

func classifyErr(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout),
		errors.Is(err, fasthttp.ErrNoFreeConns), errors.As(err, &ne) && ne.Timeout():
		return OutcomeTimeout
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.As(err, new(*net.OpError)):
		return OutcomeConn
	default:
		return OutcomeErr
	}
}

func randomID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b)
}

// progress prints one line a second to cfg.Progress until the returned stop
// function is called.
func progress(cfg Config, c *counters, start time.Time) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var prev int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				d := c.done.Load()
				fmt.Fprintf(cfg.Progress, "[%5.1fs] sent %d  answered %d  in flight %d  %d/s  wins %d  transport errors %d\n",
					time.Since(start).Seconds(), c.sent.Load(), d, c.sent.Load()-d, d-prev, c.wins.Load(), c.errs.Load())
				prev = d
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
