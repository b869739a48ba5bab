package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// Authenticator checks a request's Authorization header.
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (accounts.Caller, error)
}

// Queries admits and reads queries.
type Queries interface {
	Submit(ctx context.Context, caller accounts.Caller, body []byte, idempotencyKey string, hasKey bool) (queries.Submission, error)
	Get(ctx context.Context, caller accounts.Caller, id string) (json.RawMessage, error)
	Estimate(ctx context.Context, caller accounts.Caller, body []byte) (queries.Quote, error)
}

// Follower streams a query's events from the first one on, then live.
type Follower interface {
	FollowQuery(ctx context.Context, requestID string) (<-chan events.Record, <-chan error)
}

// Server is the public API.
type Server struct {
	Auth    Authenticator
	Queries Queries
	// Control lists and cancels queries.
	Control QueryControl
	Events  Follower
	Files   Files
	Catalog *catalog.Catalog
	// Custom lists the caller's customer-owned models; nil lists none.
	Custom CustomCatalog
	Log    zerolog.Logger
	// DocsURL is the base of every error's docs_url: {DocsURL}/errors/<code>.
	DocsURL string
	// Heartbeat is the interval of SSE heartbeat comments.
	Heartbeat time.Duration
	// MaxStreams bounds the open event streams of the server (chat
	// completions following their query among them), MaxStreamsPerKey those
	// of one API key, and MaxStreamsPerAccount those of all the keys of one
	// account; zero is no bound.
	MaxStreams, MaxStreamsPerKey, MaxStreamsPerAccount int
	// MaxBodiesPerAccount bounds the request bodies being read at a time
	// for the keys of one account, on the query and chat endpoints
	// together; zero is no bound.
	MaxBodiesPerAccount int
	// Ready reports whether the service can take requests.
	Ready func(ctx context.Context) error
	// Stopping, when set, reports that the process is shutting down: it is
	// not ready and refuses new submissions with service_restarting, which
	// the client resubmits (to another process) with the same
	// Idempotency-Key. Reads and open streams go on until the servers stop.
	Stopping func() bool

	// UploadIdle is how long an upload's body may send nothing before the
	// upload is ended; zero takes DefaultUploadIdle.
	UploadIdle time.Duration
	// EstimateRate is the time of estimating one API key may spend per
	// second (estimates.go); zero is no bound.
	EstimateRate time.Duration
	// TrustCallerTrace makes a request's span continue the trace of its
	// traceparent; otherwise the span only links to it (observed).
	TrustCallerTrace bool

	streams keySlots
	uploads keySlots
	// largeBodies counts the chat bodies over smallChatBody being read or
	// held (readChatBody), bodies every body being read (readingBody).
	largeBodies keySlots
	bodies      keySlots
	// estimating counts the estimates running; budgets their time.
	estimating keySlots
	budgets    *estimateBudgets
}

// Handler returns the public API's router.
func (s *Server) Handler() http.Handler {
	s.streams.what, s.streams.hint = "open event streams", "close one, or poll GET /v1/queries/{id}"
	s.uploads.what, s.uploads.hint = "uploads in progress", "wait for one to finish"
	s.bodies.what, s.bodies.hint = "request bodies being read", "send the next once one has arrived"
	s.estimating.what, s.estimating.hint = "estimates running", "wait for one to be answered"
	s.budgets = newEstimateBudgets()
	s.largeBodies.what, s.largeBodies.hint = "chat requests over 256 KiB being read", "wait for one to be answered, or upload large files with POST /v1/files and send their file_id"
	r := chi.NewRouter()
	r.Use(observed(s.TrustCallerTrace))
	r.Use(accessLog(s.Log))
	r.Use(recoverer)
	r.Use(requestIDHeader)
	r.Get("/healthz", healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/docs/errors/{code}", s.errorDoc)
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate)
		r.Post("/queries", s.submit)
		r.Get("/queries", s.list)
		r.Get("/queries/{id}", s.get)
		r.Post("/queries/{id}/cancel", s.cancel)
		r.With(s.boundStreams, longLived(s.streamWindow)).Get("/queries/{id}/stream", s.stream)
		r.Post("/estimate-cost", s.estimate)
		r.Post("/files", s.upload)
		r.Get("/files", s.listFiles)
		r.Get("/files/{id}", s.getFile)
		r.Delete("/files/{id}", s.deleteFile)
	})
	r.With(s.chatAuth, longLived(s.streamWindow)).Post("/v1/chat/completions", s.chatCompletions)
	// OpenAI's clients read the models too: a refusal in the chat door's shape.
	r.With(s.chatAuth).Get("/v1/models", s.models)
	r.With(s.chatAuth).Get("/v1/models/{id}", s.model)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noMethod)
	return r
}

