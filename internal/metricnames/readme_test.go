package metricnames

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/preheat"
)

var (
	readmeRow   = regexp.MustCompile("^\\|\\s*(`seckill_[^|]+?)\\s*\\|([^|]*)\\|")
	readmeName  = regexp.MustCompile("`(seckill_[a-z0-9_]+|_[a-z0-9_]+)`")
	descLabels  = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	readmeLabel = regexp.MustCompile(`[a-z_]+`)
)

// labelsOf returns every seckill_* family the proxy's /metrics can show
// with its variable label names: the metrics.Metrics fields, the preheat
// scheduler's, and what serve registers at start (WatchReserveBatches).
func labelsOf(t *testing.T) map[string][]string {
	t.Helper()
	var cs []prometheus.Collector
	m := metrics.New()
	collect(reflect.ValueOf(m), &cs)
	rec := &recorder{}
	preheat.New(nil, func() *config.Config { return &config.Config{} }, zap.NewNop(), preheat.Options{Registerer: rec})
	cs = append(cs, rec.cs...)
	batches := prometheus.NewRegistry()
	(&metrics.Metrics{Registry: batches}).WatchReserveBatches(func() (int64, int64) { return 0, 0 })
	mfs, err := batches.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		out[mf.GetName()] = nil
	}
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			n := fqName.FindStringSubmatch(s)
			if n == nil || !strings.HasPrefix(n[1], "seckill_") {
				continue
			}
			var ls []string
			if l := descLabels.FindStringSubmatch(s); l != nil && l[1] != "" {
				ls = strings.Split(l[1], ",")
			}
			sort.Strings(ls)
			out[n[1]] = ls
		}
	}
	return out
}

// TestReadmeMetricsTables: every metric the README's Metrics tables name
// is exported with the labels the table gives, and every exported seckill_*
// family has a row (SPEC audit spa: the README is the operator's reference).
func TestReadmeMetricsTables(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	got := labelsOf(t)
	documented := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		row := readmeRow.FindStringSubmatch(line)
		if row == nil {
			continue
		}
		// A row may name several: `seckill_stock_initial`, `_remaining`, ...
		var names []string
		var base string
		for _, n := range readmeName.FindAllStringSubmatch(row[1], -1) {
			name := n[1]
			if strings.HasPrefix(name, "_") {
				name = base + name
			} else {
				i := strings.LastIndex(name, "_")
				base = name[:i]
			}
			names = append(names, name)
		}
		var want []string
		if l := strings.TrimSpace(row[2]); l != "" && l != "—" {
			want = readmeLabel.FindAllString(l, -1)
		}
		sort.Strings(want)
		for _, name := range names {
			documented[name] = true
			ls, ok := got[name]
			if !ok {
				t.Errorf("README names %s; the proxy does not export it", name)
				continue
			}
			if !reflect.DeepEqual(ls, want) && len(ls)+len(want) > 0 {
				t.Errorf("%s: README labels %v, exported with %v", name, want, ls)
			}
		}
	}
	for name := range got {
		if !documented[name] {
			t.Errorf("%s is exported but has no row in README's Metrics tables", name)
		}
	}
}
