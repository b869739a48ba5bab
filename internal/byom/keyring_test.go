package byom

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealOpen(t *testing.T) {
	ring, err := NewKeyring(key(1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ring.Seal([]byte("sk-secret"), []byte("acct/byom_1"))
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != KeyID(key(1)) || strings.Contains(s.Ciphertext, "sk-secret") {
		t.Fatalf("sealed %+v", s)
	}
	got, err := ring.Open(s, []byte("acct/byom_1"))
	if err != nil || string(got) != "sk-secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Another model's associated data does not open it.
	if _, err := ring.Open(s, []byte("acct/byom_2")); err == nil {
		t.Fatal("a secret opened for another model")
	}
	// Another key does not either, and says which key it needs.
	other, _ := NewKeyring(key(2))
	if _, err := other.Open(s, []byte("acct/byom_1")); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), s.KeyID) {
		t.Fatalf("Open under another key: %v", err)
	}
	// An older key still opens what it sealed.
	both, _ := NewKeyring(key(2), key(1))
	if got, err := both.Open(s, []byte("acct/byom_1")); err != nil || string(got) != "sk-secret" {
		t.Fatalf("Open with the old key second: %q, %v", got, err)
	}
	if both.Current() != KeyID(key(2)) {
		t.Fatalf("current %s, want the first key", both.Current())
	}
	// A tampered ciphertext does not open, and the error holds no plaintext.
	b, _ := base64.StdEncoding.DecodeString(s.Ciphertext)
	b[len(b)-1] ^= 1
	s.Ciphertext = base64.StdEncoding.EncodeToString(b)
	if _, err := ring.Open(s, []byte("acct/byom_1")); err == nil || strings.Contains(err.Error(), "sk-secret") {
		t.Fatalf("tampered: %v", err)
	}
}

func TestLoadKeyring(t *testing.T) {
	dir := t.TempDir()
	empty, err := LoadKeyring("", dir, false)
	if err != nil || empty.Current() != "" {
		t.Fatalf("no file, no create: %v %q", err, empty.Current())
	}
	if _, err := empty.Seal([]byte("x"), nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Seal without a key: %v", err)
	}
	ring, err := LoadKeyring("", dir, true)
	if err != nil || ring.Current() == "" {
		t.Fatalf("create: %v", err)
	}
	info, err := os.Stat(filepath.Join(dir, MasterKeyFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, info)
	}
	again, _ := LoadKeyring("", dir, true)
	if again.Current() != ring.Current() {
		t.Fatal("a second start made another key")
	}
	s, _ := ring.Seal([]byte("v"), nil)
	// Another process rotates; this one reads the file again for the new id.
	id, err := again.Rotate()
	if err != nil || id == ring.Current() {
		t.Fatalf("rotate: %v %s", err, id)
	}
	s2, _ := again.Seal([]byte("w"), nil)
	if got, err := ring.Open(s2, nil); err != nil || string(got) != "w" {
		t.Fatalf("open after another process rotated: %q %v", got, err)
	}
	if got, err := again.Open(s, nil); err != nil || string(got) != "v" {
		t.Fatalf("old key after rotation: %q %v", got, err)
	}

	env := base64.StdEncoding.EncodeToString(key(3)) + "," + base64.StdEncoding.EncodeToString(key(4))
	fromEnv, err := LoadKeyring(env, dir, true)
	if err != nil || fromEnv.Current() != KeyID(key(3)) {
		t.Fatalf("env: %v", err)
	}
	if id, err := fromEnv.Rotate(); err != nil || id != KeyID(key(3)) {
		t.Fatalf("env rotate: %v %s", err, id)
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("short")), ","} {
		if _, err := LoadKeyring(bad, dir, false); err == nil {
			t.Errorf("CROSSCHECK_MASTER_KEY %q accepted", bad)
		} else if strings.Contains(err.Error(), bad) && len(bad) > 3 {
			t.Errorf("the error echoes the key: %v", err)
		}
	}
}

func FuzzParseKeys(f *testing.F) {
	f.Add(base64.StdEncoding.EncodeToString(key(1)))
	f.Add(base64.StdEncoding.EncodeToString(key(1)) + "\n" + base64.RawURLEncoding.EncodeToString(key(2)))
	f.Add("")
	f.Add(",,,")
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := parseKeys(s)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > MaxMasterKeys {
			t.Fatalf("%d keys", len(keys))
		}
		for _, k := range keys {
			if len(k) != 32 {
				t.Fatalf("a key of %d bytes", len(k))
			}
		}
	})
}
