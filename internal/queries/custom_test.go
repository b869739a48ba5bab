package queries

import (
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
)

// TestDecodeCustomModels: the form of custom_models is Decode's check;
// whether each entry is a model of the account is the Service's.
func TestDecodeCustomModels(t *testing.T) {
	cat := catalog.Simulated()
	many := `"byom_1","byom_2","byom_3","byom_4","byom_5","byom_6","byom_7","byom_8","byom_9"`
	for _, c := range []struct {
		body, code, says string
	}{
		{`{"mode":"unify","prompt":"p","custom_models":"byom_1"}`, apperr.InvalidModels, "array"},
		{`{"mode":"unify","prompt":"p","custom_models":["llama"]}`, apperr.InvalidModels, `"llama"`},
		{`{"mode":"unify","prompt":"p","custom_models":["byom_"]}`, apperr.InvalidModels, "byom_<id>"},
		{`{"mode":"unify","prompt":"p","custom_models":["byom_1","byom_1"]}`, apperr.InvalidModels, "twice"},
		{`{"mode":"unify","prompt":"p","custom_models":[` + many + `]}`, apperr.InvalidModels, "at most 8"},
		{`{"mode":"unify","prompt":"p","models":{},"custom_models":[]}`, apperr.InvalidModels, "no model selected"},
	} {
		_, err := Decode([]byte(c.body), cat, unifyOnly)
		if apperr.Code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %s saying %q", c.body, err, c.code, c.says)
		}
	}
	// A BYOM-only request decodes with no first-party model selected.
	r, err := Decode([]byte(`{"mode":"unify","prompt":"p","models":{},"custom_models":["byom_1"]}`), cat, unifyOnly)
	if err != nil || len(r.Selected) != 0 || len(r.CustomModels) != 1 {
		t.Fatalf("BYOM-only: %+v, %v", r, err)
	}
	// With models omitted, the defaults run beside the BYOMs.
	r, err = Decode([]byte(`{"mode":"unify","prompt":"p","custom_models":["byom_1"]}`), cat, unifyOnly)
	if err != nil || len(r.Selected) != len(cat.Providers) {
		t.Fatalf("mixed: %+v, %v", r, err)
	}
	// Without a resolver every entry is unknown to the account.
	s := &Service{}
	if err := s.resolveCustom(t.Context(), "acct_x", &r); apperr.Code(err) != apperr.InvalidModel || !strings.Contains(err.Error(), "byom_1") {
		t.Fatalf("no resolver: %v", err)
	}
}
