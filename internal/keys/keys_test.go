package keys

import (
	"strings"
	"testing"
)

func TestGenerateParseRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		k := Generate()
		s := k.String()
		if len(s) != 45 || !strings.HasPrefix(s, "xchk_") {
			t.Fatalf("generated key %d chars, prefix %q; want 45 and xchk_", len(s), s[:5])
		}
		p, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(generated) = %v", err)
		}
		if p.Fingerprint != k.Fingerprint || !p.Verify(k.SecretHash()) {
			t.Fatalf("parsed key does not verify against its own hash")
		}
		if seen[s] {
			t.Fatalf("duplicate key generated")
		}
		seen[s] = true
	}
}

func TestParseRejects(t *testing.T) {
	good := Generate().String()
	for name, in := range map[string]string{
		"empty":         "",
		"wrong prefix":  "sk_x_" + good[5:],
		"upper prefix":  "XCHK_" + good[5:],
		"short":         good[:44],
		"long":          good + "a",
		"bad fp char":   good[:5] + "A" + good[6:],
		"bad secret":    good[:20] + "-" + good[21:],
		"unicode":       good[:44] + "é",
		"spaces inside": good[:13] + " " + good[14:],
	} {
		if _, err := Parse(in); err != ErrMalformed {
			t.Errorf("%s: Parse = %v, want ErrMalformed", name, err)
		}
	}
}

func TestVerifyWrongSecret(t *testing.T) {
	a, b := Generate(), Generate()
	if a.Verify(b.SecretHash()) {
		t.Fatal("a key verified against another key's hash")
	}
}

func TestFromBearer(t *testing.T) {
	k := Generate()
	for _, h := range []string{"Bearer " + k.String(), "bearer " + k.String(), "BEARER  " + k.String()} {
		got, err := FromBearer(h)
		if err != nil || got.Fingerprint != k.Fingerprint {
			t.Errorf("FromBearer(%q...) = %v", h[:7], err)
		}
	}
	for _, h := range []string{"", "Bearer", "Basic " + k.String(), k.String()} {
		if _, err := FromBearer(h); err == nil {
			t.Errorf("FromBearer accepted a header without the Bearer scheme")
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Generate().String())
	f.Add("xchk_")
	f.Add("Bearer xchk_abcdefgh0123456789abcdefABCDEF0123456789")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		if err != nil {
			if len(s) >= 8 && strings.Contains(err.Error(), s) {
				t.Fatalf("error message echoes the input")
			}
			return
		}
		if k.String() != s {
			t.Fatalf("round trip: got %q from %q", k.String(), s)
		}
		if !ValidFingerprint(k.Fingerprint) {
			t.Fatalf("parsed fingerprint %q is not valid", k.Fingerprint)
		}
		if _, err := FromBearer("Bearer " + s); err != nil {
			t.Fatalf("FromBearer rejected a key Parse accepts: %v", err)
		}
	})
}
