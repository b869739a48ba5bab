package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/cli"
	"github.com/crosscheck/crosscheck/internal/config"
)

// The deployment files (deploy/, the Dockerfile) name settings and commands
// that the code defines; nothing but this test ties them together. It checks
// that every CROSSCHECK_* variable they set is one the code reads, that every
// command they run is a crosscheck command (long-running services: serve, api
// or worker), that every process on the shared NATS cluster sets the same
// CROSSCHECK_REPLICAS and names all three nodes, and that stop timeouts leave
// room for CROSSCHECK_SHUTDOWN_GRACE.

const deployRoot = "../.."

func TestDeployFiles(t *testing.T) {
	c := newDeployChecker(t)
	deployDir := filepath.Join(deployRoot, "deploy")
	var yamls, envs []string
	err := filepath.WalkDir(deployDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch name := d.Name(); {
		case strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"):
			yamls = append(yamls, path)
		case strings.HasPrefix(name, ".env"):
			envs = append(envs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"compose/docker-compose.yml", "kubernetes/api.yaml", "kubernetes/worker.yaml", "kubernetes/kustomization.yaml", "kubernetes/nats-values.yaml", "kubernetes/secret.example.yaml"} {
		if !slices.Contains(yamls, filepath.Join(deployDir, want)) {
			t.Errorf("deploy/%s is missing", want)
		}
	}

	var compose *deployCompose
	for _, path := range yamls {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		where := strings.TrimPrefix(path, deployRoot+string(filepath.Separator))
		docs, err := deployParseYAML(raw)
		if err != nil {
			c.addf("%s: %v", where, err)
			continue
		}
		c.checkYAMLNames(where, docs)
		switch base := filepath.Base(path); {
		case base == "docker-compose.yml":
			compose = c.checkCompose(where, raw, nil)
		case strings.HasPrefix(base, "docker-compose."):
			// An override file: checked against the base file below.
		case base == "kustomization.yaml":
			c.checkKustomization(where, filepath.Dir(path), docs)
		case base == "crosscheck.yaml":
			if _, err := config.ParseFile(raw); err != nil {
				c.addf("%s: not a valid CROSSCHECK_CONFIG file: %v", where, err)
			}
		case strings.Contains(path, string(filepath.Separator)+"kubernetes"+string(filepath.Separator)):
			c.checkKubernetes(where, docs)
		}
	}
	for _, path := range yamls {
		if base := filepath.Base(path); strings.HasPrefix(base, "docker-compose.") && base != "docker-compose.yml" {
			raw, _ := os.ReadFile(path)
			c.checkCompose(strings.TrimPrefix(path, deployRoot+string(filepath.Separator)), raw, compose)
		}
	}
	for _, path := range envs {
		raw, _ := os.ReadFile(path)
		c.checkNames(strings.TrimPrefix(path, deployRoot+string(filepath.Separator)), string(raw))
	}

	// The compose file's NATS services are the nodes the NATS configuration
	// routes between.
	conf, err := os.ReadFile(filepath.Join(deployDir, "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if compose == nil {
		t.Fatal("deploy/compose/docker-compose.yml was not checked")
	}
	routes := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*nats-route://([A-Za-z0-9.-]+):6222\s*$`).FindAllStringSubmatch(string(conf), -1) {
		routes[m[1]] = true
	}
	for _, host := range compose.natsHosts {
		if !routes[host] {
			c.addf("deploy/nats/nats-server.conf: the cluster routes do not name %s, a node of CROSSCHECK_NATS_URL in the compose file", host)
		}
	}
	if len(routes) != 3 {
		c.addf("deploy/nats/nats-server.conf: %d cluster routes, want the 3 nodes", len(routes))
	}
	if !regexp.MustCompile(`(?m)^\s*sync_interval:`).Match(conf) {
		c.addf("deploy/nats/nats-server.conf: no sync_interval in the jetstream block")
	}

	raw, err := os.ReadFile(filepath.Join(deployRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	c.checkDockerfile("Dockerfile", raw)

	for _, p := range c.problems {
		t.Error(p)
	}
	if len(c.checked) == 0 {
		t.Fatal("no crosscheck process found in the deployment files")
	}
	t.Logf("checked %d crosscheck processes: %s", len(c.checked), strings.Join(c.checked, ", "))
}

// The checks must fail on the mistakes they are there to catch.
func TestDeployCheckerFindsMistakes(t *testing.T) {
	const compose = `
services:
  nats-1: {image: "nats:2.15-alpine", command: ["--name", "nats-1"]}
  nats-2: {image: "nats:2.15-alpine", command: ["--name", "nats-2"]}
  nats-3: {image: "nats:2.15-alpine", command: ["--name", "nats-3"]}
  api:
    image: crosscheck:local
    command: ["api"]
    environment:
      CROSSCHECK_NATS_URL: nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222
      CROSSCHECK_REPLICAS: "3"
      CROSSCHECK_ADMIN_TOKEN: x
      CROSSCHECK_HTTP_ADDR: 0.0.0.0:8080
      CROSSCHECK_ADMIN_ADDR: 0.0.0.0:8081
    ports: ["8080:8080", "127.0.0.1:8081:8081"]
    healthcheck: {test: ["CMD", "wget", "-q", "http://127.0.0.1:8081/readyz"]}
    stop_grace_period: 30s
  worker:
    image: crosscheck:local
    command: ["worker"]
    environment:
      - CROSSCHECK_NATS_URL=nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222
      - CROSSCHECK_REPLICAS=3
      - CROSSCHECK_HTTP_ADDR=0.0.0.0:8080
      - CROSSCHECK_ADMIN_ADDR=0.0.0.0:8081
    healthcheck: {test: ["CMD", "wget", "-q", "http://127.0.0.1:8081/readyz"]}
    stop_grace_period: 30s
`
	const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: crosscheck-worker}
spec:
  template:
    spec:
      terminationGracePeriodSeconds: 60
      containers:
        - name: worker
          image: registry.example.com/crosscheck:1.0.0
          args: ["worker"]
          ports: [{name: http, containerPort: 8080}, {name: admin, containerPort: 8081}]
          env:
            - {name: CROSSCHECK_NATS_URL, value: "nats://nats-0.nats-headless:4222,nats://nats-1.nats-headless:4222,nats://nats-2.nats-headless:4222"}
            - {name: CROSSCHECK_REPLICAS, value: "3"}
            - {name: CROSSCHECK_HTTP_ADDR, value: "0.0.0.0:8080"}
            - {name: CROSSCHECK_ADMIN_ADDR, value: "0.0.0.0:8081"}
            - {name: CROSSCHECK_SHUTDOWN_GRACE, value: 30s}
          readinessProbe: {httpGet: {path: /readyz, port: admin}}
          livenessProbe: {httpGet: {path: /healthz, port: admin}}
`
	const dockerfile = "FROM golang:1.26 AS build\nRUN CGO_ENABLED=0 go build -o /crosscheck ./cmd/crosscheck\n" +
		"FROM alpine:3.22\nCOPY --from=build /crosscheck /crosscheck\nENV CROSSCHECK_DATA_DIR=/data \\\n    CROSSCHECK_HTTP_ADDR=0.0.0.0:8080\n" +
		"USER 10001:10001\nENTRYPOINT [\"/crosscheck\"]\nCMD [\"serve\"]\n"

	// The good versions pass.
	c := newDeployChecker(t)
	c.checkCompose("compose", []byte(compose), nil)
	docs, err := deployParseYAML([]byte(deployment))
	if err != nil {
		t.Fatal(err)
	}
	c.checkKubernetes("deployment", docs)
	c.checkDockerfile("Dockerfile", []byte(dockerfile))
	if len(c.problems) > 0 {
		t.Fatalf("the correct examples were refused:\n%s", strings.Join(c.problems, "\n"))
	}

	for _, tc := range []struct {
		name, kind, old, new, want string
	}{
		{"misspelt setting", "compose", "CROSSCHECK_REPLICAS: \"3\"", "CROSSCHECK_REPLICA: \"3\"", "CROSSCHECK_REPLICA is not a setting"},
		{"misspelt setting in a list", "compose", "- CROSSCHECK_HTTP_ADDR=", "- CROSSCHECK_HTTP_ADR=", "CROSSCHECK_HTTP_ADR is not a setting"},
		{"unknown command", "compose", `command: ["api"]`, `command: ["apiserver"]`, `runs "apiserver"`},
		{"one-off command as a service", "compose", `command: ["worker"]`, `command: ["audit"]`, `runs "audit"`},
		{"two NATS nodes", "compose", ",nats://nats-3:4222\n      CROSSCHECK_REPLICAS", "\n      CROSSCHECK_REPLICAS", "names 2 NATS nodes"},
		{"a node that is not a service", "compose", "- CROSSCHECK_NATS_URL=nats://nats-1:4222", "- CROSSCHECK_NATS_URL=nats://nats-9:4222", "nats-9"},
		{"replicas differ", "compose", "- CROSSCHECK_REPLICAS=3", "- CROSSCHECK_REPLICAS=1", "CROSSCHECK_REPLICAS"},
		{"no admin token", "compose", "      CROSSCHECK_ADMIN_TOKEN: x\n", "", "CROSSCHECK_ADMIN_TOKEN"},
		{"admin port public", "compose", `"127.0.0.1:8081:8081"`, `"8081:8081"`, "admin"},
		{"stop timeout too short", "compose", "stop_grace_period: 30s\n  worker:", "stop_grace_period: 12s\n  worker:", "stop_grace_period"},
		{"unknown command", "deployment", `args: ["worker"]`, `args: ["wroker"]`, `runs "wroker"`},
		{"misspelt setting", "deployment", "CROSSCHECK_SHUTDOWN_GRACE", "CROSSCHECK_SHUTDOWN_GRACE_PERIOD", "CROSSCHECK_SHUTDOWN_GRACE_PERIOD is not a setting"},
		{"grace longer than the pod's", "deployment", "value: 30s}", "value: 90s}", "terminationGracePeriodSeconds"},
		{"no replicas", "deployment", "            - {name: CROSSCHECK_REPLICAS, value: \"3\"}\n", "", "CROSSCHECK_REPLICAS"},
		{"readiness on the wrong path", "deployment", "path: /readyz", "path: /ready", "readinessProbe"},
		// A flood of connections to the public port fails probes there.
		{"liveness on the public port", "deployment", "path: /healthz, port: admin", "path: /healthz, port: http", "livenessProbe"},
		{"health check on the public port", "compose", "http://127.0.0.1:8081/readyz\"]}\n    stop_grace_period: 30s\n  worker", "http://127.0.0.1:8080/readyz\"]}\n    stop_grace_period: 30s\n  worker", "health check"},
		{"misspelt setting", "dockerfile", "CROSSCHECK_HTTP_ADDR=0.0.0.0:8080", "CROSSCHECK_HTTPADDR=0.0.0.0:8080", "CROSSCHECK_HTTPADDR is not a setting"},
		{"unknown command", "dockerfile", `CMD ["serve"]`, `CMD ["server"]`, `"server"`},
		{"root", "dockerfile", "USER 10001:10001", "USER root", "USER"},
		{"another entrypoint", "dockerfile", `ENTRYPOINT ["/crosscheck"]`, `ENTRYPOINT ["/bin/sh"]`, "ENTRYPOINT"},
	} {
		t.Run(tc.kind+" "+tc.name, func(t *testing.T) {
			src := map[string]string{"compose": compose, "deployment": deployment, "dockerfile": dockerfile}[tc.kind]
			if !strings.Contains(src, tc.old) {
				t.Fatalf("the example has no %q", tc.old)
			}
			broken := strings.Replace(src, tc.old, tc.new, 1)
			c := newDeployChecker(t)
			switch tc.kind {
			case "compose":
				c.checkCompose("compose", []byte(broken), nil)
			case "deployment":
				docs, err := deployParseYAML([]byte(broken))
				if err != nil {
					t.Fatal(err)
				}
				c.checkYAMLNames("deployment", docs)
				c.checkKubernetes("deployment", docs)
			case "dockerfile":
				c.checkDockerfile("Dockerfile", []byte(broken))
			}
			for _, p := range c.problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Errorf("no problem mentioning %q; got:\n%s", tc.want, strings.Join(c.problems, "\n"))
		})
	}
}

type deployChecker struct {
	settings map[string]bool // every CROSSCHECK_* variable the code reads
	commands map[string]bool // every command of `crosscheck`
	problems []string
	checked  []string // the crosscheck processes found
}

func newDeployChecker(t *testing.T) *deployChecker {
	t.Helper()
	c := &deployChecker{settings: map[string]bool{}, commands: map[string]bool{}}
	// The settings: the names config.go reads, as string literals.
	src, err := os.ReadFile(filepath.Join(deployRoot, "internal", "config", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"(CROSSCHECK_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		c.settings[m[1]] = true
	}
	for _, name := range []string{"CROSSCHECK_NATS_URL", "CROSSCHECK_REPLICAS", "CROSSCHECK_ADMIN_TOKEN", "CROSSCHECK_HTTP_ADDR", "CROSSCHECK_SHUTDOWN_GRACE"} {
		if !c.settings[name] {
			t.Fatalf("internal/config/config.go no longer reads %s as a literal; %d names found", name, len(c.settings))
		}
	}
	// The commands: those of the command line.
	for _, cmd := range newRoot(cli.IO{Stdout: io.Discard, Stderr: io.Discard}, runService).Commands() {
		c.commands[cmd.Name()] = true
	}
	for _, role := range []string{app.RoleServe, app.RoleAPI, app.RoleWorker, "audit", "events"} {
		if !c.commands[role] {
			t.Fatalf("the command line has no %q; found %v", role, c.commands)
		}
	}
	return c
}

func (c *deployChecker) addf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

var deploySettingName = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])(CROSSCHECK_[A-Z0-9_]*[A-Z0-9])`)

// checkNames reports every CROSSCHECK_* name in text that is not a setting.
func (c *deployChecker) checkNames(where, text string) {
	seen := map[string]bool{}
	for _, m := range deploySettingName.FindAllStringSubmatch(text, -1) {
		if name := m[1]; !c.settings[name] && !seen[name] {
			seen[name] = true
			c.addf("%s: %s is not a setting (internal/config/config.go does not read it)", where, name)
		}
	}
}

// checkYAMLNames checks the names in every key and value of the documents;
// comments are not looked at.
func (c *deployChecker) checkYAMLNames(where string, docs []*yaml.Node) {
	var b strings.Builder
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			b.WriteString(n.Value)
			b.WriteByte('\n')
		}
		for _, child := range n.Content {
			walk(child)
		}
	}
	for _, d := range docs {
		walk(d)
	}
	c.checkNames(where, b.String())
}

// deployParseYAML parses every document of a file.
func deployParseYAML(raw []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		docs = append(docs, &n)
	}
}

