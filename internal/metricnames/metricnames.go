// Package metricnames lists the metric names the proxy really exports, for
// the tests that keep deploy/grafana and deploy/prometheus in step with the
// code: it builds metrics.New() (and the scheduler serve registers on the
// same registry) and asks every collector to describe itself, so label
// vectors nobody has touched yet count too.
package metricnames

import (
	"reflect"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/preheat"
)

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// recorder is a Registerer that keeps what is registered on it.
type recorder struct{ cs []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error { r.cs = append(r.cs, c); return nil }
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.cs = append(r.cs, cs...)
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// Exported returns every metric family name seckill-proxy's /metrics can
// show, histogram series names (_bucket, _sum, _count) included.
func Exported() map[string]bool {
	var cs []prometheus.Collector
	collect(reflect.ValueOf(metrics.New()), &cs)
	rec := &recorder{}
	preheat.New(nil, func() *config.Config { return &config.Config{} }, zap.NewNop(), preheat.Options{Registerer: rec})
	cs = append(cs, rec.cs...)
	out := map[string]bool{}
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		_, isHist := c.(prometheus.ObserverVec)
		if _, ok := c.(prometheus.Histogram); ok {
			isHist = true
		}
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				continue
			}
			out[m[1]] = true
			if isHist {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					out[m[1]+s] = true
				}
			}
		}
	}
	return out
}

// collect finds every prometheus.Collector among v's fields (through
// pointers and nested structs such as metrics.Gauges).
func collect(v reflect.Value, out *[]prometheus.Collector) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		if c, ok := v.Interface().(prometheus.Collector); ok {
			*out = append(*out, c)
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	for i := range v.NumField() {
		if f := v.Field(i); f.CanInterface() {
			collect(f, out)
		}
	}
}

// seckillName matches the proxy's own metric names inside PromQL.
var seckillName = regexp.MustCompile(`\bseckill_[a-z0-9_]+`)

// Unknown returns the seckill_* names an expression uses that the proxy
// does not export (sorted as found, deduplicated).
func Unknown(expr string, exported map[string]bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range seckillName.FindAllString(expr, -1) {
		if !exported[n] && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Used returns the seckill_* names an expression uses.
func Used(expr string) []string {
	return seckillName.FindAllString(strings.TrimSpace(expr), -1)
}
