package handlers

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/keys"
	"github.com/crosscheck/crosscheck/internal/ledger"
)

// AccountAdmin runs the admin commands on accounts and keys.
type AccountAdmin interface {
	CreateAccount(ctx context.Context, name, plan string) (*accounts.AccountView, error)
	Account(ctx context.Context, id string) (*accounts.AccountView, error)
	CreateKey(ctx context.Context, accountID, name string, acceptAUP bool) (keys.Key, *events.Key, error)
	Transition(ctx context.Context, fingerprint, action string) (*events.Key, error)
}

// LedgerAdmin runs the admin commands on credits.
type LedgerAdmin interface {
	Adjust(ctx context.Context, accountID string, micros int64, reason string) (*accounts.AccountView, error)
	SetCap(ctx context.Context, accountID string, capMicros *int64) (*accounts.AccountView, error)
	Entries(ctx context.Context, accountID string, after uint64, limit int) ([]ledger.Entry, uint64, error)
}

// StorageAdmin tells what the store keeps of an account.
type StorageAdmin interface {
	// Storage returns the account's figures; not_found for an unknown
	// account.
	Storage(ctx context.Context, accountID string) (AccountStorage, error)
}

// AccountStorage is what the store keeps of one account, as
// GET /admin/v1/accounts/{account_id}/storage shows it.
type AccountStorage struct {
	AccountID string `json:"account_id"`
	// Queries counts the account's queries (QUERIES keeps each one's
	// events and query_status its result); QueriesInFlight those queued or
	// running, every key's together.
	Queries         int `json:"queries"`
	QueriesInFlight int `json:"queries_in_flight"`
	// AccountEvents and AccountEventBytes are the account's events in
	// ACCOUNTS (its keys, BYOMs and ledger) and their stored bytes.
	AccountEvents     int   `json:"account_events"`
	AccountEventBytes int64 `json:"account_event_bytes"`
	// FilesLive and FilesLiveBytes are its live files and their bytes;
	// FileEvents and FileEventBytes the events FILES keeps for it.
	FilesLive      int   `json:"files_live"`
	FilesLiveBytes int64 `json:"files_live_bytes"`
	FileEvents     int   `json:"file_events"`
	FileEventBytes int64 `json:"file_event_bytes"`
}

// Admin is the admin API; it stands in for the web application of the spec.
type Admin struct {
	Accounts AccountAdmin
	Ledger   LedgerAdmin
	// Storage tells what the store keeps of an account.
	Storage StorageAdmin
	// BYOM runs the commands on customer-owned models; nil serves none.
	BYOM    BYOMAdmin
	Token   string
	Log     zerolog.Logger
	DocsURL string
	// Ready and Stopping are the process's readiness, as the public API's
	// (Server.Ready, Server.Stopping): /readyz answers here too.
	Ready    func(ctx context.Context) error
	Stopping func() bool
	// TrustCallerTrace is Server.TrustCallerTrace for the admin API.
	TrustCallerTrace bool
}

// Handler returns the admin API's router.
func (a *Admin) Handler() http.Handler {
	s := &Server{DocsURL: a.DocsURL, Ready: a.Ready, Stopping: a.Stopping}
	r := chi.NewRouter()
	r.Use(observed(a.TrustCallerTrace))
	r.Use(accessLog(a.Log.With().Str("api", "admin").Logger()))
	r.Use(recoverer)
	r.Get("/healthz", healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.scrape)
	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got := r.Header.Get("Authorization")
				if len(a.Token) < config.MinAdminTokenLen || subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+a.Token)) != 1 {
					closeUnread(w, r)
					s.writeError(w, r, apperr.New(apperr.InvalidAdminToken, "send Authorization: Bearer <admin token>"), "")
					return
				}
				next.ServeHTTP(w, r)
			})
		})
		r.Post("/accounts", a.createAccount(s))
		r.Get("/accounts/{account_id}", a.getAccount(s))
		r.Post("/accounts/{account_id}/keys", a.createKey(s))
		r.Post("/keys/{fingerprint}/{action}", a.transition(s))
		r.Post("/accounts/{account_id}/credits", a.adjust(s))
		r.Put("/accounts/{account_id}/monthly-cap", a.setCap(s))
		r.Get("/accounts/{account_id}/ledger", a.ledgerPage(s))
		r.Get("/accounts/{account_id}/storage", a.storage(s))
		a.byomRoutes(s, r)
	})
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noMethod)
	return r
}

