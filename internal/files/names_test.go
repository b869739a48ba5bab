package files

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
)

// TestUploadNamesArePrintable: a file's name is refused, before anything
// is read or stored, when it holds what account, key and BYOM names may
// not: bidirectional overrides (INJ3\u202egnp.py displays as INJ3yp.png),
// C1 controls such as U+009B, line and paragraph separators, and
// zero-width characters.
func TestUploadNamesArePrintable(t *testing.T) {
	s := &Service{}
	for _, name := range []string{"INJ3\u202egnp.py", "a\u009b31m.py", "a\u2028b.py", "a\u2029b.py", "a\u200b\u200bb.py", "\ufeffa.py", "a\u2066b.py"} {
		_, err := s.Upload(context.Background(), accounts.Caller{AccountID: "acct_a"}, name, "", strings.NewReader("x = 1\n"))
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Code != apperr.InvalidRequest {
			t.Errorf("upload named %q: %v; want invalid_request", name, err)
		}
	}
}
