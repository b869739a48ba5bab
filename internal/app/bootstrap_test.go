package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/keys"
)

// TestFirstStartBanner: the first start prints the development key once by
// default, and with CROSSCHECK_PRINT_FIRST_KEY off (the container image and
// the Kubernetes manifests) it prints no key, only how to make one.
func TestFirstStartBanner(t *testing.T) {
	for _, print := range []bool{true, false} {
		cfg := newConfig(t)
		cfg.PrintFirstKey = print
		var out bytes.Buffer
		m := &Main{Config: cfg, Log: zerolog.Nop(), Out: &out}
		if err := m.Open(context.Background()); err != nil {
			m.Close()
			t.Fatal(err)
		}
		if err := m.Bootstrap(context.Background()); err != nil {
			m.Close()
			t.Fatal(err)
		}
		m.Close()
		banner := out.String()
		printed := strings.Contains(banner, keys.Prefix)
		if printed != print {
			t.Errorf("PrintFirstKey %v: a key in the banner = %v:\n%s", print, printed, banner)
		}
		if !print && !strings.Contains(banner, "/keys") {
			t.Errorf("PrintFirstKey off: the banner does not say how to create a key:\n%s", banner)
		}
	}
}