// MaxNameLen bounds the name of an account or a key, in characters.
const MaxNameLen = 100

// checkName refuses a name that is longer than MaxNameLen characters, is not
// valid UTF-8, or holds a character that shows as something else or nothing
// (events.UnprintableIn: line breaks, the escapes that start terminal
// sequences, bidirectional overrides, zero-width characters), so a name
// shown in a terminal, a log or a page shows as what it is.
func checkName(field, name string) error {
	if !utf8.ValidString(name) {
		return apperr.New(apperr.InvalidRequest, "%s is not valid UTF-8", field)
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return apperr.New(apperr.InvalidRequest, "%s is %d characters; at most %d are allowed", field, n, MaxNameLen)
	}
	if c, bad := events.UnprintableIn(name); bad {
		return apperr.New(apperr.InvalidRequest, "%s holds the character %U, which shows as something else or nothing (a control, line break, bidirectional or zero-width character); names are printable text", field, c)
	}
	return nil
}

// maxAdminBody bounds an admin API request body.
const maxAdminBody = 64 << 10

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return apperr.New(apperr.RequestTooLarge, "the request body is larger than the %d KiB the admin API reads", maxAdminBody>>10)
		}
		return apperr.New(apperr.InvalidRequest, "the request body must be a JSON object with the documented fields: %s", clip(err.Error(), maxLoggedPath))
	}
	if dec.More() {
		return apperr.New(apperr.InvalidRequest, "the request body must hold one JSON object and nothing after it")
	}
	return nil
}

// AccountBody is the admin view of an account. Amounts are credits.
type AccountBody struct {
	AccountID      string    `json:"account_id"`
	Name           string    `json:"name"`
	Plan           string    `json:"plan"`
	CreatedAt      time.Time `json:"created_at"`
	Balance        float64   `json:"balance"`
	Reserved       float64   `json:"reserved"`
	SpentThisMonth float64   `json:"spent_this_month"`
	MonthlyCap     *float64  `json:"monthly_cap"`
	OpenQueries    int       `json:"open_queries"`
	LastPlanGrant  string    `json:"last_plan_grant,omitempty"`
	Keys           []KeyBody `json:"keys"`
}

// KeyBody is the admin view of a key; Key is set only in the creation answer.
type KeyBody struct {
	Key         string    `json:"key,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	AccountID   string    `json:"account_id"`
	Name        string    `json:"name"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
}

func keyBody(k *events.Key) KeyBody {
	return KeyBody{Fingerprint: k.Fingerprint, AccountID: k.AccountID, Name: k.Name, State: k.State, CreatedAt: k.CreatedAt}
}

func accountBody(acc *accounts.AccountView) AccountBody {
	out := AccountBody{
		AccountID: acc.ID, Name: acc.Name, Plan: acc.Plan, CreatedAt: acc.CreatedAt, Keys: []KeyBody{},
		Balance: events.Credits(acc.BalanceMicros), Reserved: events.Credits(acc.ReservedMicros),
		SpentThisMonth: events.Credits(acc.SpentThisMonth), OpenQueries: acc.OpenQueries, LastPlanGrant: acc.GrantedPeriod,
	}
	if acc.CapMicros != nil {
		c := events.Credits(*acc.CapMicros)
		out.MonthlyCap = &c
	}
	for i := range acc.Keys {
		out.Keys = append(out.Keys, keyBody(&acc.Keys[i]))
	}
	return out
}

func (a *Admin) createAccount(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name string `json:"name"`
			Plan string `json:"plan"`
		}
		if err := decodeBody(r, &body); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		if err := checkName("name", body.Name); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		acc, err := a.Accounts.CreateAccount(r.Context(), body.Name, body.Plan)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusCreated, accountBody(acc))
	}
}

func (a *Admin) getAccount(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		acc, err := a.Accounts.Account(r.Context(), chi.URLParam(r, "account_id"))
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, accountBody(acc))
	}
}

func (a *Admin) storage(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := a.Storage.Storage(r.Context(), chi.URLParam(r, "account_id"))
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, st)
	}
}

func (a *Admin) createKey(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name      string `json:"name"`
			AcceptAUP bool   `json:"accept_aup"`
		}
		if err := decodeBody(r, &body); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		if err := checkName("name", body.Name); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		secret, k, err := a.Accounts.CreateKey(r.Context(), chi.URLParam(r, "account_id"), body.Name, body.AcceptAUP)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		out := keyBody(k)
		out.Key = secret.String()
		writeJSON(w, http.StatusCreated, out)
	}
}

