// Package accounts holds the account and API key commands and authentication.
// Every change is an event on ev.account.<account_id>.<event>, appended with
// the account's expected last sequence; the keys bucket is its projection.
package accounts

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/keys"
	"github.com/crosscheck/crosscheck/internal/lru"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// Service runs account commands.
type Service struct {
	Store *eventstore.Store
	Now   func() time.Time
	// MaxKeys bounds the keys of an account that are not revoked; zero is
	// no bound.
	MaxKeys int
	// SnapshotEvery and SnapshotInterval are when the process writes the
	// snapshot of an account it holds (zero: DefaultSnapshotEvery and
	// DefaultSnapshotInterval): after that many events applied since the
	// last one, or at the first command that long after the last one.
	SnapshotEvery    int
	SnapshotInterval time.Duration

	cache    keyCache
	init     sync.Once
	accounts *lru.Cache[string, *cached] // by account id
	// eventsRead counts the account events read from the stream.
	eventsRead atomic.Int64

	// generate makes a new key; nil means keys.Generate.
	generate func() keys.Key
}

var plans = map[string]bool{events.PlanFree: true, events.PlanBasic: true, events.PlanPro: true, events.PlanEnterprise: true}

// NewAccountID returns a new account id.
func NewAccountID() string { return "acct_" + strings.ToLower(events.NewID()) }

// CreateAccount opens an account on plan.
func (s *Service) CreateAccount(ctx context.Context, name, plan string) (*AccountView, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, apperr.New(apperr.InvalidRequest, "name is required")
	}
	if plan == "" {
		plan = events.PlanFree
	}
	if !plans[plan] {
		return nil, apperr.New(apperr.InvalidRequest, "plan must be one of free, basic, pro, enterprise; got %q", plan)
	}
	id := NewAccountID()
	var out AccountView
	err := s.Update(ctx, id, func(a *events.Account) { out = ViewOf(a, s.Now()) },
		func(a *events.Account) ([]events.Event, error) {
			if a.Exists() {
				return nil, nil // this step landed before a later one conflicted
			}
			return []events.Event{events.AccountCreated{AccountID: id, Name: name, Plan: plan}}, nil
		},
		s.Rollover,
	)
	return &out, err
}

// Rollover is the step that grants plan credits when they are due: the Free
// plan's credits at creation, a monthly plan's credits once per calendar
// month, by whichever process notices the new month first.
func (s *Service) Rollover(a *events.Account) ([]events.Event, error) {
	if ev := a.Rollover(s.Now()); ev != nil {
		return []events.Event{ev}, nil
	}
	return nil, nil
}

// Account returns a view of the account with id, or not_found. Plan credits
// that are due are granted first.
func (s *Service) Account(ctx context.Context, id string) (*AccountView, error) {
	if !events.ValidPrefixedID("acct", id) {
		return nil, apperr.New(apperr.NotFound, "no account %.64q", id)
	}
	var out *AccountView
	err := s.Update(ctx, id, func(a *events.Account) {
		if a.Exists() {
			v := ViewOf(a, s.Now())
			out = &v
		}
	}, s.Refreshed(ctx, id), func(a *events.Account) ([]events.Event, error) {
		if !a.Exists() {
			return nil, nil
		}
		return s.Rollover(a)
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		s.accounts.Delete(id)
		return nil, apperr.New(apperr.NotFound, "no account %.64q", id)
	}
	return out, nil
}

// CreateKey creates an API key for the account. The returned keys.Key is the
// only place the secret ever exists: show it once and drop it. An account
// that has MaxKeys keys that are not revoked gets none (invalid_request):
// every per-key bound of the service is multiplied by its keys.
func (s *Service) CreateKey(ctx context.Context, accountID, name string, acceptAUP bool) (keys.Key, *events.Key, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return keys.Key{}, nil, apperr.New(apperr.InvalidRequest, "name is required")
	}
	if !acceptAUP {
		return keys.Key{}, nil, apperr.New(apperr.InvalidRequest, "accept_aup must be true: the acceptable-use policy must be accepted to create a key")
	}
	if _, err := s.Account(ctx, accountID); err != nil {
		return keys.Key{}, nil, err
	}
	k, err := s.newKey(ctx)
	if err != nil {
		return keys.Key{}, nil, err
	}
	var key *events.Key
	err = s.Update(ctx, accountID, func(a *events.Account) { key = copyKey(a.Keys[k.Fingerprint]) },
		func(a *events.Account) ([]events.Event, error) {
			for {
				cur := a.Keys[k.Fingerprint]
				switch {
				case cur != nil && cur.SecretHash == k.SecretHash():
					return nil, nil // this step landed before a later one conflicted
				case cur == nil:
					if n := unrevoked(a); s.MaxKeys > 0 && n >= s.MaxKeys {
						return nil, apperr.New(apperr.InvalidRequest, "the account has %d keys that are not revoked, the most an account may have (CROSSCHECK_ACCOUNT_MAX_KEYS); revoke one it no longer uses (POST /admin/v1/keys/{fingerprint}/revoke) before creating another", n)
					}
					return []events.Event{events.KeyCreated{Fingerprint: k.Fingerprint, Name: name, SecretHash: k.SecretHash(), AUPAccepted: true}}, nil
				}
				// The account has a key with this fingerprint already.
				if k, err = s.newKey(ctx); err != nil {
					return nil, err
				}
			}
		})
	if err != nil {
		return keys.Key{}, nil, err
	}
	if err := s.waitKey(ctx, key.Fingerprint, key.Seq); err != nil {
		return keys.Key{}, nil, err
	}
	doc := projections.KeyDocOf(key)
	s.cache.put(&doc)
	return k, key, nil
}

