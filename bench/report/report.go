// Package report turns a load run into what people read: a terminal table,
// a machine-readable JSON document and a hand-written SVG chart.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/redisinfo"
	"github.com/seckill-proxy/seckill-proxy/bench/verify"
)

// Percentiles are latencies in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Point is one second of the timeline.
type Point struct {
	T        int              `json:"t"`
	Answered int64            `json:"answered"`
	Latency  Percentiles      `json:"latency"`
	Outcomes map[string]int64 `json:"outcomes"`
}

// Result is the JSON result file.
type Result struct {
	Name            string           `json:"name,omitempty"`
	Target          string           `json:"target"`
	Activity        string           `json:"activity"`
	SKUs            []string         `json:"skus"`
	Users           int              `json:"users"`
	Tries           int              `json:"tries"`
	Concurrency     int              `json:"concurrency"`
	Rate            float64          `json:"rate"`
	Ramp            string           `json:"ramp"`
	Hold            string           `json:"hold"`
	RunID           string           `json:"run_id"`
	Start           time.Time        `json:"start"`
	ElapsedSec      float64          `json:"elapsed_s"`
	Sent            int64            `json:"sent"`
	Answered        int64            `json:"answered"`
	TransportErrors int64            `json:"transport_errors"`
	ServerErrors    int64            `json:"server_errors"`
	RPS             float64          `json:"rps"`
	PeakRPS         int64            `json:"peak_rps"`
	Latency         Percentiles      `json:"latency"`
	Outcomes        map[string]int64 `json:"outcomes"`
	Status          map[string]int64 `json:"status"`
	Timeline        []Point          `json:"timeline"`
	Redis           *redisinfo.Delta `json:"redis,omitempty"`
	// Slowest: --slowest N, the slowest answered requests, slowest first.
	Slowest []SlowRequest  `json:"slowest,omitempty"`
	Checks  []verify.Check `json:"checks,omitempty"`
	OK      bool           `json:"ok"`
}

// SlowRequest is one of the slowest answered requests of a run.
type SlowRequest struct {
	User      int     `json:"user"`
	Try       int     `json:"try"` // 0-based: the user's first request is try 0
	SentMS    float64 `json:"sent_ms"`
	LatencyMS float64 `json:"latency_ms"`
	Status    int     `json:"status"`
	Outcome   string  `json:"outcome"`
}

type quantiler interface {
	Quantile(q float64) int64
	Max() int64
	Mean() float64
}

func ms(us int64) float64 { return float64(us) / 1000 }

func msDur(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percentiles(h quantiler) Percentiles {
	return Percentiles{
		P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max()), Mean: h.Mean() / 1000,
	}
}

// Build assembles the JSON document of a run.
func Build(name string, r *load.Result, rd *redisinfo.Delta, checks []verify.Check) *Result {
	c := r.Config
	out := &Result{
		Name: name, Target: c.Target, Activity: c.Activity, SKUs: c.SKUs, Users: c.Users, Tries: c.Tries,
		Concurrency: c.Concurrency, Rate: c.Rate, Ramp: c.Ramp.String(), Hold: c.Hold.String(), RunID: r.RunID,
		Start: r.Start, ElapsedSec: r.Elapsed.Seconds(), Sent: r.Sent, Answered: r.Answered(),
		TransportErrors: r.TransportErrors(), ServerErrors: r.ServerErrors(), RPS: r.RPS(),
		Latency: percentiles(r.Latency), Outcomes: r.Outcomes, Status: map[string]int64{},
		Redis: rd, Checks: checks, OK: len(verify.Failed(checks)) == 0,
	}
	for s, n := range r.Status {
		out.Status[strconv.Itoa(s)] = n
	}
	for _, s := range r.Slowest {
		out.Slowest = append(out.Slowest, SlowRequest{User: s.User, Try: s.Try, SentMS: msDur(s.Sent), LatencyMS: msDur(s.Latency), Status: s.Status, Outcome: s.Outcome})
	}
	for i, s := range r.Seconds {
		var n int64
		for _, c := range s.Outcomes {
			n += c
		}
		out.PeakRPS = max(out.PeakRPS, n)
		out.Timeline = append(out.Timeline, Point{T: i, Answered: n, Latency: percentiles(s.Latency), Outcomes: s.Outcomes})
	}
	return out
}

