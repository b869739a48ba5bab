// Package deploy holds no code: its tests load the shipped deployment files
// with the parsers of the tools that read them (Prometheus's rule and PromQL
// parsers, the Kubernetes API types, the nats-server of go.mod, compose-go),
// so that a file those tools refuse fails `make test`. Those parsers are
// heavy; they are linked into this test binary only, never into crosscheck.
// The checks that tie the files to crosscheck's own settings and commands
// are in cmd/crosscheck (TestDeployFiles).
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// ruleFiles are the Prometheus rule files that deploy/prometheus/prometheus.yml
// loads.
var ruleFiles = []string{"prometheus/alerts.yaml"}

func TestPrometheusRulesLoad(t *testing.T) {
	documented := documentedMetrics(t)
	for _, path := range ruleFiles {
		t.Run(path, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range checkRules(raw) {
				t.Error(msg)
			}
			groups, _ := rulefmt.Parse(raw, false)
			if groups == nil {
				return
			}
			n := 0
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					n++
					expr, err := parser.ParseExpr(r.Expr)
					if err != nil {
						continue // reported by checkRules
					}
					for _, name := range metricNames(expr) {
						if !documented[name] {
							t.Errorf("%s %s%s: %s is not a metric of docs/operations.md", path, r.Alert, r.Record, name)
						}
					}
				}
			}
			if n == 0 {
				t.Fatalf("%s: no rule", path)
			}
		})
	}
}

// checkRules returns what Prometheus says of a rule file when it loads it:
// rulefmt's checks of the groups, the rules and their templates, and
// PromQL's parse of every expression.
func checkRules(raw []byte) []string {
	var msgs []string
	_, errs := rulefmt.Parse(raw, false)
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	return msgs
}

func TestPrometheusConfigNamesTheRuleFiles(t *testing.T) {
	raw, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, f := range ruleFiles {
		if !slices.ContainsFunc(cfg.RuleFiles, func(s string) bool { return filepath.Base(s) == filepath.Base(f) }) {
			t.Errorf("prometheus.yml does not load %s (rule_files: %v)", f, cfg.RuleFiles)
		}
	}
}

// The check must fail on the rule that stopped Prometheus: group_left
// followed by a parenthesis on the next line, which PromQL reads as
// group_left's label list.
func TestRuleCheckFindsTheGroupLeftMistake(t *testing.T) {
	const bad = `groups:
  - name: x
    rules:
      - alert: Slow
        expr: |
          histogram_quantile(0.99, sum by (mode, le) (rate(crosscheck_query_time_to_terminal_seconds_bucket[15m])))
          > on (mode) group_left
          (
            label_replace(vector(120), "mode", "unify", "", "")
          )
`
	msgs := checkRules([]byte(bad))
	if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), "grouping opts") {
		t.Fatalf("the group_left mistake passes the check: %v", msgs)
	}
	if msgs := checkRules([]byte(strings.Replace(bad, "group_left\n", "group_left()\n", 1))); len(msgs) != 0 {
		t.Fatalf("the corrected rule fails the check: %v", msgs)
	}
}

// grafanaVariable matches the dashboard's template variables, which Grafana
// replaces before Prometheus sees the query.
var grafanaVariable = regexp.MustCompile(`\$\{?__(rate_)?interval\}?|\$\{?__range\}?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// grafanaQuery is a query of the dashboard with its variables replaced as
// Grafana replaces them: intervals by a duration, others by a label value.
func grafanaQuery(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.Contains(v, "interval") || strings.Contains(v, "range") {
			return "5m"
		}
		return "x"
	})
}

func TestGrafanaDashboardQueriesParse(t *testing.T) {
	documented := documentedMetrics(t)
	dashboards, err := filepath.Glob("grafana/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboard in deploy/grafana: %v", err)
	}
	for _, path := range dashboards {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		exprs := dashboardExprs(doc)
		if len(exprs) == 0 {
			t.Fatalf("%s: no query", path)
		}
		for _, q := range exprs {
			expr, err := parser.ParseExpr(grafanaQuery(q))
			if err != nil {
				t.Errorf("%s: %q: %v", path, q, err)
				continue
			}
			for _, name := range metricNames(expr) {
				if !documented[name] {
					t.Errorf("%s: %q: %s is not a metric of docs/operations.md", path, q, name)
				}
			}
		}
		t.Logf("%s: %d queries", path, len(exprs))
	}
	if _, err := parser.ParseExpr(grafanaQuery(`sum(rate(x[$__rate_interval])) > on (mode) group_left (`)); err == nil {
		t.Fatal("a broken query parses")
	}
}

// dashboardExprs returns every "expr" string of a Grafana dashboard, panels
// in rows included.
func dashboardExprs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v["expr"].(string); ok {
			out = append(out, s)
		}
		for _, child := range v {
			out = append(out, dashboardExprs(child)...)
		}
	case []any:
		for _, child := range v {
			out = append(out, dashboardExprs(child)...)
		}
	}
	return out
}

// metricNames returns the metric names an expression selects, a histogram's
// series (_bucket, _sum, _count) by the histogram's name.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			name := vs.Name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// documentedMetrics returns the metric names docs/operations.md lists, a
// histogram's name standing for its series. Its go_* and process_* row is
// the Go client's standard collectors, whose names the files use as they
// are.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true}
	for _, m := range regexp.MustCompile("`(crosscheck_[a-z0-9_]+)").FindAllStringSubmatch(string(raw), -1) {
		name := m[1]
		names[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[strings.TrimSuffix(name, suffix)] = true
		}
	}
	if strings.Contains(string(raw), "`go_*`, `process_*`") {
		for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_duration_seconds", "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "go_memstats_alloc_bytes"} {
			names[name] = true
		}
	}
	return names
}

