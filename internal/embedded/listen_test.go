package embedded

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
)

// A server that advertises its port writes its URL and token into the data
// dir, mode 0600, for the commands that run beside it (crosscheck events):
// Advertised finds them while the server holds the data dir, and not after
// it stopped.
func TestAdvertisedPortAndToken(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Advertised(dir); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("an empty data dir: %v", err)
	}
	s, err := Start(Options{DataDir: dir, Port: -1, Token: "tok_" + t.Name(), Advertise: true})
	if err != nil {
		t.Fatal(err)
	}
	url, token, err := Advertised(dir)
	if err != nil || url == "" || token != "tok_"+t.Name() {
		t.Fatalf("advertised %q %q %v", url, token, err)
	}
	for _, f := range []string{URLFile, TokenFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi, err)
		}
	}
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatalf("connect to the advertised URL: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("connected without the token")
	}
	s.Stop()
	if _, _, err := Advertised(dir); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("after the stop: %v", err)
	}
	// Files a killed server left behind are not taken for a running one.
	for _, f := range []string{URLFile, TokenFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(url+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := Advertised(dir); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("stale files: %v", err)
	}
	// A server that listens on no port advertises none, and says so.
	s, err = Start(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, _, err := Advertised(dir); !errors.Is(err, ErrNotAdvertised) || !errors.Is(err, ErrLocked) {
		t.Fatalf("a server without a port: %v", err)
	}
}
