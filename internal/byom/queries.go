package byom

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/lru"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// CachedBackends bounds the BYOM backends a process keeps built.
const CachedBackends = 1000

// Custom is one customer-owned model a query selected.
type Custom struct {
	Ref events.ModelRef
	// Reads are the file kinds it reads natively, from its declared capabilities.
	Reads catalog.Reads
}

// Resolve returns the models of ids for a query of the account: each must
// be a usable model of it (active or unverified), else invalid_model naming
// the entry. Deleted, disabled and other accounts' models are all unknown.
func (s *Service) Resolve(ctx context.Context, accountID string, ids []string) ([]Custom, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	a, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	out := make([]Custom, 0, len(ids))
	for _, id := range ids {
		b := a.BYOMs[id]
		switch {
		case b == nil || b.State == events.BYOMDeleted:
			return nil, apperr.New(apperr.InvalidModel, "custom_models entry %q is not a model of this account; see the custom group of GET /v1/models", truncate(id))
		case !b.Usable():
			return nil, apperr.New(apperr.InvalidModel, "custom_models entry %q is %s; enable it first", id, b.State)
		}
		out = append(out, Custom{
			Ref:   events.ModelRef{Provider: events.ProviderCustom, ModelID: b.Model, CustomModel: id},
			Reads: catalog.Reads{Images: b.Capabilities.Images, PDF: b.Capabilities.PDF},
		})
	}
	return out, nil
}

// Active returns the account's usable models, for GET /v1/models.
func (s *Service) Active(ctx context.Context, accountID string) ([]View, error) {
	all, err := s.List(ctx, accountID)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(v View) bool { return v.State != events.BYOMActive && v.State != events.BYOMUnverified }), nil
}

type accountKey struct{}

// WithAccount returns ctx carrying the account whose query runs, so that
// Provider finds its models.
func WithAccount(ctx context.Context, accountID string) context.Context {
	return context.WithValue(ctx, accountKey{}, accountID)
}

// Provider returns the backend a query of the account in ctx calls
// ref's model through, wrapped by Calls; each attempt of a call takes one
// of the account's and of the process's call slots (MaxCalls,
// MaxCallsPerAccount) first. A model that is no longer usable,
// or whose key this process cannot decrypt, gives a final host_error
// providers.Error that says so: the query records that model as failed,
// and nothing runs in its place.
func (s *Service) Provider(ctx context.Context, ref events.ModelRef) (providers.Provider, error) {
	accountID, _ := ctx.Value(accountKey{}).(string)
	fail := func(format string, args ...any) (providers.Provider, error) {
		return nil, providers.Unusable(format, args...)
	}
	if accountID == "" {
		return fail("the account of %s is not known to this run", ref.CustomModel)
	}
	a, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	b := a.BYOMs[ref.CustomModel]
	switch {
	case b == nil || b.State == events.BYOMDeleted:
		return fail("%s was deleted", ref.CustomModel)
	case !b.Usable():
		return fail("%s is %s", ref.CustomModel, b.State)
	}
	keyID := ""
	if b.Secret != nil {
		keyID = b.Secret.KeyID
	}
	cacheKey := fmt.Sprintf("%s/%s/%d/%s", accountID, b.ModelID, b.Seq, keyID)
	s.cacheOnce.Do(func() { s.cache = lru.New[string, providers.Provider](CachedBackends) })
	var buildErr error
	p := s.cache.GetOrAdd(cacheKey, func() providers.Provider {
		conn, err := s.connection(accountID, b)
		if err != nil {
			s.Log.Error().Str("model", b.ModelID).Str("account_id", accountID).Str("key_id", keyID).
				Msg("a customer-owned model's provider key cannot be decrypted with this process's key-encryption keys: the model fails, the rest are served")
			buildErr = err
			return nil
		}
		p, err := s.backend(context.WithoutCancel(ctx), conn)
		if err != nil {
			buildErr = fmt.Errorf("%s", scrub(err.Error(), conn))
			return nil
		}
		s.slotsOnce.Do(func() { s.slots = newCallSlots(s.MaxCalls, s.MaxCallsPerAccount) })
		p = bounded{Provider: scrubbed{Provider: p, conn: conn}, slots: s.slots, account: accountID}
		if s.Calls != nil {
			p = s.Calls(p, b.Capabilities)
		}
		return p
	})
	if p == nil {
		s.cache.Delete(cacheKey)
		return fail("%s cannot be started: %v", ref.CustomModel, buildErr)
	}
	return p, nil
}

// scrubbed is a BYOM's backend as a query calls it: its upstream errors
// carry at most a short excerpt of the host's message, without the key or
// a header value, as the connection test's do (that message reaches the
// result, its events and the logs), and its answers at most
// MaxAnswerBytes.
type scrubbed struct {
	providers.Provider
	conn Connection
}

// Complete runs the call; an upstream *providers.Error comes back with its
// message scrubbed, any other error (the context's) as it is. An answer of
// more than MaxAnswerBytes fails the call (a final host_error): the host chose
// its length, a first-party call that reads it would pay for it, and an
// answer too large for an event could not be recorded at all.
func (s scrubbed) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	resp, err := s.Provider.Complete(ctx, req)
	var pe *providers.Error
	if err != nil && errors.As(err, &pe) {
		cp := *pe
		cp.Message = scrub(pe.Message, s.conn)
		return resp, &cp
	}
	if n := answerBytes(resp); err == nil && n > MaxAnswerBytes {
		return &providers.Response{Usage: resp.Usage, Latency: resp.Latency}, &providers.Error{Class: providers.ClassHostError, Final: true,
			Message: fmt.Sprintf("the answer has %d bytes; a customer-owned model's answer may have at most %d", n, MaxAnswerBytes)}
	}
	return resp, err
}

// answerBytes is the size of what resp answers: its text, structured
// output, citations and tool calls.
func answerBytes(resp *providers.Response) int {
	if resp == nil {
		return 0
	}
	n := max(len(resp.Text), len(resp.JSON)) // the structured output is the text, unfenced
	for _, c := range resp.Citations {
		n += len(c.URL) + len(c.Title) + len(c.Snippet)
	}
	for _, c := range resp.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}