// unrevoked counts a's keys that are not revoked: a disabled or suspended
// key may be used again.
func unrevoked(a *events.Account) int {
	n := 0
	for _, k := range a.Keys {
		if k.State != events.StateRevoked {
			n++
		}
	}
	return n
}

// newKey generates a key whose fingerprint no account has.
func (s *Service) newKey(ctx context.Context) (keys.Key, error) {
	gen := s.generate
	if gen == nil {
		gen = keys.Generate
	}
	for {
		k := gen()
		taken, err := s.fingerprintTaken(ctx, k.Fingerprint)
		if err != nil || !taken {
			return k, err
		}
	}
}

// fingerprintTaken reports whether any account has a key with fingerprint.
// The keys read model answers for the events its projection has applied;
// the key creations after its checkpoint are read from the stream, so a key
// created a moment ago by another process counts although the read model
// has not caught up.
func (s *Service) fingerprintTaken(ctx context.Context, fingerprint string) (bool, error) {
	if k, err := projections.GetKey(ctx, s.Store.Keys, fingerprint); err != nil || k != nil {
		return k != nil, err
	}
	pos, err := projections.Checkpoint(ctx, s.Store.Projections, projections.ConsumerAccounts)
	if err != nil {
		return false, err
	}
	created := events.Subject(events.AggregateAccount, "*", events.KeyCreated{}.EventName())
	recs, err := s.Store.Load(ctx, s.Store.Accounts, created, pos+1)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if e, ok := r.Event.(events.KeyCreated); ok && e.Fingerprint == fingerprint {
			return true, nil
		}
	}
	return false, nil
}

