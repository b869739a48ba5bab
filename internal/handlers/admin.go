package handlers

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/keys"
)

// AccountAdmin runs the admin commands on accounts and keys.
type AccountAdmin interface {
	CreateAccount(ctx context.Context, name, plan string) (*events.Account, error)
	Account(ctx context.Context, id string) (*events.Account, error)
	CreateKey(ctx context.Context, accountID, name string, acceptAUP bool) (keys.Key, *events.Key, error)
	Transition(ctx context.Context, fingerprint, action string) (*events.Key, error)
}

// Admin is the admin API; it stands in for the web application of the spec.
type Admin struct {
	Accounts AccountAdmin
	Token    string
	Log      zerolog.Logger
	DocsURL  string
}

// Handler returns the admin API's router.
func (a *Admin) Handler() http.Handler {
	s := &Server{DocsURL: a.DocsURL}
	r := chi.NewRouter()
	r.Use(accessLog(a.Log.With().Str("api", "admin").Logger()))
	r.Use(recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got := r.Header.Get("Authorization")
				if a.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+a.Token)) != 1 {
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
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, apperr.New(apperr.NotFound, "no route %s %s", r.Method, r.URL.Path), "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, apperr.New(apperr.MethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path), "")
	})
	return r
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apperr.New(apperr.InvalidRequest, "the request body must be a JSON object with the documented fields: %v", err)
	}
	if dec.More() {
		return apperr.New(apperr.InvalidRequest, "the request body must hold one JSON object and nothing after it")
	}
	return nil
}

// AccountBody is the admin view of an account.
type AccountBody struct {
	AccountID string    `json:"account_id"`
	Name      string    `json:"name"`
	Plan      string    `json:"plan"`
	CreatedAt time.Time `json:"created_at"`
	Keys      []KeyBody `json:"keys"`
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

func accountBody(acc *events.Account) AccountBody {
	out := AccountBody{AccountID: acc.ID, Name: acc.Name, Plan: acc.Plan, CreatedAt: acc.CreatedAt, Keys: []KeyBody{}}
	for _, fp := range acc.KeyOrder {
		out.Keys = append(out.Keys, keyBody(acc.Keys[fp]))
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
