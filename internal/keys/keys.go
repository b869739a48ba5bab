// Package keys is the API key format of spec section 2.5: the prefix "xchk_",
// an 8-character public fingerprint and a 32-character secret, 45 characters in
// all. The fingerprint may be logged; the secret never is, and only its SHA-256
// hash is stored.
package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"
)

const (
	// Prefix starts every key.
	Prefix = "xchk_"
	// FingerprintLen is the length of the public fingerprint.
	FingerprintLen = 8
	// SecretLen is the length of the secret body.
	SecretLen = 32
	// Len is the length of a whole key.
	Len = len(Prefix) + FingerprintLen + SecretLen
)

const (
	fingerprintAlphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	secretAlphabet      = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// ErrMalformed is returned by Parse for anything that is not a well-formed key.
// Its message never contains the input.
var ErrMalformed = errors.New("malformed API key")

// Key is a parsed API key.
type Key struct {
	Fingerprint string
	secret      string
}

// String returns the whole key. Call it only to show a new key to its owner.
func (k Key) String() string { return Prefix + k.Fingerprint + k.secret }

// SecretHash returns the hex SHA-256 of the secret body, the only form stored.
// The secret has 190 bits of entropy, so a plain hash suffices.
func (k Key) SecretHash() string {
	sum := sha256.Sum256([]byte(k.secret))
	return hex.EncodeToString(sum[:])
}

// Verify reports, in constant time, whether k's secret hashes to storedHash.
func (k Key) Verify(storedHash string) bool {
	return subtle.ConstantTimeCompare([]byte(k.SecretHash()), []byte(storedHash)) == 1
}

// Generate returns a new random key.
func Generate() Key {
	return Key{Fingerprint: random(fingerprintAlphabet, FingerprintLen), secret: random(secretAlphabet, SecretLen)}
}

func random(alphabet string, n int) string {
	// rand.Text is unbiased but fixed to base32; draw bytes and reject instead.
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	limit := byte(256 - 256%len(alphabet))
	for len(out) < n {
		_, _ = rand.Read(buf)
		for _, b := range buf {
			if b < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// Parse parses a whole key. It returns ErrMalformed for a wrong prefix, length
// or alphabet.
func Parse(s string) (Key, error) {
	if len(s) != Len || !strings.HasPrefix(s, Prefix) {
		return Key{}, ErrMalformed
	}
	fp, secret := s[len(Prefix):len(Prefix)+FingerprintLen], s[len(Prefix)+FingerprintLen:]
	if !only(fp, fingerprintAlphabet) || !only(secret, secretAlphabet) {
		return Key{}, ErrMalformed
	}
	return Key{Fingerprint: fp, secret: secret}, nil
}

// FromBearer parses the key out of an Authorization header value "Bearer <key>".
func FromBearer(header string) (Key, error) {
	const scheme = "bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return Key{}, ErrMalformed
	}
	return Parse(strings.TrimSpace(header[len(scheme):]))
}

// ValidFingerprint reports whether s has the form of a fingerprint.
func ValidFingerprint(s string) bool {
	return len(s) == FingerprintLen && only(s, fingerprintAlphabet)
}

func only(s, alphabet string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(alphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}
