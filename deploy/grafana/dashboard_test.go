// Package grafana holds no code: its test keeps seckill.json a valid
// Grafana dashboard whose queries name only metrics the proxy exports.
package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-proxy/seckill-proxy/internal/metricnames"
)

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("seckill.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("seckill.json: %v", err)
	}
	return d
}

// Every panel: a unique id, a place on the 24-column grid, and queries
// that use only exported seckill_* metrics; the panels issue 12 asks for
// are there.
func TestDashboard(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Fatal("dashboard needs a uid and a title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	exported := metricnames.Exported()
	ids := map[int]bool{}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, q := range p.Targets {
			if len(metricnames.Used(q.Expr)) == 0 {
				t.Errorf("panel %q query %s uses no seckill_* metric: %q", p.Title, q.RefID, q.Expr)
			}
			if u := metricnames.Unknown(q.Expr, exported); len(u) > 0 {
				t.Errorf("panel %q query %s uses metrics the proxy does not export: %v", p.Title, q.RefID, u)
			}
			for _, v := range []string{"$activity", "${datasource}"} {
				if strings.Contains(q.Expr, v) && !vars[strings.Trim(v, "${}")] {
					t.Errorf("panel %q uses %s but the dashboard defines no such variable", p.Title, v)
				}
			}
		}
	}
	for _, want := range []string{"Stock remaining per SKU", "Answers/s by code", "Buy latency (p50 / p99 / p99.9)",
		"Shop latency (p50 / p99) and calls/s by outcome", "Redis memory used / max", "Redis script time (p99 by script)",
		"Reconcile alerts (last hour)"} {
		if !titles[want] {
			t.Errorf("panel %q missing", want)
		}
	}
}

// grafanaVars stand in for what Grafana substitutes before querying.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h", "$activity", ".*")

// promtool parses every query (as recording rules): a typo in PromQL fails
// here, not on the sale day.
func TestDashboardQueriesParse(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install -y prometheus)")
	}
	d := load(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			n++
			expr, _ := json.Marshal(grafanaVars.Replace(q.Expr)) // a JSON string is a YAML string
			fmt.Fprintf(&b, "      - record: dashboard:panel%d:%s\n        expr: %s\n", p.ID, q.RefID, expr)
		}
	}
	path := filepath.Join(t.TempDir(), "queries.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules (the dashboard's %d queries): %v\n%s", n, err, out)
	}
}
