package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/chat"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// chatWait bounds how long a chat completion that does not stream waits for
// its query; the query goes on after it, at /v1/queries/{id}. It is under
// the 10 minutes OpenAI's Python and Node clients wait by default, so that
// they get the answer (which tells them not to retry) before they time out
// and retry on their own with a new query.
const chatWait = 9 * time.Minute

// requestIDHeader gives every response an x-request-id: a new request id,
// which a chat completion replaces with its query's.
func requestIDHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", queries.NewRequestID())
		next.ServeHTTP(w, r)
	})
}

// chatAuth authenticates as authenticate does, answering a refusal in the
// chat completions' error shape.
func (s *Server) chatAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			closeUnread(w, r)
			s.chatError(w, r, err, "")
			return
		}
		authenticated(r, c)
		next.ServeHTTP(w, r.WithContext(contextWithCaller(r, c)))
	})
}

// Bounds of the chat request bodies over smallChatBody a process reads and
// holds at a time (with their decoding and inline files, until the query is
// submitted), in all, per API key and per account (half of the process's,
// whatever the number of its keys): the door takes bodies of up to 8 MiB.
// Other bodies are at most smallChatBody, as a query's.
const (
	MaxLargeChatBodies           = 8
	MaxLargeChatBodiesPerKey     = 2
	MaxLargeChatBodiesPerAccount = MaxLargeChatBodies / 2
)

// MaxBodiesPerKey bounds the request bodies of one API key being read at a
// time, on the query and chat endpoints together: with bodies of up to
// 256 KiB, 4 MiB a key, where only the connection limits (4,096 by 256 KiB)
// bounded them.
const MaxBodiesPerKey = 16

// chatCompletions serves POST /v1/chat/completions: the request becomes a
// query, submitted as POST /v1/queries submits one (same credits, in-flight
// limit, Idempotency-Key and events), and the answer is followed from the
// query's events: as one chat.completion, or streamed as chunks. Each
// completion holds one of the event streams' slots while it follows.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	if s.stopping() {
		s.chatError(w, r, errStopping, "")
		return
	}
	c := caller(r)
	body, held, err := s.readChatBody(w, r, c)
	defer held()
	if err != nil {
		closeUnread(w, r)
		s.chatError(w, r, err, "")
		return
	}
	// The body is read: the connection's read deadline would end the
	// request's context while it waits for its query.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if err := checkUTF8(body); err != nil {
		s.chatError(w, r, err, "")
		return
	}
	req, err := chat.Decode(body)
	if err != nil {
		s.chatError(w, r, err, "")
		return
	}
	key, hasKey := "", false
	if vals, ok := r.Header["Idempotency-Key"]; ok {
		key, hasKey = vals[0], true
	}
	if e := s.streams.acquire(c, s.streamBounds()); e != nil {
		s.chatError(w, r, e, "")
		return
	}
	defer s.streams.release(c)
	files := append([]string(nil), req.Files...)
	var inline []string
	for _, f := range req.Inline {
		if s.Files == nil {
			s.chatError(w, r, apperr.New(apperr.InvalidFiles, "this server takes no files"), "")
			return
		}
		m, err := s.Files.Upload(r.Context(), c, f.Name, "query", bytes.NewReader(f.Data))
		if err != nil {
			s.dropInline(r, c, inline, err)
			s.chatError(w, r, err, "")
			return
		}
		inline = append(inline, m.ID)
		files = append(files, m.ID)
	}
	sub, err := s.Queries.Submit(r.Context(), c, req.QueryBody(files), key, hasKey)
	if err != nil {
		s.dropInline(r, c, inline, err)
		s.chatError(w, r, err, "")
		return
	}
	// The body's inline files are stored: their bytes are not needed.
	req.Inline = nil
	held()
	w.Header().Set("X-Request-Id", sub.RequestID)
	s.followChat(w, r, req, sub.RequestID)
}

// dropInline deletes the inline files a completion uploaded when the
// completion is refused (err): the client never learns their ids, and an
// OpenAI client retries a 429 on its own, each attempt uploading them again.
// Only a refusal (a 4xx) is certain: after a server error, or when the
// client went away, the submission may have been stored all the same (its
// acknowledgement lost), so the files stay, for the query that may read
// them, until they expire.
func (s *Server) dropInline(r *http.Request, c accounts.Caller, ids []string, err error) {
	if len(ids) == 0 || Status(apperr.From(err).Code) >= 500 || r.Context().Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if derr := s.Files.Delete(ctx, c.AccountID, id); derr != nil {
			s.Log.Warn().Err(derr).Str("file_id", id).Msg("chat: an inline file of a refused completion could not be deleted; it expires with its lifetime")
		}
	}
}

