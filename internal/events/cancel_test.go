package events

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

func TestDecideCancel(t *testing.T) {
	sub := QuerySubmitted{RequestID: "req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD", AccountID: "acct_1", Mode: ModeJustify}
	fold := func(evs ...Event) *Query {
		q := &Query{}
		for i, ev := range evs {
			q.Apply(Record{Seq: uint64(i + 1), Event: ev})
		}
		return q
	}
	for _, c := range []struct {
		name  string
		q     *Query
		event bool
		code  string
	}{
		{"unknown", fold(), false, apperr.NotFound},
		{"queued", fold(sub), true, ""},
		{"running", fold(sub, QueryStarted{}), true, ""},
		{"cancelled already", fold(sub, QueryStarted{}, QueryCancelRequested{KeyFingerprint: "k3y4abcd"}), false, ""},
		{"settled", fold(sub, QueryStarted{}, CreditsSettled{}), false, apperr.QueryEnded},
		{"completed", fold(sub, QueryStarted{}, CreditsSettled{}, QueryCompleted{}), false, apperr.QueryEnded},
		{"failed", fold(sub, QueryStarted{}, CreditsSettled{}, QueryFailed{Code: apperr.ProviderError}), false, apperr.QueryEnded},
	} {
		ev, err := DecideCancel(c.q, "k3y4abcd")
		if (ev != nil) != c.event || (c.code == "") != (err == nil) || (err != nil && apperr.Code(err) != c.code) {
			t.Errorf("%s: got %v, %v; want event %v, code %q", c.name, ev, err, c.event, c.code)
		}
	}
	q := fold(sub, QueryStarted{}, QueryCancelRequested{KeyFingerprint: "k3y4abcd"})
	if !q.CancelRequested || q.Terminal() {
		t.Errorf("after cancel_requested: requested %v, terminal %v", q.CancelRequested, q.Terminal())
	}
	if c := Cancelled(); c.Code != apperr.Cancelled || c.Message == "" {
		t.Errorf("Cancelled() = %+v", c)
	}
}