// deployProcess is one crosscheck process of a deployment file.
type deployProcess struct {
	where string
	args  []string
	env   map[string]string // settings set to a literal value ("" when from a secret)
	stop  time.Duration     // how long the orchestrator waits after SIGTERM; 0: not known
}

// checkProcess checks what every crosscheck process must satisfy; service
// says whether it runs until stopped (then it is serve, api or worker).
func (c *deployChecker) checkProcess(p deployProcess, service bool) {
	c.checked = append(c.checked, p.where)
	if len(p.args) == 0 {
		c.addf("%s: runs no command; give it serve, api or worker", p.where)
		return
	}
	cmd := p.args[0]
	switch {
	case !c.commands[cmd]:
		c.addf("%s: runs %q, which is not a crosscheck command", p.where, cmd)
		return
	case service && cmd != app.RoleServe && cmd != app.RoleAPI && cmd != app.RoleWorker:
		c.addf("%s: runs %q as a service; a service runs %s, %s or %s", p.where, cmd, app.RoleServe, app.RoleAPI, app.RoleWorker)
	}
	for name := range p.env {
		if !c.settings[name] && strings.HasPrefix(name, "CROSSCHECK_") {
			c.addf("%s: %s is not a setting (internal/config/config.go does not read it)", p.where, name)
		}
	}
	_, shared := p.env["CROSSCHECK_NATS_URL"]
	if cmd != app.RoleServe && !shared {
		c.addf("%s: crosscheck %s needs CROSSCHECK_NATS_URL", p.where, cmd)
	}
	if shared {
		// Every process applies its value to the streams when it starts.
		if v, ok := p.env["CROSSCHECK_REPLICAS"]; !ok || v != "3" {
			c.addf("%s: on the shared NATS cluster CROSSCHECK_REPLICAS must be 3 (every process applies it to the streams); it is %q", p.where, v)
		}
	}
	if _, ok := p.env["CROSSCHECK_ADMIN_TOKEN"]; cmd == app.RoleAPI && !ok {
		c.addf("%s: crosscheck api needs CROSSCHECK_ADMIN_TOKEN", p.where)
	}
	if service {
		d := config.Defaults()
		grace, ok1 := c.duration(p, "CROSSCHECK_SHUTDOWN_GRACE", d.ShutdownGrace)
		drain, ok2 := c.duration(p, "CROSSCHECK_SHUTDOWN_DRAIN", d.ShutdownDrain)
		// Close drains, then waits up to the grace plus 5 s for the HTTP
		// servers.
		if ok1 && ok2 && p.stop > 0 && p.stop <= drain+grace+5*time.Second {
			c.addf("%s: the stop timeout (stop_grace_period / terminationGracePeriodSeconds) of %s must be longer than CROSSCHECK_SHUTDOWN_DRAIN (%s) + CROSSCHECK_SHUTDOWN_GRACE (%s) + 5s", p.where, p.stop, drain, grace)
		}
	}
}