// WriteJSON writes the result file.
func WriteJSON(path string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Table is a minimal aligned text table.
type Table struct {
	rows [][]string
	left map[int]bool
}

// AlignLeft marks text columns; others are right-aligned numbers.
func (t *Table) AlignLeft(cols ...int) {
	if t.left == nil {
		t.left = map[int]bool{}
	}
	for _, c := range cols {
		t.left[c] = true
	}
}

// Row appends a row; the first row is the header.
func (t *Table) Row(cells ...string) { t.rows = append(t.rows, cells) }

// Write renders the table; the first column and those marked AlignLeft are
// left-aligned, the others (numbers) right-aligned.
func (t *Table) Write(w io.Writer) {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for ri, r := range t.rows {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			case t.left[i]:
				b.WriteString("  " + c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if ri == 0 {
			total := 0
			for _, x := range width {
				total += x + 2
			}
			fmt.Fprintln(w, strings.Repeat("─", total-2))
		}
	}
}

// FormatMS prints a latency in ms with sensible digits.
func FormatMS(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// Print writes the human report of one run.
func Print(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\nseckill-bench %s → %s  (activity %s, %d users × %s tries, concurrency %d, %s)\n\n",
		r.Name, r.Target, r.Activity, r.Users, triesText(r.Tries), r.Concurrency, shape(r))
	var t Table
	t.Row("metric", "value")
	t.Row("requests sent", strconv.FormatInt(r.Sent, 10))
	t.Row("answered", strconv.FormatInt(r.Answered, 10))
	t.Row("transport errors", strconv.FormatInt(r.TransportErrors, 10))
	t.Row("5xx answers", strconv.FormatInt(r.ServerErrors, 10))
	t.Row("elapsed", fmt.Sprintf("%.2f s", r.ElapsedSec))
	t.Row("throughput", fmt.Sprintf("%.0f req/s", r.RPS))
	t.Row("peak second", fmt.Sprintf("%d req/s", r.PeakRPS))
	t.Row("latency p50", FormatMS(r.Latency.P50)+" ms")
	t.Row("latency p90", FormatMS(r.Latency.P90)+" ms")
	t.Row("latency p99", FormatMS(r.Latency.P99)+" ms")
	t.Row("latency p99.9", FormatMS(r.Latency.P999)+" ms")
	t.Row("latency max", FormatMS(r.Latency.Max)+" ms")
	t.Write(w)

	fmt.Fprintln(w)
	var o Table
	o.Row("outcome", "count", "share")
	for _, n := range load.SortedOutcomes(r.Outcomes) {
		o.Row(n, strconv.FormatInt(r.Outcomes[n], 10), fmt.Sprintf("%.2f%%", 100*float64(r.Outcomes[n])/float64(max(r.Sent, 1))))
	}
	o.Write(w)

	if r.Redis != nil {
		fmt.Fprintln(w)
		var rt Table
		rt.Row("redis", "value")
		rt.Row("script calls", strconv.FormatInt(r.Redis.ScriptCalls, 10))
		rt.Row("µs per script call", fmt.Sprintf("%.2f", r.Redis.UsecPerCall))
		rt.Row("commands", strconv.FormatInt(r.Redis.Commands, 10))
		rt.Row("redis CPU", fmt.Sprintf("%.2f s", r.Redis.CPUSeconds))
		rt.Row("used memory", fmt.Sprintf("%.1f MiB", float64(r.Redis.UsedMemory)/(1<<20)))
		rt.Write(w)
	}
	if len(r.Slowest) > 0 {
		fmt.Fprintln(w)
		var st Table
		st.Row("slowest", "user", "try", "sent at", "latency", "status", "outcome")
		for i, s := range r.Slowest {
			st.Row(strconv.Itoa(i+1), strconv.Itoa(s.User), strconv.Itoa(s.Try), FormatMS(s.SentMS)+" ms",
				FormatMS(s.LatencyMS)+" ms", strconv.Itoa(s.Status), s.Outcome)
		}
		st.AlignLeft(6)
		st.Write(w)
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w)
		PrintChecks(w, r.Checks)
	}
}

// PrintChecks writes verification results, one line each.
func PrintChecks(w io.Writer, checks []verify.Check) {
	var t Table
	t.AlignLeft(1, 2)
	t.Row("check", "result", "detail")
	for _, c := range checks {
		res := "ok"
		if !c.OK {
			res = "BROKEN"
		}
		t.Row(c.Name, res, c.Detail)
	}
	t.Write(w)
}

func triesText(n int) string {
	if n <= 0 {
		return "∞"
	}
	return strconv.Itoa(n)
}

func shape(r *Result) string {
	if r.Rate <= 0 {
		return "closed loop"
	}
	return fmt.Sprintf("open loop: ramp %s to %.0f/s, hold %s", r.Ramp, r.Rate, r.Hold)
}

// EncodeJSON writes any result document (one or a list) indented.
func EncodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	return nil
}