// kubernetesKinds are the types the manifests' documents decode into.
var kubernetesKinds = map[string]func() any{
	"apps/v1 Deployment":                     func() any { return &appsv1.Deployment{} },
	"v1 Service":                             func() any { return &corev1.Service{} },
	"v1 Secret":                              func() any { return &corev1.Secret{} },
	"v1 ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"batch/v1 CronJob":                       func() any { return &batchv1.CronJob{} },
	"policy/v1 PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2 HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// kustomizeKinds are read by kustomize, not the API server; nats-values.yaml
// is the NATS chart's values, checked by TestNATSConfigs.
var kustomizeKinds = []string{"kustomize.config.k8s.io/v1beta1 Kustomization", "kustomize.config.k8s.io/v1alpha1 Component"}

// checkManifest decodes every document of a manifest strictly into its
// Kubernetes type: an unknown or misspelt field, a duplicate key or a value
// of the wrong type is an error, as kubectl apply --validate=strict makes it.
func checkManifest(raw []byte) (kinds []string, errs []error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for i := 1; ; i++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return kinds, errs
		}
		if err != nil {
			return kinds, append(errs, fmt.Errorf("document %d: %w", i, err))
		}
		doc, err := yaml.Marshal(&node)
		if err != nil {
			return kinds, append(errs, fmt.Errorf("document %d: %w", i, err))
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal(doc, &head); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		kind := head.APIVersion + " " + head.Kind
		kinds = append(kinds, kind)
		if slices.Contains(kustomizeKinds, kind) {
			continue
		}
		newObj, ok := kubernetesKinds[kind]
		if !ok {
			errs = append(errs, fmt.Errorf("document %d: %q is not a kind this check knows; add its type to kubernetesKinds", i, kind))
			continue
		}
		if err := sigsyaml.UnmarshalStrict(doc, newObj()); err != nil {
			errs = append(errs, fmt.Errorf("document %d (%s): %w", i, kind, err))
		}
	}
}

// notManifests are the YAML files of deploy/kubernetes that are not
// Kubernetes objects: the NATS chart's values (checked by TestNATSConfigs)
// and a CROSSCHECK_CONFIG file (checked by cmd/crosscheck's TestDeployFiles).
var notManifests = map[string]bool{"nats-values.yaml": true, "crosscheck.yaml": true}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	var paths []string
	err := filepath.WalkDir("kubernetes", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") && !notManifests[filepath.Base(path)] {
			paths = append(paths, path)
		}
		return err
	})
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifest in deploy/kubernetes: %v", err)
	}
	seen := map[string]bool{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		kinds, errs := checkManifest(raw)
		for _, err := range errs {
			t.Errorf("%s: %v", path, err)
		}
		for _, k := range kinds {
			seen[k] = true
		}
	}
	for _, want := range []string{"apps/v1 Deployment", "batch/v1 CronJob", "v1 Secret"} {
		if !seen[want] {
			t.Errorf("no %s among the manifests", want)
		}
	}
}

// The strict decoding must fail on a misspelt field and on a wrong type.
func TestManifestCheckFindsMistakes(t *testing.T) {
	const good = `apiVersion: apps/v1
kind: Deployment
metadata: {name: w}
spec:
  template:
    spec:
      terminationGracePeriodSeconds: 60
      containers: [{name: w, image: i, args: [worker]}]
`
	if _, errs := checkManifest([]byte(good)); len(errs) != 0 {
		t.Fatalf("a good manifest fails: %v", errs)
	}
	for name, bad := range map[string]string{
		"misspelt field": strings.Replace(good, "args:", "arguments:", 1),
		"wrong type":     strings.Replace(good, "60", `"sixty"`, 1),
		"unknown kind":   strings.Replace(good, "Deployment", "Deploymant", 1),
	} {
		if _, errs := checkManifest([]byte(bad)); len(errs) == 0 {
			t.Errorf("%s: the manifest passes", name)
		}
	}
}

