package queries

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/lru"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// Credits reserves a query's estimated cost and releases it.
type Credits interface {
	// Check returns the refusal a reservation of amount for a new query
	// would meet now, without reserving; nil when it may be admitted.
	Check(ctx context.Context, accountID string, amount int64) error
	// Reserve holds amount for a new query; resuming says the query may
	// hold a reservation already (a retry finishing an earlier submission).
	Reserve(ctx context.Context, accountID, requestID string, amount int64, resuming bool) error
	Release(ctx context.Context, accountID, requestID, reason string) error
}

// Service admits queries and reads them back.
type Service struct {
	Store   *eventstore.Store
	Catalog *catalog.Catalog
	// Estimator prices queries; Credits holds their estimate at admission.
	Estimator *pricing.Estimator
	Credits   Credits
	// Accounts shows the caller's balance beside an estimate.
	Accounts interface {
		Account(ctx context.Context, id string) (*accounts.AccountView, error)
	}
	// Files finds the files a query attaches; nil means no file exists, so
	// a query that attaches one is refused with file_not_found.
	Files FileLookup
	// Custom resolves custom_models for the caller's account; nil means no
	// account has any, so every entry is invalid_model.
	Custom CustomModels
	// Modes are the modes this server runs.
	Modes map[string]bool
	// Limit overrides InflightLimit when positive.
	Limit int
	// AccountLimit bounds the queries in flight of one account, all its
	// API keys together; zero is no bound.
	AccountLimit int
	Now          func() time.Time
	// Space, when set, refuses submissions while the store is low on disk
	// space: its error is Submit's.
	Space interface{ CheckSpace() error }

	// listReads and docReads, when set, stand in for the query_list and
	// query_status buckets in List (tests count the reads of a request
	// through them).
	listReads, docReads listReader

	init  sync.Once
	slots *lru.Cache[string, *accountSlots] // by account id
	done  finished
}

// Submission is the outcome of an accepted submission.
type Submission struct {
	RequestID string
	Status    string
	Replayed  bool
}