func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	closeUnread(w, r)
	s.routeError(w, r, apperr.New(apperr.NotFound, "no route %s %s", clip(r.Method, maxLoggedPath), clip(r.URL.Path, maxLoggedPath)))
}

// noMethod refuses a method the path does not take, saying in Allow which
// ones it does (RFC 9110).
func (s *Server) noMethod(w http.ResponseWriter, r *http.Request) {
	closeUnread(w, r)
	msg := fmt.Sprintf("method %s is not allowed on %s", clip(r.Method, maxLoggedPath), clip(r.URL.Path, maxLoggedPath))
	if allow := allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		msg += "; it takes " + strings.Join(allow, ", ")
	}
	s.routeError(w, r, apperr.New(apperr.MethodNotAllowed, "%s", msg))
}

// routeError writes a refusal of the router: in OpenAI's shape on the paths
// of the OpenAI-compatible door, whose clients read error.type.
func (s *Server) routeError(w http.ResponseWriter, r *http.Request, err error) {
	if p := r.URL.Path; strings.HasPrefix(p, "/v1/chat/") || p == "/v1/models" || strings.HasPrefix(p, "/v1/models/") {
		s.chatError(w, r, err, "")
		return
	}
	s.writeError(w, r, err, "")
}

// allowed returns the methods the router that refused r takes on r's path.
// The router is the one that refused r: the whole path's, or a subrouter's
// holding the rest of the path (RoutePath).
func allowed(r *http.Request) []string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return nil
	}
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		for _, path := range []string{rctx.RoutePath, r.URL.Path} {
			if path != "" && rctx.Routes.Match(chi.NewRouteContext(), m, path) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// HealthHandler serves only /healthz and /readyz: a worker's HTTP address.
func (s *Server) HealthHandler() http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", healthz)
	r.Get("/readyz", s.readyz)
	return r
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping() {
		s.writeError(w, r, errStopping, "")
		return
	}
	if s.Ready != nil {
		if err := s.Ready(r.Context()); err != nil {
			s.writeError(w, r, apperr.New(apperr.ServiceRestarting, "not ready: %v", err), "")
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

type callerKey struct{}

func caller(r *http.Request) accounts.Caller {
	c, _ := r.Context().Value(callerKey{}).(accounts.Caller)
	return c
}

func contextWithCaller(r *http.Request, c accounts.Caller) context.Context {
	return context.WithValue(r.Context(), callerKey{}, c)
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			// Refused before its body is read: the answer goes out now.
			closeUnread(w, r)
			s.routeError(w, r, err)
			return
		}
		authenticated(r, c)
		next.ServeHTTP(w, r.WithContext(contextWithCaller(r, c)))
	})
}

// SubmitResponse is the 202 body of POST /v1/queries.
type SubmitResponse = apiv1.Accepted

// readQuery reads a query request body, bounded in size, in time (the
// server's read timeout) and in the bodies its key has being read
// (readingBody), and refuses one that is not valid UTF-8.
func (s *Server) readQuery(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := apperr.New(apperr.InvalidRequest, "the request body exceeds %d bytes; the prompt may be at most 32 KB", queries.MaxBodyBytes)
	if r.ContentLength > queries.MaxBodyBytes {
		// Its size says so: refused before a byte of it is read.
		closeUnread(w, r)
		return nil, tooLarge
	}
	done, e := s.readingBody(w, r)
	if e != nil {
		return nil, e
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, queries.MaxBodyBytes))
	done()
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			return nil, tooLarge
		}
		return nil, apperr.New(apperr.InvalidRequest, "could not read the whole request body (it ended early or did not arrive within the read timeout)")
	}
	return body, checkUTF8(body)
}

// readingBody takes one of the caller's MaxBodiesPerKey slots of bodies
// being read (and of its account's MaxBodiesPerAccount), and returns the
// function that gives it back; a key or an account holding them all is
// refused at once (429), its connection closed unread.
func (s *Server) readingBody(w http.ResponseWriter, r *http.Request) (done func(), err error) {
	done, e := s.bodies.take(caller(r), slotBounds{perKey: MaxBodiesPerKey, perAccount: s.MaxBodiesPerAccount})
	if e != nil {
		closeUnread(w, r)
		return nil, e
	}
	return done, nil
}

