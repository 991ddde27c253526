package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
)

// newObject is the API type of each kind the manifests may use; any other
// kind fails the test (add it here, with the checks it needs).
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Service":
		return &corev1.Service{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

// manifests are one directory's objects, each decoded strictly: an unknown
// or misspelt field, a duplicate key or a wrongly typed value fails.
type manifests struct {
	configMaps  map[string]*corev1.ConfigMap
	services    []*corev1.Service
	deployments map[string]*appsv1.Deployment
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	pdbs        []*policyv1.PodDisruptionBudget
}

func decodeDir(t *testing.T, dir string) manifests {
	t.Helper()
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, deployments: map[string]*appsv1.Deployment{}}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("%s: no manifests", dir)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			obj := newObject(tm.APIVersion, tm.Kind)
			if obj == nil {
				t.Fatalf("%s: document %d: unexpected %s %s", f, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: document %d (%s): %v", f, i, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *corev1.Service:
				m.services = append(m.services, o)
			case *appsv1.Deployment:
				m.deployments[o.Name] = o
			case *autoscalingv2.HorizontalPodAutoscaler:
				m.hpas = append(m.hpas, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			}
		}
	}
	return m
}

// The strict decoder refuses what a sloppy one would drop.
func TestKubernetesDecodeIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selectr: {a: b}\n",
		"duplicate key": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"wrong type":    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: three}\n",
	} {
		var tm metav1.TypeMeta
		_ = yaml.Unmarshal([]byte(doc), &tm)
		if err := yaml.UnmarshalStrict([]byte(doc), newObject(tm.APIVersion, tm.Kind)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// The probe paths are the admin listener's real health endpoints.
func probeAnswers(t *testing.T) map[string]int {
	t.Helper()
	srv := httptest.NewServer(admin.New(metrics.New(), pingOK{}, "", zap.NewNop()))
	defer srv.Close()
	out := map[string]int{}
	for _, p := range []string{"/healthz", "/readyz", "/nope"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		out[p] = resp.StatusCode
	}
	if out["/nope"] != http.StatusNotFound {
		t.Fatalf("admin answers anything: %v", out)
	}
	return out
}

type pingOK struct{}

func (pingOK) Ping(context.Context) error { return nil }

func TestKubernetesManifests(t *testing.T) {
	probes := probeAnswers(t)
	for _, dir := range []string{"kubernetes/sidecar", "kubernetes/edge"} {
		t.Run(path.Base(dir), func(t *testing.T) {
			m := decodeDir(t, dir)
			proxies := 0
			for name, d := range m.deployments {
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("deployment %s: selector %v does not match its pods' labels %v", name, d.Spec.Selector, d.Spec.Template.Labels)
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					if c.Name == "seckill-proxy" {
						proxies++
						checkProxyContainer(t, m, d, c, probes)
					}
				}
			}
			if proxies != 1 {
				t.Fatalf("%d seckill-proxy containers, want 1", proxies)
			}
			for _, s := range m.services {
				d := selected(m, s.Spec.Selector)
				if d == nil {
					t.Errorf("service %s: selector %v matches no deployment", s.Name, s.Spec.Selector)
					continue
				}
				for _, p := range s.Spec.Ports {
					if p.TargetPort.Type != intstr.String || containerPort(d.Spec.Template.Spec, p.TargetPort.StrVal) == nil {
						t.Errorf("service %s: targetPort %s is no named port of deployment %s", s.Name, p.TargetPort.String(), d.Name)
					}
				}
			}
			for _, h := range m.hpas {
				d := m.deployments[h.Spec.ScaleTargetRef.Name]
				if h.Spec.ScaleTargetRef.Kind != "Deployment" || d == nil {
					t.Errorf("hpa %s: scales %s %s, not a deployment here", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
					continue
				}
				if d.Spec.Replicas != nil {
					t.Errorf("deployment %s sets replicas, which every apply would reset under hpa %s", d.Name, h.Name)
				}
				if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
					t.Errorf("hpa %s: replicas %v..%d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
				}
				for _, pdb := range m.pdbs {
					if pdb.Spec.MinAvailable != nil && h.Spec.MinReplicas != nil && pdb.Spec.MinAvailable.IntValue() >= int(*h.Spec.MinReplicas) {
						t.Errorf("pdb %s: minAvailable %s blocks every eviction at hpa %s's minimum", pdb.Name, pdb.Spec.MinAvailable.String(), h.Name)
					}
				}
			}
			for _, pdb := range m.pdbs {
				if sel, _ := metav1.LabelSelectorAsMap(pdb.Spec.Selector); selected(m, sel) == nil {
					t.Errorf("pdb %s selects no deployment", pdb.Name)
				}
			}
			if dir == "kubernetes/edge" && len(m.hpas) != 1 {
				t.Errorf("edge: %d hpas, want 1", len(m.hpas))
			}
		})
	}
}

func selected(m manifests, sel map[string]string) *appsv1.Deployment {
	if len(sel) == 0 {
		return nil
	}
	for _, d := range m.deployments {
		if labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
			return d
		}
	}
	return nil
}

func containerPort(p corev1.PodSpec, name string) *corev1.ContainerPort {
	for _, c := range p.Containers {
		for i := range c.Ports {
			if c.Ports[i].Name == name {
				return &c.Ports[i]
			}
		}
	}
	return nil
}

// checkProxyContainer: its config is the ConfigMap's and validates; its
// ports, probes, secrets and shutdown agree with that config.
func checkProxyContainer(t *testing.T, m manifests, d *appsv1.Deployment, c corev1.Container, probes map[string]int) {
	t.Helper()
	pod := d.Spec.Template.Spec
	i := slices.Index(c.Args, "-c")
	if i < 0 || i+1 >= len(c.Args) || c.Args[0] != "serve" {
		t.Fatalf("seckill-proxy args %v: want serve -c FILE", c.Args)
	}
	file := c.Args[i+1]
	var cm *corev1.ConfigMap
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(file) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = m.configMaps[v.ConfigMap.Name]
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: no ConfigMap in this directory is mounted at %s", d.Name, path.Dir(file))
	}
	data, ok := cm.Data[path.Base(file)]
	if !ok {
		t.Fatalf("configmap %s has no key %s", cm.Name, path.Base(file))
	}
	cfg, err := config.Parse(cm.Name+"/"+path.Base(file), []byte(data))
	if err != nil {
		t.Fatalf("the proxy config in configmap %s does not validate:\n%v", cm.Name, err)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, listen := range map[string]string{"public": cfg.Listen, "admin": cfg.Admin.Listen} {
		host, p, err := net.SplitHostPort(listen)
		if err != nil || p != strconv.Itoa(int(ports[name])) {
			t.Errorf("config listens on %s, container port %q is %d", listen, name, ports[name])
		}
		if name == "admin" && host != "0.0.0.0" && host != "" {
			t.Errorf("admin.listen %s: the kubelet's probes come to the Pod IP", listen)
		}
	}
	for what, pr := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s", d.Name, what)
			continue
		}
		if pr.HTTPGet.Port.StrVal != "admin" || probes[pr.HTTPGet.Path] != http.StatusOK {
			t.Errorf("%s: %s GET %s on port %s: not a health endpoint of the admin listener (%v)", d.Name, what, pr.HTTPGet.Path, pr.HTTPGet.Port.String(), probes)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness must be /readyz (it says whether Redis answers), got %s", d.Name, c.ReadinessProbe.HTTPGet.Path)
	}

	// Secrets: every variable the config names comes from a Secret.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for _, name := range []string{cfg.Upstream.SigningSecretEnv, cfg.Admin.TokenEnv, cfg.Redis.PasswordEnv} {
		if name == "" {
			continue
		}
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: %s must be set from a Secret (secretKeyRef), got %+v", d.Name, name, e)
		}
	}

	// Shutdown: preStop drains, and the grace period covers it plus a
	// winner in flight at the shop.
	var pre time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("%s: seckill-proxy has no preStop drain", d.Name)
	} else {
		pre = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := 30 * time.Second
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	// After preStop, SIGTERM: server.drain_delay, then up to
	// server.shutdown_timeout for winners at the shop (README "Graceful stop").
	if need := pre + cfg.Server.DrainDelay + cfg.Server.ShutdownTimeout; grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds %s < preStop %s + server.drain_delay %s + server.shutdown_timeout %s",
			d.Name, grace, pre, cfg.Server.DrainDelay, cfg.Server.ShutdownTimeout)
	}

	// A sidecar forwards to the shop in its own Pod, which stays up
	// longer than the proxy's drain.
	u, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost" {
		var shop *corev1.Container
		for i := range pod.Containers {
			for _, p := range pod.Containers[i].Ports {
				if strconv.Itoa(int(p.ContainerPort)) == u.Port() {
					shop = &pod.Containers[i]
				}
			}
		}
		if shop == nil || shop.Name == c.Name {
			t.Fatalf("%s: upstream %s is no other container of the Pod", d.Name, cfg.Upstream.URL)
		}
		var shopPre time.Duration
		if shop.Lifecycle != nil && shop.Lifecycle.PreStop != nil && shop.Lifecycle.PreStop.Sleep != nil {
			shopPre = time.Duration(shop.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		if shopPre < pre+cfg.Upstream.Timeout {
			t.Errorf("%s: the shop's preStop %s ends before the proxy's drain (%s + upstream.timeout %s): winners in flight would find it gone",
				d.Name, shopPre, pre, cfg.Upstream.Timeout)
		}
		if !strings.Contains(cfg.Activities[0].Verify.URL, u.Host) {
			t.Errorf("%s: verify.url %s is not the shop in the Pod", d.Name, cfg.Activities[0].Verify.URL)
		}
	}
}
