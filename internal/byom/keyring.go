package byom

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/crosscheck/crosscheck/internal/events"
)

// MasterKeyFile is the file in the data dir that holds the key-encryption
// keys when CROSSCHECK_MASTER_KEY is not set: one base64 key per line, the
// first the current one.
const MasterKeyFile = "master-keys"

// MaxMasterKeys bounds the keys a keyring holds.
const MaxMasterKeys = 16

// ErrNoKey is in the chain of the error Open returns for a ciphertext under
// a key this process does not hold.
var ErrNoKey = errors.New("the key-encryption key is not available")

// Keyring holds the key-encryption keys: the current one seals, any opens
// what was sealed under it. Each key's id is derived from the key, so the
// same key has the same id in every process.
type Keyring struct {
	mu      sync.RWMutex
	current string
	keys    map[string]cipher.AEAD
	order   [][]byte
	// file is the data dir's key file when the keys come from it.
	file string
}

// KeyID returns the id of a key-encryption key: mk_ and 12 hex digits of a
// hash of the key, which tells nothing of the key.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("crosscheck key-encryption key id\x00"))
	h.Write(key)
	return "mk_" + hex.EncodeToString(h.Sum(nil)[:6])
}

// parseKeys reads comma- or line-separated base64 keys of 32 bytes each.
func parseKeys(s string) ([][]byte, error) {
	var out [][]byte
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(f)
		if err != nil {
			if k, err = base64.RawURLEncoding.DecodeString(f); err != nil {
				return nil, fmt.Errorf("entry %d is not base64 (make one with: openssl rand -base64 32)", len(out)+1)
			}
		}
		if len(k) != 32 {
			return nil, fmt.Errorf("entry %d is %d bytes; an AES-256 key is 32 bytes (openssl rand -base64 32)", len(out)+1, len(k))
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("no key (make one with: openssl rand -base64 32)")
	}
	if len(out) > MaxMasterKeys {
		return nil, fmt.Errorf("%d keys; at most %d", len(out), MaxMasterKeys)
	}
	return out, nil
}

func (k *Keyring) set(keys [][]byte) error {
	m := map[string]cipher.AEAD{}
	for _, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			return err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return err
		}
		m[KeyID(key)] = aead
	}
	k.keys, k.current, k.order = m, KeyID(keys[0]), keys
	return nil
}

// NewKeyring returns a keyring of the given keys, the first the current one.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no key")
	}
	k := &Keyring{}
	return k, k.set(keys)
}

// LoadKeyring returns the keyring of CROSSCHECK_MASTER_KEY (env, when not
// empty), else of the data dir's key file; when that file is missing and
// create is set, it generates a key into it (mode 0600). Without env, a file
// or create, it returns a keyring that holds no key: every Seal and Open
// fails with ErrNoKey.
func LoadKeyring(env, dataDir string, create bool) (*Keyring, error) {
	if strings.TrimSpace(env) != "" {
		keys, err := parseKeys(env)
		if err != nil {
			return nil, fmt.Errorf("CROSSCHECK_MASTER_KEY: %w", err)
		}
		return NewKeyring(keys...)
	}
	k := &Keyring{file: filepath.Join(dataDir, MasterKeyFile)}
	err := k.reload()
	switch {
	case err == nil:
		return k, nil
	case errors.Is(err, os.ErrNotExist) && create:
		key := make([]byte, 32)
		rand.Read(key)
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
		if err := writeKeys(k.file, [][]byte{key}); err != nil {
			return nil, err
		}
		return k, k.set([][]byte{key})
	case errors.Is(err, os.ErrNotExist):
		return &Keyring{}, nil
	}
	return nil, err
}

// reload reads the key file again.
func (k *Keyring) reload() error {
	b, err := os.ReadFile(k.file)
	if err != nil {
		return err
	}
	keys, err := parseKeys(string(b))
	if err != nil {
		return fmt.Errorf("master key file %s: %w", k.file, err)
	}
	return k.set(keys)
}

// writeKeys replaces the key file atomically, mode 0600.
func writeKeys(path string, keys [][]byte) error {
	var b strings.Builder
	for _, key := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	return nil
}

// Current returns the id of the key that seals, "" when there is none.
func (k *Keyring) Current() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.current
}

// Seal encrypts plain under the current key, bound to aad (the BYOM it
// belongs to): a ciphertext moved to another BYOM does not open.
func (k *Keyring) Seal(plain, aad []byte) (events.Sealed, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	aead := k.keys[k.current]
	if aead == nil {
		return events.Sealed{}, fmt.Errorf("%w: set CROSSCHECK_MASTER_KEY", ErrNoKey)
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	rand.Read(nonce)
	out := aead.Seal(nonce, nonce, plain, aad)
	return events.Sealed{KeyID: k.current, Ciphertext: base64.StdEncoding.EncodeToString(out)}, nil
}

// Open decrypts s. A key id this keyring does not hold makes a keyring of
// the data dir's file read the file again (another process may have rotated);
// still missing, the error wraps ErrNoKey and names the key id. The error
// never holds any of the plaintext.
func (k *Keyring) Open(s events.Sealed, aad []byte) ([]byte, error) {
	k.mu.RLock()
	aead := k.keys[s.KeyID]
	k.mu.RUnlock()
	if aead == nil && k.file != "" {
		k.mu.Lock()
		if k.keys[s.KeyID] == nil {
			_ = k.reload()
		}
		aead = k.keys[s.KeyID]
		k.mu.Unlock()
	}
	if aead == nil {
		return nil, fmt.Errorf("%w: the secret is sealed under key %s, which this process does not have (CROSSCHECK_MASTER_KEY)", ErrNoKey, s.KeyID)
	}
	b, err := base64.StdEncoding.DecodeString(s.Ciphertext)
	if err != nil || len(b) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("the sealed secret is malformed")
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("the sealed secret does not open under key %s", s.KeyID)
	}
	return plain, nil
}

// Rotate makes a new current key. A keyring of the data dir's file
// generates one and writes it first in the file, the older keys kept after
// it so what they sealed still opens; a keyring of CROSSCHECK_MASTER_KEY
// cannot write the variable, so its current key stays (the operator puts
// the new key first in the variable of every process, then rotates). It
// returns the current key id.
func (k *Keyring) Rotate() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.file == "" {
		if k.current == "" {
			return "", ErrNoKey
		}
		return k.current, nil
	}
	key := make([]byte, 32)
	rand.Read(key)
	keys := append([][]byte{key}, k.order...)
	if len(keys) > MaxMasterKeys {
		keys = keys[:MaxMasterKeys]
	}
	if err := writeKeys(k.file, keys); err != nil {
		return "", err
	}
	if err := k.set(keys); err != nil {
		return "", err
	}
	return k.current, nil
}
