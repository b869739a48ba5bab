package accounts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/keys"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// A fingerprint is taken as soon as its key_created event is stored, before
// the keys read model has applied it (no projection runs here): a new key
// never gets the fingerprint of a key created a moment ago elsewhere.
func TestFingerprintTakenBeforeTheReadModelHasIt(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now}
	ctx := context.Background()
	existing := keys.Generate()
	env, err := events.Wrap(events.AggregateAccount, "acct_other", events.KeyCreated{Fingerprint: existing.Fingerprint, Name: "elsewhere", SecretHash: existing.SecretHash(), AUPAccepted: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, env, nil); err != nil {
		t.Fatal(err)
	}
	taken, err := s.fingerprintTaken(ctx, existing.Fingerprint)
	if err != nil || !taken {
		t.Fatalf("fingerprint of a stored key: taken %v (%v), want true", taken, err)
	}
	if taken, err := s.fingerprintTaken(ctx, keys.Generate().Fingerprint); err != nil || taken {
		t.Fatalf("a new fingerprint: taken %v (%v), want false", taken, err)
	}
	// newKey passes over the taken fingerprint.
	fresh := keys.Generate()
	gen := []keys.Key{existing, fresh}
	s.generate = func() keys.Key { k := gen[0]; gen = gen[1:]; return k }
	if k, err := s.newKey(ctx); err != nil || k.Fingerprint != fresh.Fingerprint {
		t.Fatalf("newKey = %s (%v), want the second key %s", k.Fingerprint, err, fresh.Fingerprint)
	}
}

// The process keeps at most its bound of account aggregates; one forgotten
// is read again from the stream.
func TestAccountCacheIsBounded(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now}
	s.init.Do(func() { s.accounts = lru.New[string, *cached](2) })
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		a, err := s.CreateAccount(ctx, "bounded", events.PlanFree)
		if err != nil {
			t.Fatalf("account %d: %v", i, err)
		}
		ids = append(ids, a.ID)
	}
	if n := s.accounts.Len(); n != 2 {
		t.Fatalf("%d accounts cached, want 2", n)
	}
	a, err := s.Account(ctx, ids[0]) // forgotten: loaded again
	if err != nil || a.Name != "bounded" {
		t.Fatalf("the forgotten account: %+v, %v", a, err)
	}
}

// TestNotFoundEchoesAreBounded: the admin API's not-found answers for an
// account id or a key fingerprint that is not one echo at most 64
// characters of it, with control characters escaped; they echoed the whole
// path segment.
func TestNotFoundEchoesAreBounded(t *testing.T) {
	s := &Service{}
	long := "acct_\n\x1b[31m" + strings.Repeat("x", 5000)
	_, err1 := s.Account(context.Background(), long)
	_, err2 := s.Transition(context.Background(), long, "revoke")
	for _, err := range []error{err1, err2} {
		if err == nil || len(err.Error()) > 200 || strings.ContainsAny(err.Error(), "\n\x1b") {
			t.Errorf("not found: %.300q", err)
		}
	}
}