func (a *Admin) transition(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k, err := a.Accounts.Transition(r.Context(), chi.URLParam(r, "fingerprint"), chi.URLParam(r, "action"))
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, keyBody(k))
	}
}

// maxCredits bounds an amount given in credits.
const maxCredits = 1e9

// micros converts a JSON amount of credits to micro-credits.
func micros(credits float64) (int64, error) {
	if math.IsNaN(credits) || math.Abs(credits) > maxCredits {
		return 0, apperr.New(apperr.InvalidRequest, "amounts are numbers of credits of at most %g", float64(maxCredits))
	}
	return int64(math.Round(credits * events.MicrosPerCredit)), nil
}

func (a *Admin) adjust(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Amount *float64 `json:"amount"`
			Reason string   `json:"reason"`
		}
		if err := decodeBody(r, &body); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		if body.Amount == nil {
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "amount is required: a number of credits, negative to take credits away"), "")
			return
		}
		m, err := micros(*body.Amount)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		acc, err := a.Ledger.Adjust(r.Context(), chi.URLParam(r, "account_id"), m, body.Reason)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, accountBody(acc))
	}
}

func (a *Admin) setCap(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Credits json.RawMessage `json:"credits"`
		}
		if err := decodeBody(r, &body); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		var capMicros *int64
		if len(body.Credits) == 0 {
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "credits is required: a number of credits, or null for no cap"), "")
			return
		}
		if string(body.Credits) != "null" {
			var c float64
			if err := json.Unmarshal(body.Credits, &c); err != nil {
				s.writeError(w, r, apperr.New(apperr.InvalidRequest, "credits must be a number or null"), "")
				return
			}
			m, err := micros(c)
			if err != nil {
				s.writeError(w, r, err, "")
				return
			}
			capMicros = &m
		}
		acc, err := a.Ledger.SetCap(r.Context(), chi.URLParam(r, "account_id"), capMicros)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, accountBody(acc))
	}
}

// LedgerEntry is one entry of GET /admin/v1/accounts/{id}/ledger.
type LedgerEntry struct {
	Seq           uint64    `json:"seq"`
	Time          time.Time `json:"time"`
	Type          string    `json:"type"`
	Amount        float64   `json:"amount"`
	BalanceAfter  float64   `json:"balance_after"`
	ReservedAfter float64   `json:"reserved_after"`
	RequestID     string    `json:"request_id,omitempty"`
	ModelCall     string    `json:"model_call,omitempty"`
	WrittenOff    float64   `json:"written_off,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	MonthlyCap    *float64  `json:"monthly_cap,omitempty"`
}

// LedgerPage is the body of GET /admin/v1/accounts/{id}/ledger.
type LedgerPage struct {
	Entries   []LedgerEntry `json:"entries"`
	NextAfter *uint64       `json:"next_after"`
}

func (a *Admin) ledgerPage(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		after, limit := uint64(0), 100
		if v := r.URL.Query().Get("after"); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				s.writeError(w, r, apperr.New(apperr.InvalidRequest, "after must be the seq of an entry"), "")
				return
			}
			after = n
		}
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				s.writeError(w, r, apperr.New(apperr.InvalidRequest, "limit must be a whole number from 1 to 1000"), "")
				return
			}
			limit = n
		}
		entries, next, err := a.Ledger.Entries(r.Context(), chi.URLParam(r, "account_id"), after, limit)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		page := LedgerPage{Entries: []LedgerEntry{}}
		if next != 0 {
			page.NextAfter = &next
		}
		for _, e := range entries {
			le := LedgerEntry{
				Seq: e.Seq, Time: e.Time, Type: e.Type, Amount: events.Credits(e.AmountMicros),
				BalanceAfter: events.Credits(e.BalanceAfter), ReservedAfter: events.Credits(e.ReservedAfter),
				RequestID: e.RequestID, ModelCall: e.CallID, WrittenOff: events.Credits(e.WrittenOff), Reason: e.Reason,
			}
			if e.CapAfterMicros != nil {
				c := events.Credits(*e.CapAfterMicros)
				le.MonthlyCap = &c
			}
			page.Entries = append(page.Entries, le)
		}
		writeJSON(w, http.StatusOK, page)
	}
}
