package queries

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted (spec section 8).
const MaxIdempotencyKeyLen = 200

// IdempotencyWindow is how long a key binds its request (spec section 4).
const IdempotencyWindow = 24 * time.Hour

// claim is the value of an idempotency entry: which request a key is bound to.
type claim struct {
	RequestID string    `json:"request_id"`
	BodyHash  string    `json:"body_hash"`
	At        time.Time `json:"at"`
}

// ClaimKey derives the bucket key: the key is scoped to one API key, and the
// client's text is hashed so any characters are allowed.
func ClaimKey(fingerprint, idempotencyKey string) string {
	sum := sha256.Sum256([]byte(fingerprint + "\x00" + idempotencyKey))
	return hex.EncodeToString(sum[:])
}

// ValidateIdempotencyKey checks the header value of a request that sent one.
func ValidateIdempotencyKey(k string) error {
	switch {
	case k == "":
		return apperr.New(apperr.InvalidRequest, "Idempotency-Key must not be empty")
	case utf8.RuneCountInString(k) > MaxIdempotencyKeyLen:
		return apperr.New(apperr.InvalidRequest, "Idempotency-Key is %d characters; at most %d are allowed", utf8.RuneCountInString(k), MaxIdempotencyKeyLen)
	}
	return nil
}

// bind binds the Idempotency-Key to fresh, unless it is already bound within
// the window: then it returns the bound request id, or idempotency_conflict
// when the bound request had a different body. The first writer wins.
// It also returns the revision of a binding it made, for unbind.
func (s *Service) bind(ctx context.Context, fingerprint, idempotencyKey, bodyHash, fresh string) (string, uint64, error) {
	key := ClaimKey(fingerprint, idempotencyKey)
	want, _ := json.Marshal(claim{RequestID: fresh, BodyHash: bodyHash, At: s.Now().UTC()})
	var bound *claim
	entry, err := s.Store.Idempotency.Change(ctx, key, &eventstore.Entry{Key: key}, func(cur eventstore.Entry, _ bool) ([]byte, error) {
		bound = nil
		if cur.Revision == 0 {
			return want, nil // the first writer wins
		}
		var c claim
		if err := json.Unmarshal(cur.Value, &c); err != nil {
			return nil, err
		}
		if s.Now().Sub(c.At) >= IdempotencyWindow {
			return want, nil // rule 3: an expired key starts a new submission
		}
		bound = &c
		return nil, nil
	})
	switch {
	case err != nil:
		return "", 0, err
	case bound == nil:
		return fresh, entry.Revision, nil
	case bound.BodyHash != bodyHash:
		e := apperr.New(apperr.IdempotencyConflict, "this Idempotency-Key was used with a different request body in the last 24 hours (request %s)", bound.RequestID)
		e.RequestID = bound.RequestID
		return "", 0, e
	}
	return bound.RequestID, 0, nil
}

// unbind removes a binding this request made, if nothing changed it since:
// a submission refused for good (429, 402) does not use up its key.
func (s *Service) unbind(ctx context.Context, fingerprint, idempotencyKey string, rev uint64) {
	_ = s.Store.Idempotency.Delete(ctx, ClaimKey(fingerprint, idempotencyKey), rev)
}
