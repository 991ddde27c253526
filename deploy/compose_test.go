package deploy

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// composeFile is the subset of the Compose specification
// docker-compose.yml uses, decoded with unknown keys refused, so a typo
// in a key fails here rather than being ignored by docker compose.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	DependsOn       yaml.Node         `yaml:"depends_on"`
	Healthcheck     yaml.Node         `yaml:"healthcheck"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
}

// mount is one "SOURCE:TARGET[:ro]" volume of a service.
type mount struct{ source, target string }

func (s composeService) mounts(t *testing.T) []mount {
	var out []mount
	for _, v := range s.Volumes {
		p := strings.Split(v, ":")
		if len(p) < 2 || len(p) > 3 || (len(p) == 3 && p[2] != "ro" && p[2] != "rw") {
			t.Fatalf("volume %q: want SOURCE:TARGET[:ro]", v)
		}
		out = append(out, mount{p[0], p[1]})
	}
	return out
}

// mountedAt is the source mounted at target, "" when none is.
func (s composeService) mountedAt(target string) string {
	for _, v := range s.Volumes {
		if p := strings.Split(v, ":"); len(p) >= 2 && p[1] == target {
			return p[0]
		}
	}
	return ""
}

// flag is the value after name in args ("--name value" or "--name=value").
func flag(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// containerPorts are the container sides of "HOST:CONTAINER" ports; host
// ports are added to hosts, each exactly once across the file.
func containerPorts(t *testing.T, name string, s composeService, hosts map[string]string) []string {
	var out []string
	for _, p := range s.Ports {
		host, ctr, ok := strings.Cut(p, ":")
		if !ok {
			t.Errorf("%s: port %q: publish as HOST:CONTAINER", name, p)
			continue
		}
		if other, dup := hosts[host]; dup {
			t.Errorf("host port %s published by both %s and %s", host, other, name)
		}
		hosts[host] = name
		out = append(out, ctr)
	}
	return out
}

func port(t *testing.T, what, hostPort string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatalf("%s: %q: %v", what, hostPort, err)
	}
	return h, p
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// Files written with the dashboards and alerts (issue 12 §3), not by this
// example: until they are in the tree, their checks are skipped, loudly.
var dashboardFiles = []string{"grafana/seckill.json", "prometheus/alerts.yml"}

func TestDockerCompose(t *testing.T) {
	var cf composeFile
	readYAML(t, "docker-compose.yml", &cf)
	svc := func(name string) composeService {
		t.Helper()
		s, ok := cf.Services[name]
		if !ok {
			t.Fatalf("docker-compose.yml: no service %q", name)
		}
		return s
	}
	redis, shop, proxy, prom, graf := svc("redis"), svc("shop"), svc("proxy"), svc("prometheus"), svc("grafana")

	// Every file mounted or built from exists; named volumes are declared.
	for name, s := range cf.Services {
		if s.Build != nil {
			df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
			b, err := os.ReadFile(df)
			if err != nil {
				t.Errorf("%s: build: %v", name, err)
			} else if !bytes.Contains(b, []byte("/out/seckill-proxy /out/seckill-bench")) {
				t.Errorf("%s: %s does not ship both seckill-proxy and seckill-bench", name, df)
			}
		}
		for _, m := range s.mounts(t) {
			if !strings.HasPrefix(m.source, ".") {
				if _, ok := cf.Volumes[m.source]; !ok {
					t.Errorf("%s: volume %q is not declared under volumes:", name, m.source)
				}
				continue
			}
			if _, err := os.Stat(m.source); err != nil {
				rel := path.Clean(strings.TrimPrefix(m.source, "./"))
				if slices.Contains(dashboardFiles, rel) {
					t.Logf("SKIPPED: %s: %s is not in the tree yet (written with the dashboards, issue 12 §3)", name, rel)
					continue
				}
				t.Errorf("%s: mounts %s: %v", name, m.source, err)
			}
		}
	}

	// Redis as preflight wants it: AOF every second, noeviction.
	for flagName, want := range map[string]string{"--appendonly": "yes", "--appendfsync": "everysec", "--maxmemory-policy": "noeviction"} {
		if got := flag(redis.Command, flagName); got != want {
			t.Errorf("redis: %s %q, want %q", flagName, got, want)
		}
	}

	// The proxy's config: the file mounted where -c points, valid.
	cfgPath := flag(proxy.Command, "-c")
	src := proxy.mountedAt(cfgPath)
	if cfgPath == "" || src == "" {
		t.Fatalf("proxy: serve -c %q is not a mounted file", cfgPath)
	}
	cfg, err := config.Load(src)
	if err != nil {
		t.Fatalf("proxy config %s does not validate:\n%v", src, err)
	}

	// Ports and names agree.
	hosts := map[string]string{}
	proxyPorts := containerPorts(t, "proxy", proxy, hosts)
	promPorts := containerPorts(t, "prometheus", prom, hosts)
	containerPorts(t, "grafana", graf, hosts)
	_, listen := port(t, "listen", cfg.Listen)
	adminHost, admin := port(t, "admin.listen", cfg.Admin.Listen)
	if !slices.Contains(proxyPorts, listen) || !slices.Contains(proxyPorts, admin) {
		t.Errorf("proxy publishes %v, config listens on %s and %s", proxyPorts, listen, admin)
	}
	if adminHost != "0.0.0.0" && adminHost != "" {
		t.Errorf("admin.listen %q: Prometheus on the compose network cannot reach it", cfg.Admin.Listen)
	}
	if len(cfg.Redis.Addrs) != 1 || cfg.Redis.Addrs[0] != "redis:6379" {
		t.Errorf("redis.addrs %v, want [redis:6379] (the redis service)", cfg.Redis.Addrs)
	}
	shopListen := flag(shop.Command, "--listen")
	_, shopPort := port(t, "shop --listen", shopListen)
	if shop.Command[0] != "shop" || !slices.Equal(shop.Entrypoint, []string{"/usr/local/bin/seckill-bench"}) {
		t.Errorf("shop: runs %v %v, want seckill-bench shop", shop.Entrypoint, shop.Command)
	}
	shopURL := func(what, raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() != "shop" || u.Port() != shopPort {
			t.Errorf("%s %q: want the shop service, shop:%s", what, raw, shopPort)
		}
	}
	shopURL("upstream.url", cfg.Upstream.URL)
	for _, a := range cfg.Activities {
		if a.Verify.URL != "" {
			shopURL("activity "+a.ID+" verify.url", a.Verify.URL)
		}
		if a.PreheatAt == 0 {
			t.Errorf("activity %s: no preheat_at: nothing would preheat it", a.ID)
		}
	}
	// Secrets the config names are passed, the same to proxy and shop.
	for _, env := range []string{cfg.Admin.TokenEnv, cfg.Upstream.SigningSecretEnv} {
		if proxy.Environment[env] == "" {
			t.Errorf("proxy: environment %s (named by the config) is not set", env)
		}
	}
	if s := shop.Environment["SECKILL_SIGNING_SECRET"]; s == "" || s != proxy.Environment[cfg.Upstream.SigningSecretEnv] {
		t.Errorf("shop and proxy signing secrets differ: %q vs %q", s, proxy.Environment[cfg.Upstream.SigningSecretEnv])
	}

	// Prometheus scrapes the proxy's admin listener and loads the alerts.
	var pc struct {
		Global        map[string]string `yaml:"global"`
		RuleFiles     []string          `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	promCfg := prom.mountedAt(flag(prom.Command, "--config.file"))
	if promCfg == "" {
		t.Fatalf("prometheus: --config.file %q is not mounted", flag(prom.Command, "--config.file"))
	}
	readYAML(t, promCfg, &pc)
	if len(pc.ScrapeConfigs) != 1 || pc.ScrapeConfigs[0].MetricsPath != "/metrics" || len(pc.ScrapeConfigs[0].StaticConfigs) != 1 ||
		!slices.Equal(pc.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{"proxy:" + admin}) {
		t.Errorf("prometheus scrapes %+v, want proxy:%s/metrics", pc.ScrapeConfigs, admin)
	}
	for _, rf := range pc.RuleFiles {
		if src := prom.mountedAt(rf); src != "./prometheus/alerts.yml" {
			t.Errorf("prometheus rule file %s is mounted from %q, want ./prometheus/alerts.yml", rf, src)
		}
	}
	if len(pc.RuleFiles) == 0 {
		t.Error("prometheus loads no alerting rules")
	}

	// Grafana: the datasource is the prometheus service, the dashboard
	// provider reads the directory the dashboard is mounted in.
	prov := graf.mountedAt("/etc/grafana/provisioning")
	if prov != "./grafana/provisioning" {
		t.Fatalf("grafana: provisioning mounted from %q", prov)
	}
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, Access, URL string
			IsDefault                    bool `yaml:"isDefault"`
			Editable                     bool `yaml:"editable"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || !slices.Contains(promPorts, "9090") ||
		ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana datasource %+v: want http://prometheus:9090", ds.Datasources)
	}
	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type string
			DisableDeletion    bool `yaml:"disableDeletion"`
			AllowUIUpdates     bool `yaml:"allowUiUpdates"`
			Options            struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/seckill.yml", &dp)
	var dashTarget string
	for _, m := range graf.mounts(t) {
		if m.source == "./grafana/seckill.json" {
			dashTarget = m.target
		}
	}
	if dashTarget == "" || len(dp.Providers) != 1 || dp.Providers[0].Options.Path != path.Dir(dashTarget) {
		t.Errorf("grafana: dashboard mounted at %q, provider reads %+v", dashTarget, dp.Providers)
	}
	if home := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != dashTarget {
		t.Errorf("grafana home dashboard %q, mounted at %q", home, dashTarget)
	}
}

// promtool, when installed, checks prometheus.yml as Prometheus would
// load it: the rule files at their container paths are the mounted files.
func TestPrometheusConfigPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	var cf composeFile
	readYAML(t, "docker-compose.yml", &cf)
	prom := cf.Services["prometheus"]
	raw, err := os.ReadFile(prom.mountedAt(flag(prom.Command, "--config.file")))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	dir := t.TempDir()
	for _, m := range prom.mounts(t) {
		if !strings.Contains(text, m.target) || strings.HasSuffix(m.target, "prometheus.yml") {
			continue
		}
		if _, err := os.Stat(m.source); err != nil {
			t.Skipf("%s not in the tree yet (written with the alerts, issue 12 §3)", m.source)
		}
		abs, _ := filepath.Abs(m.source)
		text = strings.ReplaceAll(text, m.target, abs)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}
