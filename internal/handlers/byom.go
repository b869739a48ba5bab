package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/byom"
	"github.com/crosscheck/crosscheck/internal/events"
)

// BYOMAdmin runs the admin commands on customer-owned models.
type BYOMAdmin interface {
	Connect(ctx context.Context, accountID string, req byom.ConnectRequest) (*byom.View, error)
	List(ctx context.Context, accountID string) ([]byom.View, error)
	Get(ctx context.Context, accountID, modelID string) (*byom.View, error)
	Transition(ctx context.Context, accountID, modelID, action string) (*byom.View, error)
	Test(ctx context.Context, accountID, modelID string) (*byom.View, error)
	Rotate(ctx context.Context) (byom.Rotation, error)
}

// CustomCatalog lists an account's usable customer-owned models.
type CustomCatalog interface {
	Active(ctx context.Context, accountID string) ([]byom.View, error)
}

// CustomModel is one entry of the custom group of GET /v1/models.
type CustomModel struct {
	ModelID      string              `json:"model_id"`
	Name         string              `json:"name"`
	Kind         string              `json:"kind"`
	Model        string              `json:"model"`
	State        string              `json:"state"`
	Capabilities events.Capabilities `json:"capabilities"`
	Billing      string              `json:"billing"`
}

// MarshalJSON writes the group; the custom group's models are its
// CustomModels.
func (g ModelGroup) MarshalJSON() ([]byte, error) {
	type plain ModelGroup
	if g.Name != events.ProviderCustom {
		return json.Marshal(plain(g))
	}
	custom := g.CustomModels
	if custom == nil {
		custom = []CustomModel{}
	}
	return json.Marshal(struct {
		Name      string        `json:"name"`
		Simulated bool          `json:"simulated"`
		Models    []CustomModel `json:"models"`
	}{g.Name, false, custom})
}

// customGroup is the caller's custom group.
func (s *Server) customGroup(r *http.Request) (ModelGroup, error) {
	g := ModelGroup{Name: events.ProviderCustom}
	if s.Custom == nil {
		return g, nil
	}
	views, err := s.Custom.Active(r.Context(), caller(r).AccountID)
	if err != nil {
		return g, err
	}
	for _, v := range views {
		g.CustomModels = append(g.CustomModels, CustomModel{ModelID: v.ModelID, Name: v.Name, Kind: v.Kind, Model: v.Model,
			State: v.State, Capabilities: v.Capabilities, Billing: "customer"})
	}
	return g, nil
}

func (a *Admin) byomRoutes(s *Server, r chi.Router) {
	r = r.With(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a.BYOM == nil {
				s.writeError(w, r, apperr.New(apperr.NotFound, "customer-owned models are not served by this process"), "")
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	r.Post("/accounts/{account_id}/models", func(w http.ResponseWriter, r *http.Request) {
		var body byom.ConnectRequest
		if err := decodeBody(r, &body); err != nil {
			s.writeError(w, r, err, "")
			return
		}
		v, err := a.BYOM.Connect(r.Context(), chi.URLParam(r, "account_id"), body)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusCreated, v)
	})
	r.Get("/accounts/{account_id}/models", func(w http.ResponseWriter, r *http.Request) {
		vs, err := a.BYOM.List(r.Context(), chi.URLParam(r, "account_id"))
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": vs})
	})
	r.Get("/accounts/{account_id}/models/{model_id}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.BYOM.Get(r.Context(), chi.URLParam(r, "account_id"), chi.URLParam(r, "model_id"))
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	r.Delete("/accounts/{account_id}/models/{model_id}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.BYOM.Transition(r.Context(), chi.URLParam(r, "account_id"), chi.URLParam(r, "model_id"), events.BYOMActionDelete)
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	r.Post("/accounts/{account_id}/models/{model_id}/{action}", func(w http.ResponseWriter, r *http.Request) {
		account, model, action := chi.URLParam(r, "account_id"), chi.URLParam(r, "model_id"), chi.URLParam(r, "action")
		var v *byom.View
		var err error
		switch action {
		case "test":
			v, err = a.BYOM.Test(r.Context(), account, model)
		case events.BYOMActionDisable, events.BYOMActionEnable:
			v, err = a.BYOM.Transition(r.Context(), account, model, action)
		default:
			err = apperr.New(apperr.NotFound, "unknown model action %q: use disable, enable or test (DELETE the model to delete it)", action)
		}
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	r.Post("/master-key/rotate", func(w http.ResponseWriter, r *http.Request) {
		out, err := a.BYOM.Rotate(r.Context())
		if err != nil {
			s.writeError(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}