// smallChatBody is the part of a chat body read without a large body's
// token: as much as a query's body may hold.
const smallChatBody = queries.MaxBodyBytes

// readChatBody reads r's body, at most chat.MaxBodyBytes. A body over
// smallChatBody is read on only with one of the process's large-body slots
// (MaxLargeChatBodies; MaxLargeChatBodiesPerKey for the caller's key,
// MaxLargeChatBodiesPerAccount for its account): none free is 503
// service_restarting, the key's or the account's taken 429 rate_limited. held
// gives the slot back (it may be called more than once, and does nothing
// for a small body). A failure is the refusal to write.
func (s *Server) readChatBody(w http.ResponseWriter, r *http.Request, c accounts.Caller) (body []byte, held func(), err error) {
	held = func() {}
	tooLarge := apperr.New(apperr.InvalidRequest, "the request body exceeds %d bytes; upload large files with POST /v1/files and send their file_id", chat.MaxBodyBytes)
	if r.ContentLength > chat.MaxBodyBytes {
		// Its size says so: refused before a byte of it is read.
		return nil, held, tooLarge
	}
	done, err := s.readingBody(w, r)
	if err != nil {
		return nil, held, err
	}
	defer done()
	limited := http.MaxBytesReader(w, r.Body, chat.MaxBodyBytes)
	body, err = io.ReadAll(io.LimitReader(limited, smallChatBody+1))
	if err == nil && len(body) > smallChatBody {
		release, e := s.largeBodies.take(c, slotBounds{max: MaxLargeChatBodies, perKey: MaxLargeChatBodiesPerKey, perAccount: MaxLargeChatBodiesPerAccount})
		if e != nil {
			return nil, held, e
		}
		held = release
		var rest []byte
		rest, err = io.ReadAll(limited)
		body = append(body, rest...)
	}
	var over *http.MaxBytesError
	switch {
	case errors.As(err, &over):
		return nil, held, tooLarge
	case err != nil:
		return nil, held, apperr.New(apperr.InvalidRequest, "could not read the whole request body (it ended early or did not arrive within the read timeout)")
	}
	return body, held, nil
}

// chatAnswer is a query's outcome as the chat door reports it.
type chatAnswer struct {
	doc   *projections.QueryDoc
	usage chat.Usage
	query json.RawMessage
}

func (a *chatAnswer) text() string {
	if a.doc.Result.Answer == nil {
		return ""
	}
	return a.doc.Result.Answer.Text
}

// followChat follows query id from its first event to its end and answers
// it: as a chat.completion, or, for a streaming request, as the chunks of
// the answer after keep-alive comments that carry the stage.
func (s *Server) followChat(w http.ResponseWriter, r *http.Request, req chat.Request, id string) {
	flusher, _ := w.(http.Flusher)
	started := false
	comment := func(text string) {
		if !req.Stream {
			return
		}
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		fmt.Fprintf(w, ": %s\n\n", text)
		if flusher != nil {
			flusher.Flush()
		}
	}
	fail := func(err error) {
		if !started {
			s.chatError(w, r, err, id)
			return
		}
		// After the first byte: one data event with the error, then the end.
		e := apperr.From(err)
		s.logAnswered(r, err, e, id)
		data, _ := json.Marshal(chat.NewError(Envelope(e, id, s.DocsURL).Error, Status(e.Code), e.Param))
		fmt.Fprintf(w, "data: %s\n\n", data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if req.Stream {
		comment("stage " + events.StageQueued)
	} else {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(chatWait + 30*time.Second))
	}
	ctx := r.Context()
	recs, errc := s.Events.FollowQuery(ctx, id)
	beat := time.NewTicker(s.heartbeat())
	defer beat.Stop()
	wait := time.NewTimer(chatWait)
	defer wait.Stop()
	a := &chatAnswer{doc: &projections.QueryDoc{}}
	stage := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			if !req.Stream {
				fail(&apperr.Error{Code: apperr.ServiceRestarting, RequestID: id,
					Message: fmt.Sprintf("the query is still running after %s; it goes on: poll GET /v1/queries/%s", chatWait, id)})
				return
			}
		case <-beat.C:
			comment(fmt.Sprintf("stage %s %d%%", a.doc.Result.Stage, a.doc.Result.ProgressPercent))
		case err := <-errc:
			fail(followFailure(err))
			return
		case rec, ok := <-recs:
			if !ok {
				var err error
				select {
				case err = <-errc:
				default:
				}
				fail(followFailure(err))
				return
			}
			a.doc.Apply(rec)
			if _, u, _, charged := events.Charged(rec.Event); charged {
				a.usage.Add(u.InputTokens, u.OutputTokens)
			}
			res := &a.doc.Result
			if res.Stage != stage {
				stage = res.Stage
				comment(fmt.Sprintf("stage %s %d%%", res.Stage, res.ProgressPercent))
			}
			if !res.Terminal() {
				continue
			}
			if res.Status == events.StatusFailed {
				code, msg := apperr.Internal, "the query failed"
				if res.Error != nil {
					code, msg = res.Error.Code, res.Error.Message
				}
				fail(&apperr.Error{Code: code, Message: msg, RequestID: id})
				return
			}
			a.query, _ = json.Marshal(res)
			s.answerChat(w, req, id, a, started)
			return
		}
	}
}