// Submit validates body and admits it as a query of caller. The files it
// attaches must be caller's account's and live (file_not_found,
// file_expired, invalid_files otherwise); how each model receives each file
// is decided here and recorded with the submission. With an
// Idempotency-Key (hasKey), the same key and body within 24 hours give the
// original request id with Replayed set; a different body gives
// idempotency_conflict. Identical concurrent submissions make one query.
// A valid body is refused with Space's error, before anything is written,
// while the store is low on disk space.
//
// Admission is: read the key's binding (a replay ends there), check what
// refuses without a write (the files, a slot free, the credits), bind the
// key (if any), take an in-flight slot, reserve the credits, append the
// submitted event. A submission refused for good leaves nothing bound: it
// is refused before the key is bound, or, when a concurrent submission took
// the slot or the credits meanwhile, its binding is removed again. A
// process that dies between those steps strands nothing: a retry with the
// same key finds its binding and finishes the submission, and an orphaned
// slot is healed when the key is next full.
func (s *Service) Submit(ctx context.Context, caller accounts.Caller, body []byte, idempotencyKey string, hasKey bool) (Submission, error) {
	if hasKey {
		if err := ValidateIdempotencyKey(idempotencyKey); err != nil {
			return Submission{}, err
		}
	}
	req, err := Decode(body, s.Catalog, s.Modes)
	if err != nil {
		countRefused(err)
		return Submission{}, err
	}
	if s.Space != nil {
		if err := s.Space.CheckSpace(); err != nil {
			countRefused(err)
			return Submission{}, err
		}
	}
	requestID := NewRequestID()
	// Once admission starts writing, the client going away must not leave it
	// half done: the rest runs to its end on its own clock.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admissionTimeout)
	defer cancel()
	// A JetStream that cannot take a write (a cluster without quorum) makes
	// a write wait for its deadline: the read of the key's binding and the
	// first write each have a shorter one, so the client has its 503
	// within twice firstWriteTimeout at most.
	first, cancelFirst := context.WithTimeout(ctx, firstWriteTimeout)
	defer cancelFirst()
	resuming := false
	var known binding
	if hasKey {
		if known, err = s.lookup(first, caller.Fingerprint, idempotencyKey, req.Hash()); err != nil {
			return Submission{}, err
		}
		if known.claim != nil {
			resuming, requestID = true, known.claim.RequestID
		}
	}
	// replay answers a submission whose key is bound to requestID: the
	// replay when its query exists (ok); otherwise the key was bound but its
	// submission never landed, and this one finishes it.
	replay := func() (sub Submission, ok bool, err error) {
		rec, err := s.Store.Last(ctx, s.Store.Queries, events.Subject(events.AggregateQuery, requestID, events.QuerySubmitted{}.EventName()))
		if err != nil || rec == nil {
			return Submission{}, false, err
		}
		return Submission{RequestID: requestID, Status: s.status(ctx, requestID), Replayed: true}, true, nil
	}
	if resuming {
		if sub, ok, err := replay(); ok || err != nil {
			return sub, err
		}
	}
	var unbind func()
	refused := func(err error) (Submission, error) {
		countRefused(err)
		if unbind != nil && refusal(err) {
			unbind()
		}
		return Submission{}, err
	}
	// The files are checked after the key: a retry of a submission that
	// was admitted replays it even if a file it attached is gone since.
	if err := s.resolveCustom(ctx, caller.AccountID, &req); err != nil {
		return refused(err)
	}
	files, err := resolveFiles(ctx, s.Files, s.Catalog, caller.AccountID, req, s.Now())
	if err != nil {
		return refused(err)
	}
	estimate := s.Estimator.Estimate(req.Mode, req.Prompt, req.Tools, req.Selected, files)
	if !resuming {
		// What refuses without a write is checked before the key is bound.
		if err := s.room(ctx, caller.AccountID, caller.Fingerprint); err != nil {
			return refused(err)
		}
		if err := s.Credits.Check(ctx, caller.AccountID, estimate.Micros); err != nil {
			return refused(err)
		}
	}
	first, cancelWrite := context.WithTimeout(ctx, firstWriteTimeout)
	defer cancelWrite()
	if hasKey && !resuming {
		bound, rev, err := s.bind(first, caller.Fingerprint, idempotencyKey, req.Hash(), requestID, known)
		first = ctx
		if err != nil {
			return Submission{}, err
		}
		if bound == requestID {
			// A definite refusal below frees the key for the client's next try.
			unbind = func() { s.unbind(ctx, caller.Fingerprint, idempotencyKey, rev) }
		} else {
			// An identical submission bound the key meanwhile.
			resuming, requestID = true, bound
			if sub, ok, err := replay(); ok || err != nil {
				return sub, err
			}
		}
	}
	if err := s.acquire(first, caller.AccountID, caller.Fingerprint, requestID); err != nil {
		return refused(err)
	}
	if err := s.Credits.Reserve(ctx, caller.AccountID, requestID, estimate.Micros, resuming); err != nil {
		_ = s.Release(ctx, caller.AccountID, requestID)
		return refused(err)
	}
	env, err := events.Wrap(events.AggregateQuery, requestID, events.QuerySubmitted{
		RequestID: requestID, AccountID: caller.AccountID, KeyFingerprint: caller.Fingerprint,
		Mode: req.Mode, Prompt: req.Prompt, Models: req.Selected, EstimatedMicros: estimate.Micros, Files: files,
		Tools: req.Tools, ToolChoice: req.ToolChoice,
	}, s.Now())
	if err != nil {
		return Submission{}, err
	}
	// The submitted event's id is the request id's ULID, so identical
	// concurrent retries are one publish to the server's dedup.
	env.ID = strings.TrimPrefix(requestID, "req_")
	app, err := s.Store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, requestID), Seq: 0})
	switch {
	case errors.Is(err, eventstore.ErrConflict) || (err == nil && app.Duplicate):
		return Submission{RequestID: requestID, Status: s.status(ctx, requestID), Replayed: true}, nil
	case err != nil:
		// The append may have landed although it failed: its outcome is
		// unknown, so the slot and the reservation stay. If the submission
		// landed they are its own; if not, a retry with the same key finishes
		// it, or they heal (the slot when the key is full, the reservation
		// when the account would be refused).
		return Submission{}, err
	}
	countSubmitted(req.Mode)
	return Submission{RequestID: requestID, Status: events.StatusQueued}, nil
}

// admissionTimeout bounds an admission once it has started writing; under
// heavy load on one account its reservation may retry for seconds.
// firstWriteTimeout bounds its first write.
const (
	admissionTimeout  = 30 * time.Second
	firstWriteTimeout = 10 * time.Second
)

// refusal reports whether err refuses the submission for good: nothing was
// admitted, so the Idempotency-Key may be used again.
func refusal(err error) bool {
	switch apperr.Code(err) {
	case apperr.RateLimited, apperr.InsufficientCredits, apperr.MonthlyCapExceeded,
		apperr.InvalidFiles, apperr.FileNotFound, apperr.FileExpired:
		return true
	}
	return false
}

// NewRequestID returns a new request id: "req_" and a ULID.
func NewRequestID() string { return "req_" + events.NewID() }

// ValidRequestID reports whether id has the form of a request id.
func ValidRequestID(id string) bool {
	if !strings.HasPrefix(id, "req_") {
		return false
	}
	_, err := ulid.ParseStrict(id[4:])
	return err == nil && strings.ToUpper(id[4:]) == id[4:]
}

