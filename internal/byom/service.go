package byom

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/egress"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/lru"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Limits of a connection request.
const (
	MaxPerAccount    = 50
	MaxNameLen       = 100
	MaxURLLen        = 2048
	MaxModelLen      = 200
	MaxAPIKeyLen     = 4096
	MaxHeaders       = 16
	MaxHeaderLen     = 4096
	MaxContextWindow = 100_000_000
	// MaxCustomModels bounds the custom_models of one query.
	MaxCustomModels = 8
	// MaxAnswerBytes bounds what one call of a customer-owned model may
	// answer (its text, structured output, citations and tool calls).
	MaxAnswerBytes = 128 << 10
	// MaxResponseBytes bounds the body of one response of a customer-owned
	// model's host, counted as decoded (after gzip): eight times
	// MaxAnswerBytes, room for the answer escaped in JSON (at most six
	// bytes a byte, three for the usual non-ASCII text) and the envelope. A
	// larger body fails the call (invalid_output) as soon as it passes the
	// bound, unread beyond it; providers.LimitResponses reads it.
	MaxResponseBytes = 8 * MaxAnswerBytes
	// DefaultTestTimeout bounds a connection test.
	DefaultTestTimeout = 15 * time.Second
	// MaxExcerpt bounds the upstream text an error shows.
	MaxExcerpt = 160
)

// Service connects customer-owned models and serves them to queries.
type Service struct {
	Accounts *accounts.Service
	Keyring  *Keyring
	Guard    *egress.Guard
	// Calls wraps a BYOM's backend the way a mode calls every model
	// (retries, timeouts, validated structured output, the budget of its
	// declared capabilities' context window); nil leaves it bare.
	Calls       func(providers.Provider, events.Capabilities) providers.Provider
	TestTimeout time.Duration
	// MaxCalls bounds the calls to customer-owned models this process makes
	// at once, MaxCallsPerAccount those of one account (zero:
	// DefaultMaxCalls, DefaultMaxCallsPerAccount). A call beyond waits for a
	// slot within its attempt's time.
	MaxCalls, MaxCallsPerAccount int
	Log                          zerolog.Logger
	// build makes a BYOM's backend; nil means Build. Tests replace it.
	build func(ctx context.Context, c Connection, hc *http.Client) (providers.Provider, error)

	cacheOnce sync.Once
	cache     *lru.Cache[string, providers.Provider]
	slotsOnce sync.Once
	slots     *callSlots
}

// Connection is what a BYOM's backend needs: where, which model, with
// which credentials. It is never logged or encoded.
type Connection struct {
	Kind, BaseURL, Model, APIVersion string
	APIKey                           string
	Headers                          map[string]string
}

