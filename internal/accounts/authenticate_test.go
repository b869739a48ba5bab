package accounts

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/keys"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// countReads counts Authenticate's reads of the keys bucket until the test
// ends.
func countReads(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	orig := readKey
	readKey = func(ctx context.Context, kv *eventstore.Bucket, fingerprint string) (*projections.KeyDoc, error) {
		n.Add(1)
		return orig(ctx, kv, fingerprint)
	}
	t.Cleanup(func() { readKey = orig })
	return &n
}

// TestAuthenticateSameWork: a key whose fingerprint is unknown and a known
// key with a wrong secret take the same path — one read of the keys bucket
// and the hash comparisons — so the answer's timing does not tell whether a
// fingerprint exists; a good key is answered from the cache.
func TestAuthenticateSameWork(t *testing.T) {
	store := storetest.Open(t)
	gets := countReads(t)
	s := &Service{Store: store, Now: time.Now}
	ctx := context.Background()

	good := keys.Generate()
	stored := events.Key{Fingerprint: good.Fingerprint, AccountID: "acct_x", SecretHash: good.SecretHash(), State: events.StateActive, Seq: 1}
	raw, _ := json.Marshal(stored)
	if _, err := store.Keys.Put(ctx, good.Fingerprint, raw); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, "Bearer "+good.String()); err != nil {
		t.Fatalf("the good key: %v", err)
	}

	other := keys.Generate()
	wrongSecret := keys.Prefix + good.Fingerprint + other.String()[len(keys.Prefix)+keys.FingerprintLen:]
	for name, header := range map[string]string{
		"unknown fingerprint": "Bearer " + other.String(),
		"wrong secret":        "Bearer " + wrongSecret,
	} {
		before := gets.Load()
		_, err := s.Authenticate(ctx, header)
		if apperr.Code(err) != apperr.InvalidAPIKey {
			t.Fatalf("%s: err = %v, want invalid_api_key", name, err)
		}
		if got := gets.Load() - before; got != 1 {
			t.Errorf("%s: %d reads of the keys bucket, want 1 (the same work for both)", name, got)
		}
	}
	before := gets.Load()
	if _, err := s.Authenticate(ctx, "Bearer "+good.String()); err != nil {
		t.Fatal(err)
	}
	if got := gets.Load() - before; got != 0 {
		t.Errorf("the good key read the bucket %d times; want 0 (from the cache)", got)
	}
}
