package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/bench/hist"
	"github.com/seckill-proxy/seckill-proxy/bench/load"
	"github.com/seckill-proxy/seckill-proxy/bench/verify"
)

func sample() *load.Result {
	r := &load.Result{
		Config:   load.Config{Target: "http://127.0.0.1:8080", Activity: "a", Users: 10, Tries: 1, Concurrency: 2},
		Latency:  hist.New(hist.DefaultSubBits),
		Outcomes: map[string]int64{"WIN": 2, "SOLD_OUT": 7, "ERR_TIMEOUT": 1},
		Status:   map[int]int64{200: 2, 410: 7},
		Elapsed:  2 * time.Second, Sent: 10,
	}
	for i := range 9 {
		r.Latency.Record(int64(1000 * (i + 1)))
	}
	for s := range 3 {
		h := hist.New(5)
		h.Record(int64(500 * (s + 1)))
		r.Seconds = append(r.Seconds, load.Second{Latency: h, Outcomes: map[string]int64{"SOLD_OUT": int64(s + 1), "<odd&name>": 1}})
	}
	return r
}

func TestSVGIsWellFormed(t *testing.T) {
	res := Build("test & <run>", sample(), nil, nil)
	d := xml.NewDecoder(bytes.NewReader(SVG(res)))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	empty := Build("empty", &load.Result{Latency: hist.New(hist.DefaultSubBits)}, nil, nil)
	if !bytes.HasPrefix(SVG(empty), []byte("<svg")) {
		t.Fatal("empty run must still draw a chart")
	}
}

func TestBuildAndPrint(t *testing.T) {
	checks := []verify.Check{{Name: "no oversell", OK: false, Detail: "101 > 100"}}
	res := Build("t", sample(), nil, checks)
	if res.OK || res.Answered != 9 || res.TransportErrors != 1 || res.PeakRPS != 4 || res.Latency.Max != 9 {
		t.Fatalf("built %+v", res)
	}
	var b bytes.Buffer
	Print(&b, res)
	for _, want := range []string{"latency p99.9", "SOLD_OUT", "BROKEN", "101 > 100"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