// secret is the plaintext that is sealed: the API key and header values.
type secret struct {
	APIKey  string            `json:"api_key,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ConnectRequest is the body of a connection.
type ConnectRequest struct {
	Name         string              `json:"name"`
	Kind         string              `json:"kind"`
	BaseURL      string              `json:"base_url"`
	Model        string              `json:"model"`
	APIKey       *string             `json:"api_key"`
	APIVersion   string              `json:"api_version"`
	Capabilities events.Capabilities `json:"capabilities"`
	Headers      map[string]string   `json:"headers"`
	// AllowUnverified saves the model as unverified when the host cannot be
	// reached; a host that answers and refuses is refused whatever this says.
	AllowUnverified bool `json:"allow_unverified"`
}

// View is a BYOM as the admin API shows it; it never holds the secret.
type View struct {
	ModelID      string              `json:"model_id"`
	Name         string              `json:"name"`
	Kind         string              `json:"kind"`
	BaseURL      string              `json:"base_url"`
	Model        string              `json:"model"`
	APIVersion   string              `json:"api_version,omitempty"`
	Capabilities events.Capabilities `json:"capabilities"`
	HeaderNames  []string            `json:"header_names,omitempty"`
	State        string              `json:"state"`
	CreatedAt    time.Time           `json:"created_at"`
	LastTest     *TestView           `json:"last_test,omitempty"`
	KeyID        string              `json:"key_id,omitempty"`
}

// TestView is the outcome of a connection test.
type TestView struct {
	OK       bool      `json:"ok"`
	Class    string    `json:"class,omitempty"`
	Message  string    `json:"message,omitempty"`
	TestedAt time.Time `json:"tested_at"`
}

func viewOf(b *events.BYOM) View {
	v := View{ModelID: b.ModelID, Name: b.Name, Kind: b.Kind, BaseURL: b.BaseURL, Model: b.Model, APIVersion: b.APIVersion,
		Capabilities: b.Capabilities, HeaderNames: b.HeaderNames, State: b.State, CreatedAt: b.CreatedAt}
	if b.Secret != nil {
		v.KeyID = b.Secret.KeyID
	}
	if b.LastTest != nil {
		v.LastTest = &TestView{OK: b.LastTest.OK, Class: b.LastTest.Class, Message: b.LastTest.Message, TestedAt: b.Tested}
	}
	return v
}

// NewModelID returns a new BYOM id.
func NewModelID() string { return "byom_" + strings.ToLower(events.NewID()) }

// ValidModelID reports whether id has the form of a BYOM id.
func ValidModelID(id string) bool { return events.ValidPrefixedID("byom", id) }

func aad(accountID, modelID string) []byte { return []byte(accountID + "/" + modelID) }

func bad(format string, args ...any) error { return apperr.New(apperr.InvalidRequest, format, args...) }

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.Is(unicode.Cc, c) || unicode.Is(unicode.Bidi_Control, c) || c == '\u2028' || c == '\u2029' {
			return false
		}
	}
	return true
}

// forbiddenHeaders are headers a BYOM may not set: the transport's own.
var forbiddenHeaders = map[string]bool{"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "te": true, "trailer": true, "proxy-authorization": true, "cookie": true, "keep-alive": true}

// validate checks a connection request; every failure names the field.
func (s *Service) validate(req *ConnectRequest) error {
	req.Name = strings.TrimSpace(req.Name)
	switch {
	case req.Name == "":
		return bad("name is required")
	case utf8.RuneCountInString(req.Name) > MaxNameLen || !printable(req.Name):
		return bad("name must be printable text of at most %d characters", MaxNameLen)
	}
	known := false
	for _, k := range events.BYOMKinds {
		known = known || k == req.Kind
	}
	if !known {
		return bad("kind must be one of %s; got %q", strings.Join(events.BYOMKinds, ", "), truncate(req.Kind))
	}
	req.BaseURL = strings.TrimRight(strings.TrimSpace(req.BaseURL), "/")
	if req.BaseURL == "" || len(req.BaseURL) > MaxURLLen {
		return bad("base_url is required: the host's API root, at most %d characters, for example http://127.0.0.1:11434/v1", MaxURLLen)
	}
	if _, err := s.Guard.Policy.CheckURL(req.BaseURL); err != nil {
		return bad("base_url is refused: %v", trimRefused(err))
	}
	req.Model = strings.TrimSpace(req.Model)
	if req.Model == "" || len(req.Model) > MaxModelLen || !printable(req.Model) {
		return bad("model is required: the host's model name, printable, at most %d characters", MaxModelLen)
	}
	key := ""
	if req.APIKey != nil {
		key = *req.APIKey
	}
	if len(key) > MaxAPIKeyLen || !printable(key) || strings.ContainsAny(key, " \t") {
		return bad("api_key must be printable, without spaces, at most %d characters", MaxAPIKeyLen)
	}
	if key == "" && req.Kind != events.KindOpenAICompatible {
		return bad("api_key is required for kind %s (only an openai-compatible host such as a local runner may go without one)", req.Kind)
	}
	if req.Kind == events.KindAzureOpenAI {
		if req.APIVersion == "" {
			return bad("api_version is required for kind azure-openai, for example 2024-10-21")
		}
		if len(req.APIVersion) > 40 || strings.IndexFunc(req.APIVersion, func(c rune) bool {
			return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-')
		}) >= 0 {
			return bad("api_version must be an Azure OpenAI api-version such as 2024-10-21")
		}
	} else if req.APIVersion != "" {
		return bad("api_version applies to kind azure-openai only")
	}
	if len(req.Headers) > MaxHeaders {
		return bad("headers holds %d entries; at most %d", len(req.Headers), MaxHeaders)
	}
	for name, v := range req.Headers {
		if name == "" || len(name) > 100 || strings.IndexFunc(name, func(c rune) bool {
			return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.ContainsRune("!#$%&'*+-.^_`|~", c))
		}) >= 0 {
			return bad("headers has an invalid header name %q", truncate(name))
		}
		if forbiddenHeaders[strings.ToLower(name)] {
			return bad("headers may not set %s", name)
		}
		if len(v) > MaxHeaderLen || !printable(v) {
			return bad("headers.%s must be printable, at most %d characters", name, MaxHeaderLen)
		}
	}
	if c := req.Capabilities.ContextWindow; c < 0 || c > MaxContextWindow {
		return bad("capabilities.context_window must be between 0 and %d", MaxContextWindow)
	}
	return nil
}