// Transition applies a lifecycle action to the key with fingerprint.
func (s *Service) Transition(ctx context.Context, fingerprint, action string) (*events.Key, error) {
	if !keys.ValidFingerprint(fingerprint) {
		return nil, apperr.New(apperr.NotFound, "no key with fingerprint %.64q", fingerprint)
	}
	projected, err := projections.GetKey(ctx, s.Store.Keys, fingerprint)
	if err != nil {
		return nil, err
	}
	if projected == nil {
		return nil, apperr.New(apperr.NotFound, "no key with fingerprint %.64q", fingerprint)
	}
	var key *events.Key
	err = s.Update(ctx, projected.AccountID, func(a *events.Account) { key = copyKey(a.Keys[fingerprint]) }, func(a *events.Account) ([]events.Event, error) {
		k := a.Keys[fingerprint]
		if k == nil {
			return nil, apperr.New(apperr.NotFound, "no key with fingerprint %.64q", fingerprint)
		}
		ev, err := events.DecideKey(k, action)
		if err != nil || ev == nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.waitKey(ctx, fingerprint, key.Seq); err != nil {
		return nil, err
	}
	doc := projections.KeyDocOf(key)
	s.cache.put(&doc)
	return key, nil
}

// waitKey waits until the keys projection has applied seq for fingerprint, so
// a key is usable as soon as its command returns.
func (s *Service) waitKey(ctx context.Context, fingerprint string, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		k, err := projections.GetKey(ctx, s.Store.Keys, fingerprint)
		if err == nil && k != nil && k.Seq >= seq {
			return nil
		}
		select {
		case <-ctx.Done():
			return apperr.New(apperr.ServiceRestarting, "the key change was recorded but is not yet visible; retry the request")
		case <-time.After(delay):
		}
	}
}

// Caller is the authenticated owner of a request.
type Caller struct {
	AccountID   string
	Fingerprint string
}

// Authenticate checks an Authorization header value. It returns the statuses
// of spec section 5: invalid_api_key for anything that does not verify
// (including a wrong prefix), then key_revoked, key_suspended, key_disabled.
func (s *Service) Authenticate(ctx context.Context, header string) (Caller, error) {
	k, err := keys.FromBearer(header)
	if err != nil {
		return Caller{}, apperr.New(apperr.InvalidAPIKey, "the API key is missing or does not verify; send Authorization: Bearer <key>")
	}
	// A key that verifies against the cache is in. Any other, whether its
	// fingerprint is unknown here or its secret is wrong, takes the same
	// path: one read of the keys bucket (a key another process has just
	// created may not have reached this cache yet) and one more hash
	// comparison, so the answer's timing does not tell whether a
	// fingerprint exists.
	stored := s.cache.get(k.Fingerprint)
	if !verifies(k, stored) {
		var err error
		if stored, err = readKey(ctx, s.Store.Keys, k.Fingerprint); err != nil {
			return Caller{}, err
		}
		if stored != nil {
			s.cache.put(stored)
		}
		if !verifies(k, stored) {
			return Caller{}, apperr.New(apperr.InvalidAPIKey, "the API key does not verify")
		}
	}
	switch stored.State {
	case events.StateRevoked:
		return Caller{}, apperr.New(apperr.KeyRevoked, "this API key was revoked; create a new key")
	case events.StateSuspended:
		return Caller{}, apperr.New(apperr.KeySuspended, "this API key is suspended by an administrator; contact support")
	case events.StateDisabled:
		return Caller{}, apperr.New(apperr.KeyDisabled, "this API key is disabled by its owner; enable it to use it again")
	}
	return Caller{AccountID: stored.AccountID, Fingerprint: stored.Fingerprint}, nil
}

// verifies reports whether k's secret matches stored's hash; for no stored
// key it compares against a dummy hash, the same work, and reports false.
func verifies(k keys.Key, stored *projections.KeyDoc) bool {
	hash := dummyHash
	if stored != nil {
		hash = stored.SecretHash
	}
	return k.Verify(hash) && stored != nil
}

// readKey reads a key of the keys bucket for Authenticate; a test counts
// the reads through it.
var readKey = projections.GetKey

// dummyHash keeps verification of an unknown fingerprint as slow as a known one.
var dummyHash = keys.Generate().SecretHash()

func copyKey(k *events.Key) *events.Key {
	if k == nil {
		return nil
	}
	cp := *k
	return &cp
}

// AccountView is an account as the admin API shows it.
type AccountView struct {
	ID        string
	Name      string
	Plan      string
	CreatedAt time.Time
	Keys      []events.Key
	// Money, in micro-credits.
	BalanceMicros  int64
	ReservedMicros int64
	SpentThisMonth int64
	CapMicros      *int64
	OpenQueries    int
	LedgerHead     string
	GrantedPeriod  string
	LastSeq        uint64
}

// ViewOf is the admin view of an account at now.
func ViewOf(a *events.Account, now time.Time) AccountView {
	v := AccountView{
		ID: a.ID, Name: a.Name, Plan: a.Plan, CreatedAt: a.CreatedAt,
		BalanceMicros: a.Ledger.BalanceMicros, ReservedMicros: a.Ledger.ReservedMicros,
		SpentThisMonth: a.SpentThisMonth(now), OpenQueries: len(a.Ledger.Open),
		LedgerHead: a.Ledger.Head, GrantedPeriod: a.Ledger.GrantedPeriod, LastSeq: a.LastSeq,
	}
	if a.Ledger.CapMicros != nil {
		c := *a.Ledger.CapMicros
		v.CapMicros = &c
	}
	for _, fp := range a.KeyOrder {
		v.Keys = append(v.Keys, *a.Keys[fp])
	}
	return v
}

// StoredEvents returns the number of the account's events in the ACCOUNTS
// stream (its creation, keys, BYOMs and ledger) and their stored bytes; it
// reads them all. not_found for an unknown account.
func (s *Service) StoredEvents(ctx context.Context, id string) (int, int64, error) {
	if _, err := s.Account(ctx, id); err != nil {
		return 0, 0, err
	}
	recs, err := s.Store.Load(ctx, s.Store.Accounts, events.Filter(events.AggregateAccount, id), 1)
	if err != nil {
		return 0, 0, err
	}
	var size int64
	for _, r := range recs {
		size += int64(len(r.Raw))
	}
	return len(recs), size, nil
}