// followFailure is the error of a follow that ended before the query did:
// the query goes on.
func followFailure(err error) error {
	if err == nil || apperr.Code(err) == apperr.Internal || apperr.Code(err) == apperr.ServiceRestarting {
		return &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 1,
			Message: "following this query's events failed; the query goes on: poll GET /v1/queries/{id} (the id is this response's x-request-id)"}
	}
	return err
}

// answerChat writes the answer of a completed query.
func (s *Server) answerChat(w http.ResponseWriter, req chat.Request, id string, a *chatAnswer, started bool) {
	created := a.doc.Result.CreatedAt.Unix()
	calls := toolCallsOf(a.doc)
	if req.OneToolCall && len(calls) > 1 {
		// parallel_tool_calls false: the first call now, the others when
		// the models ask again in the next turn, with its result.
		calls = calls[:1]
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, chat.NewCompletion(id, req.Model, created, a.text(), calls, a.usage, a.query))
		return
	}
	for _, c := range chat.Chunks(id, req.Model, created, a.text(), calls, a.usage, a.query, req.IncludeUsage) {
		data, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", data)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// toolCallsOf returns the tool calls of a query's answer in OpenAI's shape.
func toolCallsOf(doc *projections.QueryDoc) []chat.ToolCall {
	var out []chat.ToolCall
	for _, c := range doc.Result.ToolCalls {
		out = append(out, chat.ToolCall{ID: c.ID, Type: "function", Function: chat.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
	}
	return out
}

// chatError writes err in the shape OpenAI's clients parse. An answer
// with a retry advice carries Retry-After and retry-after-ms. A 409, an
// error that is not retriable, the failure of the completion's query, and
// any error after the query was submitted by a request without an
// Idempotency-Key carry x-should-retry: false: OpenAI's clients retry 409
// and 5xx on their own, and such a retry is a new query, charged again for
// the calls it makes (the first one goes on), which is the caller's
// decision. With a key, a retry finds the same query.
func (s *Server) chatError(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	e := apperr.From(err)
	s.logAnswered(r, err, e, requestID)
	status := Status(e.Code)
	h := w.Header()
	if ra := e.RetryAfterSeconds(); ra > 0 {
		h.Set("Retry-After", strconv.Itoa(ra))
		h.Set("Retry-After-Ms", strconv.Itoa(ra*1000))
	}
	_, hasKey := r.Header["Idempotency-Key"]
	if status == http.StatusConflict || !e.Retriable() || queryFailed(e, requestID) || (requestID != "" && !hasKey) {
		h.Set("X-Should-Retry", "false")
	}
	writeJSON(w, status, chat.NewError(Envelope(e, requestID, s.DocsURL).Error, status, e.Param))
}

// queryFailed reports whether e is the failure of query requestID itself
// (provider_error, aggregation_failed), not a refusal to run it.
func queryFailed(e *apperr.Error, requestID string) bool {
	return requestID != "" && (e.Code == apperr.ProviderError || e.Code == apperr.AggregationFailed)
}

// ModelObject is one entry of the data of GET /v1/models, in OpenAI's shape.
type ModelObject = apiv1.ModelObject

// chatModelsCreated is the created time of the chat door's models.
var chatModelsCreated = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

func chatModels() []ModelObject {
	out := make([]ModelObject, 0, len(chat.Models))
	for _, id := range chat.Models {
		out = append(out, ModelObject{ID: id, Object: "model", Created: chatModelsCreated, OwnedBy: "crosscheck"})
	}
	return out
}

// model serves GET /v1/models/{id}: one of the chat door's models, or
// 404 model_not_found.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	for _, m := range chatModels() {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	s.chatError(w, r, &apperr.Error{Code: apperr.ModelNotFound, Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist: GET /v1/models lists svc-unify, svc-justify and svc-verify", clip(id, maxEchoedID))}, "")
}

// maxEchoedID bounds an id or a name of the client's that a message echoes.
const maxEchoedID = 64