func trimRefused(err error) string {
	return strings.TrimPrefix(err.Error(), egress.ErrRefused.Error()+": ")
}

func truncate(s string) string {
	if len(s) <= 64 {
		return s
	}
	s = s[:64]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// checkResolved resolves base_url's host now and refuses it when any address
// it gives is refused. Each call is checked again when it connects.
func (s *Service) checkResolved(ctx context.Context, baseURL string) error {
	u, err := s.Guard.Policy.CheckURL(baseURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	r := s.Guard.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil // unreachable: the test says so
	}
	for _, a := range addrs {
		if err := s.Guard.Policy.CheckAddr(host, a, egress.Port(u)); err != nil {
			return err
		}
	}
	return nil
}

// Connect tests a connection and, when it passes, saves the model on the
// account, its key sealed. A host that rejects the key, does not know the
// model, or refuses otherwise gives connection_failed, with a message
// saying which; an unreachable host too, unless AllowUnverified, which saves
// the model as unverified. An account at MaxPerAccount models gives
// invalid_request.
func (s *Service) Connect(ctx context.Context, accountID string, req ConnectRequest) (*View, error) {
	if _, err := s.Accounts.Account(ctx, accountID); err != nil {
		return nil, err
	}
	if err := s.validate(&req); err != nil {
		return nil, err
	}
	if err := s.checkResolved(ctx, req.BaseURL); err != nil {
		return nil, bad("base_url is refused: %v", trimRefused(err))
	}
	conn := Connection{Kind: req.Kind, BaseURL: req.BaseURL, Model: req.Model, APIVersion: req.APIVersion, Headers: req.Headers}
	if req.APIKey != nil {
		conn.APIKey = *req.APIKey
	}
	state := events.BYOMActive
	if f := s.test(ctx, conn); f != nil {
		if !(req.AllowUnverified && f.unreachable) {
			return nil, apperr.New(apperr.ConnectionFailed, "%s", f.message)
		}
		state = events.BYOMUnverified
	}
	id := NewModelID()
	var sealed *events.Sealed
	if conn.APIKey != "" || len(conn.Headers) > 0 {
		plain, _ := json.Marshal(secret{APIKey: conn.APIKey, Headers: conn.Headers})
		sl, err := s.Keyring.Seal(plain, aad(accountID, id))
		if err != nil {
			return nil, apperr.New(apperr.Internal, "the provider key cannot be encrypted: no key-encryption key is configured")
		}
		sealed = &sl
	}
	var names []string
	for n := range conn.Headers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out View
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) {
		if b := a.BYOMs[id]; b != nil {
			out = viewOf(b)
		}
	}, s.Accounts.Refreshed(ctx, accountID), func(a *events.Account) ([]events.Event, error) {
		if a.BYOMs[id] != nil {
			return nil, nil
		}
		n := 0
		for _, b := range a.BYOMs {
			if b.State != events.BYOMDeleted {
				n++
			}
		}
		if n >= MaxPerAccount {
			return nil, bad("the account has %d connected models, the most allowed; delete one first", n)
		}
		return []events.Event{events.BYOMConnected{ModelID: id, Name: req.Name, Kind: req.Kind, BaseURL: req.BaseURL, Model: req.Model,
			APIVersion: req.APIVersion, Capabilities: req.Capabilities, HeaderNames: names, State: state, Secret: sealed}}, nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// account reads the account's current state: its models as of its latest
// event, or not_found for an account that does not exist.
func (s *Service) account(ctx context.Context, accountID string) (*events.Account, error) {
	if !events.ValidPrefixedID("acct", accountID) {
		return nil, apperr.New(apperr.NotFound, "no account %q", truncate(accountID))
	}
	var a *events.Account
	err := s.Accounts.Update(ctx, accountID, func(acc *events.Account) {
		if acc.Exists() {
			a = copyAccountBYOMs(acc)
		}
	}, s.Accounts.Refreshed(ctx, accountID))
	if err == nil && a == nil {
		err = apperr.New(apperr.NotFound, "no account %q", accountID)
	}
	return a, err
}

// copyAccountBYOMs copies what this package reads of an account, so no
// reader shares the cached aggregate.
func copyAccountBYOMs(a *events.Account) *events.Account {
	out := &events.Account{ID: a.ID, BYOMs: map[string]*events.BYOM{}, BYOMOrder: append([]string(nil), a.BYOMOrder...)}
	for id, b := range a.BYOMs {
		cp := *b
		out.BYOMs[id] = &cp
	}
	return out
}

// List returns the account's models, deleted ones left out, in the order
// they were connected.
func (s *Service) List(ctx context.Context, accountID string) ([]View, error) {
	a, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	out := []View{}
	for _, id := range a.BYOMOrder {
		if b := a.BYOMs[id]; b.State != events.BYOMDeleted {
			out = append(out, viewOf(b))
		}
	}
	return out, nil
}

func notFound(id string) error {
	return apperr.New(apperr.NotFound, "no model %q on this account; see GET /admin/v1/accounts/{account_id}/models", truncate(id))
}

// Get returns one model of the account, or not_found.
func (s *Service) Get(ctx context.Context, accountID, modelID string) (*View, error) {
	b, err := s.model(ctx, accountID, modelID)
	if err != nil {
		return nil, err
	}
	v := viewOf(b)
	return &v, nil
}

// model returns one model of the account as it stands, or not_found for an
// unknown account or model and for a deleted model.
func (s *Service) model(ctx context.Context, accountID, modelID string) (*events.BYOM, error) {
	a, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	b := a.BYOMs[modelID]
	if b == nil || b.State == events.BYOMDeleted {
		return nil, notFound(modelID)
	}
	return b, nil
}

// Transition disables, enables or deletes a model (events.DecideBYOM). It
// returns not_found for an unknown account, model or action, and for a
// deleted model; an action that changes nothing appends nothing.
func (s *Service) Transition(ctx context.Context, accountID, modelID, action string) (*View, error) {
	if _, err := s.Accounts.Account(ctx, accountID); err != nil {
		return nil, err
	}
	if !ValidModelID(modelID) {
		return nil, notFound(modelID)
	}
	var out View
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) {
		if b := a.BYOMs[modelID]; b != nil {
			out = viewOf(b)
		}
	}, s.Accounts.Refreshed(ctx, accountID), func(a *events.Account) ([]events.Event, error) {
		b := a.BYOMs[modelID]
		if b == nil {
			return nil, notFound(modelID)
		}
		ev, err := events.DecideBYOM(b, action)
		if err != nil || ev == nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Test runs a connection test of a saved model and records its outcome; a
// passing test makes an unverified model active. It returns the model.
func (s *Service) Test(ctx context.Context, accountID, modelID string) (*View, error) {
	b, err := s.model(ctx, accountID, modelID)
	if err != nil {
		return nil, err
	}
	conn, err := s.connection(accountID, b)
	if err != nil {
		return nil, apperr.New(apperr.ConnectionFailed, "%s", err.Error())
	}
	ev := events.BYOMTested{ModelID: modelID, OK: true}
	if f := s.test(ctx, conn); f != nil {
		ev = events.BYOMTested{ModelID: modelID, Class: f.class, Message: f.message}
	}
	var out View
	err = s.Accounts.Update(ctx, accountID, func(a *events.Account) {
		if b := a.BYOMs[modelID]; b != nil {
			out = viewOf(b)
		}
	}, s.Accounts.Refreshed(ctx, accountID), func(a *events.Account) ([]events.Event, error) {
		if b := a.BYOMs[modelID]; b == nil || b.State == events.BYOMDeleted {
			return nil, notFound(modelID)
		}
		return []events.Event{ev}, nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// connection opens a saved model's secret.
func (s *Service) connection(accountID string, b *events.BYOM) (Connection, error) {
	c := Connection{Kind: b.Kind, BaseURL: b.BaseURL, Model: b.Model, APIVersion: b.APIVersion}
	if b.Secret == nil {
		return c, nil
	}
	plain, err := s.Keyring.Open(*b.Secret, aad(accountID, b.ModelID))
	if err != nil {
		return c, fmt.Errorf("the provider key of %s cannot be decrypted: %w", b.ModelID, err)
	}
	var sec secret
	if err := json.Unmarshal(plain, &sec); err != nil {
		return c, fmt.Errorf("the provider key of %s cannot be decrypted: the secret is malformed", b.ModelID)
	}
	c.APIKey, c.Headers = sec.APIKey, sec.Headers
	return c, nil
}

// failure is why a connection test failed.
type failure struct {
	class, message string
	unreachable    bool
}

// test makes the cheapest call every kind has, a completion of at most 16
// tokens, under TestTimeout; nil when it answered.
func (s *Service) test(ctx context.Context, c Connection) *failure {
	timeout := s.TestTimeout
	if timeout == 0 {
		timeout = DefaultTestTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answered := new(atomic.Bool)
	ctx = context.WithValue(ctx, answeredKey{}, answered)
	p, err := s.backend(ctx, c)
	if err != nil {
		return &failure{class: providers.ClassHostError, message: scrub(err.Error(), c)}
	}
	_, err = p.Complete(ctx, &providers.Request{
		Model: c.Model, Purpose: events.StepAnswer, MaxOutputTokens: 16,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: "Reply with the word ok."}},
	})
	if err == nil {
		return nil
	}
	e := providers.Classify(err)
	excerpt := scrub(e.Message, c)
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return &failure{class: "authentication", message: fmt.Sprintf("the host rejected the API key (HTTP %d): check api_key", e.Status)}
	case e.Status == http.StatusNotFound:
		return &failure{class: "model_not_found", message: fmt.Sprintf("the host does not know the model %q (HTTP 404): check model and base_url", truncate(c.Model))}
	case strings.Contains(e.Message, egress.ErrRefused.Error()):
		return &failure{class: "refused", message: "the host's address is refused: " + excerpt}
	case e.Status == 0 && answered.Load() && e.Class != providers.ClassTimeout:
		return &failure{class: e.Class, message: "the host answered the test call with something that is not a completion: " + excerpt + "; check base_url and kind"}
	case e.Status == 0:
		return &failure{class: "unreachable", unreachable: true, message: "the host cannot be reached within " + timeout.String() + ": " + excerpt}
	}
	return &failure{class: e.Class, message: fmt.Sprintf("the host refused the test call (HTTP %d): %s", e.Status, excerpt)}
}

// scrub shortens an upstream text to MaxExcerpt characters of one line,
// with the key and header values taken out.
func scrub(s string, c Connection) string {
	for _, secretValue := range append([]string{c.APIKey}, mapValues(c.Headers)...) {
		if len(secretValue) >= 4 {
			s = strings.ReplaceAll(s, secretValue, "[redacted]")
		}
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > MaxExcerpt {
		s = string([]rune(s)[:MaxExcerpt]) + "…"
	}
	return s
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// backend builds the model backend of c over the guarded client, its
// responses read to MaxResponseBytes at most. A base URL the guard refuses
// now (one saved before a rule that refuses it, or under another allow
// list) is refused here, so no call is made to it.
func (s *Service) backend(ctx context.Context, c Connection) (providers.Provider, error) {
	if _, err := s.Guard.Policy.CheckURL(c.BaseURL); err != nil {
		return nil, err
	}
	hc := providers.LimitResponses(s.Guard.Client(0), MaxResponseBytes)
	if len(c.Headers) > 0 || c.Kind == events.KindAzureOpenAI {
		hc.Transport = &headers{next: hc.Transport, c: c}
	}
	hc.Transport = answering{next: hc.Transport}
	build := s.build
	if build == nil {
		build = Build
	}
	return build(ctx, c, hc)
}

// answeredKey is the context key of the flag a connection test reads to
// tell a host that answered (wrongly) from one that could not be reached.
type answeredKey struct{}

// answering marks, in the flag its request's context carries, that the
// host sent a response.
type answering struct{ next http.RoundTripper }

func (a answering) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(r)
	if flag, ok := r.Context().Value(answeredKey{}).(*atomic.Bool); ok && err == nil {
		flag.Store(true)
	}
	return resp, err
}

// headers adds a BYOM's own headers, and for Azure OpenAI its api-key
// header and api-version parameter, to each request.
type headers struct {
	next http.RoundTripper
	c    Connection
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.c.Headers {
		r.Header.Set(k, v)
	}
	if h.c.Kind == events.KindAzureOpenAI {
		r.Header.Del("Authorization")
		r.Header.Set("api-key", h.c.APIKey)
		q := r.URL.Query()
		q.Set("api-version", h.c.APIVersion)
		r.URL.RawQuery = q.Encode()
	}
	return h.next.RoundTrip(r)
}
