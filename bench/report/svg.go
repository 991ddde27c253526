package report

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartW   = 1000
	chartH   = 720
	plotX0   = 70
	plotX1   = 820
	latY0    = 84
	latY1    = 330
	tputY0   = 400
	tputY1   = 660
	legendX0 = 840
)

var fixedColors = map[string]string{
	"WIN":               "#2f9e44",
	"OK":                "#8ce99a",
	"SOLD_OUT":          "#a5b4c4",
	"ALREADY_PURCHASED": "#f59f00",
	"PENDING":           "#ffd43b",
	"QUEUED":            "#74c0fc",
	"RATE_LIMITED":      "#b197fc",
	"BUSY":              "#9c755f",
	"NOT_STARTED":       "#ced4da",
	"ENDED":             "#868e96",
	"UPSTREAM_FAILED":   "#e8590c",
	"UPSTREAM_TIMEOUT":  "#c2255c",
	"STORE_UNAVAILABLE": "#862e9c",
}

var palette = []string{"#4dabf7", "#63e6be", "#ffa8a8", "#da77f2", "#a9e34b", "#ffc078", "#66d9e8", "#e599f7"}

func outcomeColor(name string, i int) string {
	if c, ok := fixedColors[name]; ok {
		return c
	}
	if strings.HasPrefix(name, "ERR_") || strings.HasPrefix(name, "HTTP_5") {
		return "#e03131"
	}
	return palette[i%len(palette)]
}

// latencySeries are drawn darkest for the deepest tail.
var latencySeries = []struct {
	name  string
	color string
	get   func(Percentiles) float64
}{
	{"p50", "#74c0fc", func(p Percentiles) float64 { return p.P50 }},
	{"p90", "#339af0", func(p Percentiles) float64 { return p.P90 }},
	{"p99", "#1864ab", func(p Percentiles) float64 { return p.P99 }},
	{"p99.9", "#e8590c", func(p Percentiles) float64 { return p.P999 }},
	{"max", "#c92a2a", func(p Percentiles) float64 { return p.Max }},
}

