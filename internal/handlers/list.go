package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// QueryControl lists and cancels an account's queries.
type QueryControl interface {
	List(ctx context.Context, caller accounts.Caller, p queries.ListParams) (apiv1.QueryList, error)
	Cancel(ctx context.Context, caller accounts.Caller, id string) (json.RawMessage, error)
}

// list answers GET /v1/queries: a page of the caller's account's queries,
// newest first.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	p, err := queries.ParseListParams(r.URL.Query())
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	page, err := s.Control.List(r.Context(), caller(r), p)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// cancel answers POST /v1/queries/{id}/cancel: 202 with the query as GET
// returns it at that moment; the query ends failed with code cancelled.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	raw, err := s.Control.Cancel(r.Context(), caller(r), id)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	writeRaw(w, http.StatusAccepted, raw)
}