// natsVersionLine is the line of a NATS configuration that says which
// nats-server it needs.
var natsVersionLine = regexp.MustCompile(`(?m)^# Needs nats-server (\d+)\.(\d+) or later`)

// natsServerVersion returns the major and minor version of the nats-server
// module that go.mod requires, the one these tests run.
func natsServerVersion(t *testing.T) (int, int) {
	t.Helper()
	var major, minor int
	if _, err := fmt.Sscanf(server.VERSION, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("nats-server version %q: %v", server.VERSION, err)
	}
	return major, minor
}

func TestNATSConfigs(t *testing.T) {
	major, minor := natsServerVersion(t)
	path := "nats/nats-server.conf"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server %s refuses %s: %v", server.VERSION, path, err)
	}
	if !opts.JetStream || opts.MaxPayload != 8<<20 || len(opts.Routes) != 3 {
		t.Errorf("%s: JetStream %v, max_payload %d, %d routes; want JetStream, 8 MiB and 3 routes", path, opts.JetStream, opts.MaxPayload, len(opts.Routes))
	}
	// The file says which nats-server it needs: sync_interval came with 2.10.
	m := natsVersionLine.FindSubmatch(raw)
	if m == nil {
		t.Fatalf("%s does not say which nats-server it needs (a line %q)", path, "# Needs nats-server X.Y or later")
	}
	needMajor, _ := strconv.Atoi(string(m[1]))
	needMinor, _ := strconv.Atoi(string(m[2]))
	if opts.SyncInterval != 0 || opts.SyncAlways {
		if needMajor < 2 || needMajor == 2 && needMinor < 10 {
			t.Errorf("%s sets sync_interval, which needs nats-server 2.10, but says it needs %d.%d", path, needMajor, needMinor)
		}
	}
	if needMajor > major || needMajor == major && needMinor > minor {
		t.Errorf("%s needs nats-server %d.%d; go.mod has %s", path, needMajor, needMinor, server.VERSION)
	}
	// The compose file's NATS image is a version the file works with.
	compose, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range regexp.MustCompile(`image:\s*"?nats:(\d+)\.(\d+)`).FindAllSubmatch(compose, -1) {
		a, _ := strconv.Atoi(string(im[1]))
		b, _ := strconv.Atoi(string(im[2]))
		if a < needMajor || a == needMajor && b < needMinor {
			t.Errorf("docker-compose.yml runs nats:%d.%d; %s needs %d.%d", a, b, path, needMajor, needMinor)
		}
	}

	// The Helm chart's values merge settings into the chart's own
	// configuration: those must be settings this nats-server takes.
	values, err := os.ReadFile("kubernetes/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Config struct {
			Merge     map[string]any `yaml:"merge"`
			JetStream struct {
				Merge map[string]any `yaml:"merge"`
			} `yaml:"jetstream"`
		} `yaml:"config"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	conf := map[string]any{"jetstream": map[string]any{"store_dir": t.TempDir()}}
	for k, val := range v.Config.Merge {
		conf[k] = val
	}
	for k, val := range v.Config.JetStream.Merge {
		conf["jetstream"].(map[string]any)[k] = val
	}
	js, _ := json.Marshal(conf)
	merged := filepath.Join(t.TempDir(), "merged.conf")
	if err := os.WriteFile(merged, js, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ProcessConfigFile(merged); err != nil {
		t.Errorf("nats-values.yaml: nats-server %s refuses the merged settings %s: %v", server.VERSION, js, err)
	}
}

// A setting this nats-server does not know is refused, as Debian's 2.9
// refused sync_interval.
func TestNATSConfigCheckFindsMistakes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(path, []byte("jetstream {\n  sync_intervall: always\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ProcessConfigFile(path); err == nil {
		t.Fatal("an unknown setting passes")
	}
}

// loadCompose loads compose files as docker compose does, with the
// variables the compose README asks for.
func loadCompose(t *testing.T, files ...string) error {
	t.Helper()
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory("compose"),
		cli.WithEnv([]string{"CROSSCHECK_ADMIN_TOKEN=0123456789abcdef0123456789abcdef"}),
		cli.WithProfiles([]string{"monitoring"}),
		cli.WithInterpolation(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		return err
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	if len(p.Services) == 0 {
		return errors.New("no service")
	}
	return nil
}

func TestComposeFilesLoad(t *testing.T) {
	if err := loadCompose(t, "compose/docker-compose.yml"); err != nil {
		t.Errorf("docker-compose.yml: %v", err)
	}
	if err := loadCompose(t, "compose/docker-compose.yml", "compose/docker-compose.providers.yml"); err != nil {
		t.Errorf("docker-compose.yml with docker-compose.providers.yml: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("services:\n  a:\n    image: x\n    depends_on: [b]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := loadCompose(t, bad); err == nil {
		t.Error("a compose file that depends on a missing service loads")
	}
}