// duration reads the duration setting name of p, or def when p does not set
// it; ok is false (and a problem noted) when the value is not a duration.
func (c *deployChecker) duration(p deployProcess, name string, def time.Duration) (d time.Duration, ok bool) {
	v := p.env[name]
	if v == "" {
		return def, true
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.addf("%s: %s=%q: %v", p.where, name, v, err)
		return 0, false
	}
	return d, true
}

// natsHosts returns the hosts of a CROSSCHECK_NATS_URL value.
func (c *deployChecker) natsHosts(where, value string) []string {
	var hosts []string
	for _, part := range strings.Split(value, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Hostname() == "" {
			c.addf("%s: CROSSCHECK_NATS_URL: %q is not a nats:// URL", where, part)
			continue
		}
		if !slices.Contains(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	return hosts
}

type deployComposeService struct {
	Image           string         `yaml:"image"`
	Build           any            `yaml:"build"`
	Command         any            `yaml:"command"`
	Environment     any            `yaml:"environment"`
	Ports           []any          `yaml:"ports"`
	Healthcheck     map[string]any `yaml:"healthcheck"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
}

type deployCompose struct {
	Services  map[string]deployComposeService `yaml:"services"`
	natsHosts []string
}

func deployStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = fmt.Sprint(e)
		}
		return out
	}
	return nil
}

func deployComposeEnv(v any) map[string]string {
	env := map[string]string{}
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			if val == nil {
				env[k] = ""
			} else {
				env[k] = fmt.Sprint(val)
			}
		}
	case []any:
		for _, e := range v {
			k, val, _ := strings.Cut(fmt.Sprint(e), "=")
			env[k] = val
		}
	}
	return env
}

// checkCompose checks a compose file; base is the file an override file
// applies to (nil for the base itself).
func (c *deployChecker) checkCompose(where string, raw []byte, base *deployCompose) *deployCompose {
	var f deployCompose
	if err := yaml.Unmarshal(raw, &f); err != nil {
		c.addf("%s: %v", where, err)
		return nil
	}
	if len(f.Services) == 0 {
		c.addf("%s: no services", where)
	}
	if base != nil {
		for name, s := range f.Services {
			if _, ok := base.Services[name]; !ok {
				c.addf("%s: overrides the service %s, which the base file does not have", where, name)
			}
			for k := range deployComposeEnv(s.Environment) {
				if strings.HasPrefix(k, "CROSSCHECK_") && !c.settings[k] {
					c.addf("%s: service %s: %s is not a setting", where, name, k)
				}
			}
		}
		return &f
	}
	nats := map[string]bool{}
	for name, s := range f.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			nats[name] = true
		}
	}
	var urls []string
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		s := f.Services[name]
		if s.Build == nil && !strings.Contains(s.Image, "crosscheck") {
			continue
		}
		env := deployComposeEnv(s.Environment)
		p := deployProcess{where: where + ": service " + name, args: deployStrings(s.Command), env: env, stop: 10 * time.Second}
		if s.StopGracePeriod != "" {
			d, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil {
				c.addf("%s: stop_grace_period %q: %v", p.where, s.StopGracePeriod, err)
			}
			p.stop = d
		}
		c.checkProcess(p, true)
		if v, ok := env["CROSSCHECK_NATS_URL"]; ok {
			urls = append(urls, v)
			hosts := c.natsHosts(p.where, v)
			if len(hosts) != 3 {
				c.addf("%s: CROSSCHECK_NATS_URL names %d NATS nodes (%s); list all 3", p.where, len(hosts), strings.Join(hosts, ", "))
			}
			for _, h := range hosts {
				if !nats[h] {
					c.addf("%s: CROSSCHECK_NATS_URL names %s, which is not a NATS service of this file", p.where, h)
				}
			}
			if f.natsHosts == nil {
				f.natsHosts = hosts
			}
		}
		// Health checks go to the admin address, which a flood of
		// connections to the public one does not reach: /readyz.
		_, probePort, _ := net.SplitHostPort(cmp.Or(env["CROSSCHECK_ADMIN_ADDR"], config.Defaults().AdminAddr))
		test := strings.Join(deployStrings(s.Healthcheck["test"]), " ")
		if !strings.Contains(test, ":"+probePort+"/readyz") && !strings.Contains(test, ":"+probePort+"/healthz") {
			c.addf("%s: no health check on /readyz of port %s (CROSSCHECK_ADMIN_ADDR)", p.where, probePort)
		}
		// The admin API is published on the loopback only.
		if args := p.args; len(args) > 0 && args[0] != app.RoleWorker {
			_, adminPort, _ := net.SplitHostPort(cmp.Or(env["CROSSCHECK_ADMIN_ADDR"], config.Defaults().AdminAddr))
			for _, port := range s.Ports {
				spec := fmt.Sprint(port)
				if strings.HasSuffix(spec, ":"+adminPort) && !strings.HasPrefix(spec, "127.0.0.1:") {
					c.addf("%s: the admin port %s is published as %q; publish it on 127.0.0.1 only", p.where, adminPort, spec)
				}
			}
		}
	}
	for _, u := range urls[min(1, len(urls)):] {
		if u != urls[0] {
			c.addf("%s: the services name different NATS clusters: %q and %q", where, urls[0], u)
		}
	}
	return &f
}

// deployMap and deployList read a generic YAML tree.
func deployMap(v any, path ...string) map[string]any {
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	m, _ := v.(map[string]any)
	return m
}

func deployList(v any, key string) []any {
	m, _ := v.(map[string]any)
	l, _ := m[key].([]any)
	return l
}

// checkKubernetes checks the crosscheck containers of every workload.
func (c *deployChecker) checkKubernetes(where string, docs []*yaml.Node) {
	for i, d := range docs {
		var doc map[string]any
		if err := d.Decode(&doc); err != nil {
			c.addf("%s: document %d: %v", where, i+1, err)
			continue
		}
		kind, _ := doc["kind"].(string)
		name, _ := deployMap(doc, "metadata")["name"].(string)
		var pod map[string]any
		switch kind {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			pod = deployMap(doc, "spec", "template", "spec")
		case "CronJob":
			pod = deployMap(doc, "spec", "jobTemplate", "spec", "template", "spec")
		default:
			continue
		}
		if pod == nil {
			c.addf("%s: %s %s has no pod template", where, kind, name)
			continue
		}
		service := kind != "Job" && kind != "CronJob"
		var stop time.Duration = 30 * time.Second // Kubernetes' default
		if v, ok := pod["terminationGracePeriodSeconds"].(int); ok {
			stop = time.Duration(v) * time.Second
		}
		containers := append(deployList(pod, "initContainers"), deployList(pod, "containers")...)
		for _, ctr := range containers {
			ctr, _ := ctr.(map[string]any)
			image, _ := ctr["image"].(string)
			if !strings.Contains(image, "crosscheck") {
				continue
			}
			cname, _ := ctr["name"].(string)
			args := deployStrings(ctr["args"])
			if cmd := deployStrings(ctr["command"]); len(cmd) > 0 {
				if cmd[0] != "/crosscheck" {
					c.addf("%s: %s %s container %s: command %v does not run /crosscheck", where, kind, name, cname, cmd)
				}
				args = append(cmd[1:], args...)
			}
			env := map[string]string{}
			for _, e := range deployList(ctr, "env") {
				e, _ := e.(map[string]any)
				n, _ := e["name"].(string)
				env[n] = ""
				if v, ok := e["value"]; ok && v != nil {
					env[n] = fmt.Sprint(v)
				}
			}
			p := deployProcess{where: fmt.Sprintf("%s: %s %s container %s", where, kind, name, cname), args: args, env: env, stop: stop}
			c.checkProcess(p, service)
			if v, ok := env["CROSSCHECK_NATS_URL"]; ok {
				if hosts := c.natsHosts(p.where, v); len(hosts) != 3 {
					c.addf("%s: CROSSCHECK_NATS_URL names %d NATS nodes; list all 3", p.where, len(hosts))
				}
			}
			if !service {
				continue
			}
			// Probes: readiness on /readyz, liveness on /healthz, both on the
			// port of CROSSCHECK_ADMIN_ADDR: a flood of connections to the
			// public port must not restart the pod.
			_, probePort, _ := net.SplitHostPort(cmp.Or(env["CROSSCHECK_ADMIN_ADDR"], config.Defaults().AdminAddr))
			ports := map[string]string{}
			for _, cp := range deployList(ctr, "ports") {
				cp, _ := cp.(map[string]any)
				ports[fmt.Sprint(cp["name"])] = fmt.Sprint(cp["containerPort"])
			}
			for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
				get := deployMap(ctr, probe, "httpGet")
				if get == nil {
					c.addf("%s: no %s (httpGet %s)", p.where, probe, path)
					continue
				}
				port := fmt.Sprint(get["port"])
				if named, ok := ports[port]; ok {
					port = named
				}
				if get["path"] != path || port != probePort {
					c.addf("%s: %s is %v on port %s; want %s on %s (CROSSCHECK_ADMIN_ADDR)", p.where, probe, get["path"], port, path, probePort)
				}
			}
		}
	}
}

// checkKustomization checks that every file a kustomization names exists.
func (c *deployChecker) checkKustomization(where, dir string, docs []*yaml.Node) {
	for _, d := range docs {
		var k struct {
			Resources          []string                `yaml:"resources"`
			Components         []string                `yaml:"components"`
			Patches            []struct{ Path string } `yaml:"patches"`
			ConfigMapGenerator []struct {
				Files []string `yaml:"files"`
			} `yaml:"configMapGenerator"`
		}
		if err := d.Decode(&k); err != nil {
			c.addf("%s: %v", where, err)
			continue
		}
		names := append(k.Resources, k.Components...)
		for _, p := range k.Patches {
			names = append(names, p.Path)
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.Files {
				_, file, _ := strings.Cut(f, "=")
				names = append(names, cmp.Or(file, f))
			}
		}
		for _, n := range names {
			if n == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				c.addf("%s: names %s, which does not exist", where, n)
			}
		}
	}
}

// checkDockerfile checks the image: a static build of ./cmd/crosscheck, a
// non-root user, /crosscheck as the entrypoint, a crosscheck command as the
// default, and real settings.
func (c *deployChecker) checkDockerfile(where string, raw []byte) {
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var froms []string
	var built, nonRoot bool
	var entrypoint, cmd []string
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			if strings.Contains(rest, "go build") {
				built = strings.Contains(rest, "CGO_ENABLED=0") && strings.Contains(rest, "-o /crosscheck") && strings.Contains(rest, "./cmd/crosscheck")
			}
		case "ENV":
			// ENV NAME=value …, or the old ENV NAME value.
			var names []string
			if fields := strings.Fields(rest); len(fields) > 0 && !strings.Contains(fields[0], "=") {
				names = fields[:1]
			} else {
				for _, f := range fields {
					if n, _, ok := strings.Cut(f, "="); ok {
						names = append(names, n)
					}
				}
			}
			for _, n := range names {
				if strings.HasPrefix(n, "CROSSCHECK_") && !c.settings[n] {
					c.addf("%s: ENV %s is not a setting (internal/config/config.go does not read it)", where, n)
				}
			}
		case "USER":
			u, _, _ := strings.Cut(rest, ":")
			nonRoot = u != "root" && u != "0" && u != ""
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				c.addf("%s: %s %s is not in exec (JSON) form", where, instr, rest)
			}
			if strings.ToUpper(instr) == "ENTRYPOINT" {
				entrypoint = v
			} else {
				cmd = v
			}
		}
	}
	c.checkNames(where, strings.Join(lines, "\n"))
	if len(froms) < 2 || !strings.HasPrefix(froms[0], "golang:1.26") {
		c.addf("%s: want a multi-stage build from golang:1.26; FROM lines: %q", where, froms)
	}
	if !built {
		c.addf("%s: no `CGO_ENABLED=0 go build -o /crosscheck ./cmd/crosscheck`", where)
	}
	if !nonRoot {
		c.addf("%s: the image must end with a USER that is not root", where)
	}
	if !slices.Equal(entrypoint, []string{"/crosscheck"}) {
		c.addf("%s: ENTRYPOINT is %q; want [\"/crosscheck\"]", where, entrypoint)
	}
	c.checkProcess(deployProcess{where: where + ": CMD", args: cmd, env: map[string]string{}}, true)
	if len(cmd) > 0 && cmd[0] != app.RoleServe {
		c.addf("%s: CMD %q: the image's default must be serve, the only command that needs no other setting", where, cmd)
	}
}