// checkUTF8 refuses a body that is not valid UTF-8, which a JSON decoder
// would otherwise carry on with each invalid byte replaced by U+FFFD:
// invalid_prompt when an invalid byte is in the prompt, else
// invalid_request.
func checkUTF8(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	at := 0
	for at < len(body) {
		r, n := utf8.DecodeRune(body[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	var v struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &v) == nil && !utf8.Valid(v.Prompt) {
		return apperr.New(apperr.InvalidPrompt, "prompt is not valid UTF-8 (byte 0x%02x at offset %d of the body); send the prompt as UTF-8 text", body[at], at)
	}
	return apperr.New(apperr.InvalidRequest, "the request body is not valid UTF-8 (byte 0x%02x at offset %d)", body[at], at)
}

// errStopping answers a process that is shutting down.
var errStopping = &apperr.Error{Code: apperr.ServiceRestarting, Message: "this server is shutting down; resubmit with the same Idempotency-Key", RetryAfter: 1}

func (s *Server) stopping() bool { return s.Stopping != nil && s.Stopping() }

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	if s.stopping() {
		s.writeError(w, r, errStopping, "")
		return
	}
	body, err := s.readQuery(w, r)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	key, hasKey := "", false
	if vals, ok := r.Header["Idempotency-Key"]; ok {
		key, hasKey = vals[0], true
	}
	sub, err := s.Queries.Submit(r.Context(), caller(r), body, key, hasKey)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	w.Header().Set("Location", "/v1/queries/"+sub.RequestID)
	writeJSON(w, http.StatusAccepted, SubmitResponse{
		RequestID: sub.RequestID, Object: "query", Status: sub.Status, IdempotentReplayed: sub.Replayed,
		PollURL: "/v1/queries/" + sub.RequestID, StreamURL: "/v1/queries/" + sub.RequestID + "/stream",
	})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	raw, err := s.Queries.Get(r.Context(), caller(r), id)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	writeRaw(w, http.StatusOK, raw)
}

// ModelGroup is one group of the catalog: a first-party provider, or custom.
type ModelGroup struct {
	Name      string          `json:"name"`
	Backend   string          `json:"backend,omitempty"`
	Simulated bool            `json:"simulated"`
	Models    []catalog.Model `json:"models"`
	// CustomModels are the custom group's models.
	CustomModels []CustomModel `json:"-"`
}

// ModelsResponse is the body of GET /v1/models: OpenAI's model list (data:
// the chat door's models) and crosscheck's catalog (groups) in one.
type ModelsResponse struct {
	Object string        `json:"object"`
	Data   []ModelObject `json:"data"`
	Groups []ModelGroup  `json:"groups"`
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	resp := ModelsResponse{Object: "list", Data: chatModels()}
	for _, p := range s.Catalog.Providers {
		resp.Groups = append(resp.Groups, ModelGroup{Name: p.Key, Backend: p.Backend, Simulated: p.Simulated(), Models: p.Models})
	}
	custom, err := s.customGroup(r)
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	resp.Groups = append(resp.Groups, custom)
	writeJSON(w, http.StatusOK, resp)
}

func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				logger(r).Error().Interface("panic", v).Msg("handler panicked")
				writeJSON(w, http.StatusInternalServerError, Envelope(apperr.New(apperr.Internal, "internal error"), "", ""))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// EstimateResponse is the body of POST /v1/estimate-cost. Amounts are credits.
type EstimateResponse = apiv1.Estimate

// EstimateCall is one model call of an estimate.
type EstimateCall = apiv1.EstimateCall

func (s *Server) estimate(w http.ResponseWriter, r *http.Request) {
	spent, e := s.startEstimate(caller(r))
	if e != nil {
		closeUnread(w, r)
		s.writeError(w, r, e, "")
		return
	}
	body, err := s.readQuery(w, r)
	if err != nil {
		spent(0)
		s.writeError(w, r, err, "")
		return
	}
	start := time.Now()
	q, err := s.Queries.Estimate(r.Context(), caller(r), body)
	spent(time.Since(start))
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	resp := EstimateResponse{
		Object: "estimate", Mode: q.Mode, EstimatedCredits: events.Credits(q.Estimate.Micros), MarginPercent: pricing.MarginPercent,
		Calls: []EstimateCall{}, Balance: events.Credits(q.Account.BalanceMicros), Reserved: events.Credits(q.Account.ReservedMicros),
		SpentThisMonth: events.Credits(q.Account.SpentThisMonth), Sufficient: q.Sufficient, WithinCap: q.WithinCap,
	}
	if q.Account.CapMicros != nil {
		c := events.Credits(*q.Account.CapMicros)
		resp.MonthlyCap = &c
	}
	for _, c := range q.Estimate.Calls {
		resp.Calls = append(resp.Calls, EstimateCall{
			Provider: c.Model.Provider, ModelID: c.Model.ModelID, CustomModel: c.Model.CustomModel, Role: c.Role,
			InputTokens: c.InputTokens, OutputTokens: c.OutputTokens, Credits: events.Credits(c.Micros),
		})
	}
	writeJSON(w, http.StatusOK, resp)
}
