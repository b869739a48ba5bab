package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The help's list of settings is the list FromEnv reads: a setting added to
// one and not the other fails here.
func TestSettingsAreTheNamesFromEnvReads(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	for _, m := range regexp.MustCompile(`"(CROSSCHECK_[A-Z0-9_]+[A-Z0-9])"`).FindAllStringSubmatch(string(src), -1) {
		if !slices.Contains(read, m[1]) {
			read = append(read, m[1])
		}
	}
	var listed []string
	for _, s := range Settings {
		if slices.Contains(listed, s.Name) {
			t.Errorf("%s listed twice", s.Name)
		}
		listed = append(listed, s.Name)
	}
	for _, name := range read {
		if !slices.Contains(listed, name) {
			t.Errorf("FromEnv reads %s; Settings does not list it", name)
		}
	}
	for _, name := range listed {
		if !slices.Contains(read, name) {
			t.Errorf("Settings lists %s; FromEnv does not read it", name)
		}
	}
}

// Every default the help prints is one FromEnv reads back as the default.
func TestSettingsDefaultsReadBack(t *testing.T) {
	want, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings {
		if v := s.Default(Defaults()); v != "" {
			t.Setenv(s.Name, v)
		}
	}
	got, err := FromEnv()
	if err != nil {
		t.Fatalf("the printed defaults: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the printed defaults read back as\n%+v\nnot\n%+v", got, want)
	}
	help := SettingsHelp(false)
	for _, line := range []string{"CROSSCHECK_HTTP_ADDR", "[127.0.0.1:8080]", "CROSSCHECK_QUERY_TIMEOUT", "[8m]", "CROSSCHECK_SYNC_INTERVAL", "[always]", "[10s]"} {
		if !strings.Contains(help, line) {
			t.Errorf("the help has no %q:\n%s", line, help)
		}
	}
	if store := SettingsHelp(true); strings.Contains(store, "CROSSCHECK_HTTP_ADDR") || !strings.Contains(store, "CROSSCHECK_NATS_URL") {
		t.Errorf("the store's settings:\n%s", store)
	}
}

func TestNATSListen(t *testing.T) {
	for v, ok := range map[string]bool{"auto": true, "off": true, "127.0.0.1:4222": true, "[::1]:0": true, "localhost:4222": true,
		"0.0.0.0:4222": false, "10.0.0.1:4222": false, "4222": false, "on": false, "127.0.0.1:99999": false} {
		t.Setenv("CROSSCHECK_NATS_LISTEN", v)
		_, err := FromEnv()
		if (err == nil) != ok {
			t.Errorf("CROSSCHECK_NATS_LISTEN=%s: %v", v, err)
		}
	}
	c := Defaults()
	if addr, on := c.NATSListenAddr(); !on || addr != "127.0.0.1:0" {
		t.Errorf("auto on loopback addresses: %q %v", addr, on)
	}
	c.HTTPAddr = "0.0.0.0:8080"
	if _, on := c.NATSListenAddr(); on {
		t.Error("auto listens with a public HTTP address")
	}
	c.NATSListen = "127.0.0.1:4222"
	if addr, on := c.NATSListenAddr(); !on || addr != "127.0.0.1:4222" {
		t.Errorf("an address: %q %v", addr, on)
	}
	c.NATSListen = NATSListenOff
	c.HTTPAddr = "127.0.0.1:8080"
	if _, on := c.NATSListenAddr(); on {
		t.Error("off listens")
	}
}