// WriteSVG draws latency percentiles over time (log scale) above answers
// per second stacked by outcome, and writes the chart to path.
func WriteSVG(path string, r *Result) error {
	if err := os.WriteFile(path, SVG(r), 0o644); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

// SVG renders the chart of r.
func SVG(r *Result) []byte {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	title := fmt.Sprintf("seckill-bench %s → %s", r.Name, r.Target)
	p(`<text x="%d" y="26" font-size="17" font-weight="bold" fill="#212529">%s</text>`+"\n", plotX0, html.EscapeString(title))
	sub := fmt.Sprintf("%d users × %s tries · concurrency %d · %s · %.0f req/s · p50 %s ms · p99 %s ms · p99.9 %s ms",
		r.Users, triesText(r.Tries), r.Concurrency, shape(r), r.RPS, FormatMS(r.Latency.P50), FormatMS(r.Latency.P99), FormatMS(r.Latency.P999))
	p(`<text x="%d" y="46" fill="#495057">%s</text>`+"\n", plotX0, html.EscapeString(sub))

	n := max(len(r.Timeline), 1)
	xOf := func(t float64) float64 { return plotX0 + (plotX1-plotX0)*t/float64(n) }

	// Latency panel, log scale: tails span orders of magnitude.
	lo, hi := math.Inf(1), 0.0
	for _, pt := range r.Timeline {
		if pt.Answered == 0 {
			continue
		}
		for _, s := range latencySeries {
			v := s.get(pt.Latency)
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if hi == 0 {
		lo, hi = 0.1, 1
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	yLat := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, dLo))
		return latY1 - (latY1-latY0)*(math.Log10(v)-dLo)/(dHi-dLo)
	}
	p(`<text x="%d" y="%d" font-weight="bold" fill="#343a40">latency (ms, log scale, from intended send time)</text>`+"\n", plotX0, latY0-8)
	for d := dLo; d <= dHi; d++ {
		y := yLat(math.Pow(10, d))
		p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dee2e6"/>`+"\n", plotX0, plotX1, y, y)
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#495057">%s</text>`+"\n", plotX0-6, y+4, fmtTick(math.Pow(10, d)))
		if d < dHi {
			for _, m := range []float64{2, 5} {
				y := yLat(m * math.Pow(10, d))
				p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#f1f3f5"/>`+"\n", plotX0, plotX1, y, y)
			}
		}
	}
	for _, s := range latencySeries {
		var pts []string
		for i, pt := range r.Timeline {
			if pt.Answered == 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(float64(i)+0.5), yLat(s.get(pt.Latency))))
		}
		if len(pts) == 1 {
			pts = append(pts, pts[0])
		}
		if len(pts) > 0 {
			p(`<polyline fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		}
	}
	axes(p, latY0, latY1)
	xTicks(p, n, xOf, latY1)
	for i, s := range latencySeries {
		y := latY0 + 10 + i*20
		p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", legendX0, legendX0+22, y, y, s.color)
		p(`<text x="%d" y="%d" fill="#343a40">%s</text>`+"\n", legendX0+28, y+4, s.name)
	}

	// Throughput panel: answers per second, stacked by outcome.
	totals := map[string]int64{}
	var peak int64
	for _, pt := range r.Timeline {
		var sum int64
		for o, c := range pt.Outcomes {
			totals[o] += c
			sum += c
		}
		peak = max(peak, sum)
	}
	order := make([]string, 0, len(totals))
	for o := range totals {
		order = append(order, o)
	}
	rank := func(o string) int {
		switch {
		case o == "WIN" || o == "OK":
			return 0
		case strings.HasPrefix(o, "ERR_") || strings.HasPrefix(o, "HTTP_5"):
			return 2
		}
		return 1
	}
	slices.SortFunc(order, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if totals[a] != totals[b] {
			return int(totals[b] - totals[a])
		}
		return strings.Compare(a, b)
	})
	step := niceStep(float64(peak) / 5)
	top := math.Max(step*math.Ceil(float64(peak)/step), step)
	yT := func(v float64) float64 { return tputY1 - (tputY1-tputY0)*v/top }
	p(`<text x="%d" y="%d" font-weight="bold" fill="#343a40">answers per second, by outcome</text>`+"\n", plotX0, tputY0-8)
	for v := 0.0; v <= top+step/2; v += step {
		y := yT(v)
		p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dee2e6"/>`+"\n", plotX0, plotX1, y, y)
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#495057">%s</text>`+"\n", plotX0-6, y+4, fmtTick(v))
	}
	barW := math.Max((plotX1-plotX0)/float64(n)-1, 1)
	for i, pt := range r.Timeline {
		var acc float64
		for ci, o := range order {
			c := float64(pt.Outcomes[o])
			if c == 0 {
				continue
			}
			y0, y1 := yT(acc), yT(acc+c)
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>t=%ds %s: %d</title></rect>`+"\n",
				xOf(float64(i))+0.5, y1, barW, math.Max(y0-y1, 0.5), outcomeColor(o, ci), i, html.EscapeString(o), int64(c))
			acc += c
		}
	}
	axes(p, tputY0, tputY1)
	xTicks(p, n, xOf, tputY1)
	p(`<text x="%d" y="%d" text-anchor="middle" fill="#495057">seconds since start</text>`+"\n", (plotX0+plotX1)/2, tputY1+36)
	for i, o := range order {
		y := tputY0 + 4 + i*20
		if y > chartH-20 {
			break
		}
		p(`<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", legendX0, y, outcomeColor(o, i))
		p(`<text x="%d" y="%d" fill="#343a40">%s (%d)</text>`+"\n", legendX0+20, y+11, html.EscapeString(o), totals[o])
	}
	p("</svg>\n")
	return b.Bytes()
}

func axes(p func(string, ...any), y0, y1 int) {
	p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#495057"/>`+"\n", plotX0, plotX0, y0, y1)
	p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#495057"/>`+"\n", plotX0, plotX1, y1, y1)
}

func xTicks(p func(string, ...any), n int, xOf func(float64) float64, y int) {
	step := int(math.Max(niceStep(float64(n)/10), 1))
	for t := 0; t <= n; t += step {
		x := xOf(float64(t))
		p(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#495057"/>`+"\n", x, x, y, y+4)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#495057">%d</text>`+"\n", x, y+17, t)
	}
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= raw {
			return m * e
		}
	}
	return 10 * e
}

func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
