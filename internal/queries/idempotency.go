package queries

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// binding is an Idempotency-Key's entry as read from the bucket: the
// entry (Revision 0 when absent) and the request it binds, nil when it
// binds none within the window (absent, or older than 24 hours: rule 3).
type binding struct {
	entry eventstore.Entry
	claim *claim
}

// lookup reads the binding of the Idempotency-Key; it writes nothing. It
// returns idempotency_conflict when the key is bound within the window to
// a request with another body.
func (s *Service) lookup(ctx context.Context, fingerprint, idempotencyKey, bodyHash string) (binding, error) {
	key := ClaimKey(fingerprint, idempotencyKey)
	e, err := s.Store.Idempotency.Get(ctx, key)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return binding{entry: eventstore.Entry{Key: key}}, nil
	case err != nil:
		return binding{}, err
	}
	var c claim
	if err := json.Unmarshal(e.Value, &c); err != nil {
		return binding{}, err
	}
	b := binding{entry: e}
	if s.Now().Sub(c.At) < IdempotencyWindow {
		b.claim = &c
	}
	return b, conflict(b.claim, bodyHash)
}

// conflict returns idempotency_conflict, naming the bound request, when c
// binds a request with a body other than bodyHash's.
func conflict(c *claim, bodyHash string) error {
	if c == nil || c.BodyHash == bodyHash {
		return nil
	}
	e := apperr.New(apperr.IdempotencyConflict, "this Idempotency-Key was used with a different request body in the last 24 hours (request %s)", c.RequestID)
	e.RequestID = c.RequestID
	return e
}

// bind binds the Idempotency-Key to fresh, unless it is already bound within
// the window: then it returns the bound request id, or idempotency_conflict
// when the bound request had a different body. The first writer wins.
// known is the binding lookup read, which saves a read: a binding made
// since is found by the compare-and-set. It also returns the revision of a
// binding it made, for unbind.
func (s *Service) bind(ctx context.Context, fingerprint, idempotencyKey, bodyHash, fresh string, known binding) (string, uint64, error) {
	key := ClaimKey(fingerprint, idempotencyKey)
	want, _ := json.Marshal(claim{RequestID: fresh, BodyHash: bodyHash, At: s.Now().UTC()})
	var bound *claim
	entry, err := s.Store.Idempotency.Change(ctx, key, &known.entry, func(cur eventstore.Entry, _ bool) ([]byte, error) {
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
	}
	if err := conflict(bound, bodyHash); err != nil {
		return "", 0, err
	}
	return bound.RequestID, 0, nil
}

// unbind removes a binding this request made, if nothing changed it since:
// a submission refused for good (429, 402) after its key was bound does not
// use up its key, and leaves nothing in the bucket (a purge whose marker
// lives eventstore.MarkerTTL; a delete's would stay for the bucket's 25 h).
func (s *Service) unbind(ctx context.Context, fingerprint, idempotencyKey string, rev uint64) {
	_ = s.Store.Idempotency.Purge(ctx, ClaimKey(fingerprint, idempotencyKey), rev, eventstore.MarkerTTL)
}