func (s *Service) status(ctx context.Context, id string) string {
	raw, _, err := s.read(ctx, id)
	if err != nil || raw == nil {
		return events.StatusQueued
	}
	var r struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.Status
}

// Get returns the result of caller's query id as JSON. A query of another
// account is not_found, as is an unknown id. A query that was accepted is
// never not_found: when the read model has not caught up, the result is folded
// from the stream.
func (s *Service) Get(ctx context.Context, caller accounts.Caller, id string) (json.RawMessage, error) {
	raw, owner, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if raw == nil || owner != caller.AccountID {
		return nil, apperr.New(apperr.NotFound, "no query %q for this account", truncate(id))
	}
	return raw, nil
}

func (s *Service) read(ctx context.Context, id string) (json.RawMessage, string, error) {
	if !ValidRequestID(id) {
		return nil, "", nil
	}
	if e, ok := s.done.get(id); ok {
		return e.result, e.accountID, nil
	}
	entry, err := s.Store.QueryStatus.Get(ctx, id)
	switch {
	case err == nil:
		doc, err := projections.ParseStored(entry.Value)
		if err != nil {
			return nil, "", err
		}
		if ended(doc.Result) {
			s.done.put(id, doc.AccountID, doc.Result)
		}
		return doc.Result, doc.AccountID, nil
	case !errors.Is(err, eventstore.ErrNotFound):
		return nil, "", err
	}
	doc, err := s.fold(ctx, id)
	if err != nil || doc == nil {
		return nil, "", err
	}
	raw, err := json.Marshal(doc.Result)
	return raw, doc.AccountID, err
}

// fold folds query id from its events, for a query whose document the
// projection has not stored yet; nil when the query has no events.
func (s *Service) fold(ctx context.Context, id string) (*projections.QueryDoc, error) {
	_, recs, err := s.Store.LoadQuery(ctx, id)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return projections.FoldQuery(recs), nil
}

// Quote is a pre-flight estimate beside the account's credits.
type Quote struct {
	Mode     string
	Estimate pricing.Estimate
	Account  *accounts.AccountView
	// Sufficient and WithinCap say whether a submission would be admitted
	// now as far as credits go.
	Sufficient, WithinCap bool
}

// Estimate validates body as Submit does and prices it, without reserving.
func (s *Service) Estimate(ctx context.Context, caller accounts.Caller, body []byte) (Quote, error) {
	req, err := Decode(body, s.Catalog, s.Modes)
	if err != nil {
		return Quote{}, err
	}
	if err := s.resolveCustom(ctx, caller.AccountID, &req); err != nil {
		return Quote{}, err
	}
	files, err := resolveFiles(ctx, s.Files, s.Catalog, caller.AccountID, req, s.Now())
	if err != nil {
		return Quote{}, err
	}
	acc, err := s.Accounts.Account(ctx, caller.AccountID)
	if err != nil {
		return Quote{}, err
	}
	q := Quote{Mode: req.Mode, Estimate: s.Estimator.Estimate(req.Mode, req.Prompt, req.Tools, req.Selected, files), Account: acc}
	q.Sufficient = q.Estimate.Micros <= acc.BalanceMicros
	q.WithinCap = acc.CapMicros == nil || acc.SpentThisMonth+acc.ReservedMicros+q.Estimate.Micros <= *acc.CapMicros
	return q, nil
}

// CustomModels resolves the custom_models of a query.
type CustomModels interface {
	// Resolve returns each id's model, in order, when every one is a usable
	// customer-owned model of the account; invalid_model naming the entry
	// otherwise.
	Resolve(ctx context.Context, accountID string, ids []string) ([]CustomModel, error)
}

// CustomModel is a customer-owned model a query runs: its reference and
// the file kinds it reads natively.
type CustomModel struct {
	Ref   events.ModelRef
	Reads catalog.Reads
}

// resolveCustom adds req's customer-owned models to its selection, after
// the first-party ones.
func (s *Service) resolveCustom(ctx context.Context, accountID string, req *Request) error {
	if len(req.CustomModels) == 0 {
		return nil
	}
	if s.Custom == nil {
		return apperr.New(apperr.InvalidModel, "custom_models entry %q is not a model of this account; see the custom group of GET /v1/models", truncate(req.CustomModels[0]))
	}
	models, err := s.Custom.Resolve(ctx, accountID, req.CustomModels)
	if err != nil {
		return err
	}
	req.CustomReads = map[string]catalog.Reads{}
	for _, m := range models {
		req.Selected = append(req.Selected, m.Ref)
		req.CustomReads[m.Ref.CustomModel] = m.Reads
	}
	return nil
}
