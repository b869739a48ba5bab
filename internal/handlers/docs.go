package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// errorDocs explains each error code; docs_url points here by default.
var errorDocs = map[string]string{
	apperr.InvalidRequest:      "The request is malformed: the body is not one JSON object, has an unknown field, is not valid UTF-8, is too large or did not arrive whole within the read timeout, a header (Idempotency-Key, Last-Event-ID) is invalid, or the request is not valid HTTP/1.1 (then under the status Go's server chose: 400, 431 for header lines over the limit, 501, 505). Fix the request; do not retry it unchanged.",
	apperr.InvalidPrompt:       "prompt is missing, not a string, empty, not valid UTF-8, or longer than 32 KB (32768 bytes of UTF-8).",
	apperr.InvalidMode:         "mode is missing or is not one of unify, justify, verify, or the mode is not available on this server.",
	apperr.InvalidModels:       "models is not an object of provider key to model_id or null, names an unknown provider key, selects no model at all, or custom_models is not an array of byom_<id> strings.",
	apperr.InvalidModel:        "A model_id or custom model id is not in the catalog this server accepts now. GET /v1/models is the authority. A custom_models entry must be an active (or unverified) customer-owned model of the calling key's account: a disabled, deleted or unknown one, or another account's, is refused with this code, naming the entry.",
	apperr.InvalidFiles:        "The files field of a query is not acceptable: it must be an array of at most 5 distinct file ids (POST /v1/files) whose files total at most 20 MB.",
	apperr.FileNotFound:        "A file id of the query names no file of your account: it never existed, was deleted, or belongs to another account.",
	apperr.FileExpired:         "The file was uploaded 48 hours ago or more: it can no longer be read (GET /v1/files/{id}) or attached to a query. Upload it again and use the new file id.",
	apperr.InsufficientCredits: "The estimated cost exceeds the account's available credits. Top up or select fewer or cheaper models.",
	apperr.MonthlyCapExceeded:  "The query would pass the account's monthly credit cap.",
	apperr.RateLimited:         "The API key already has 8 queries in flight: wait at least Retry-After seconds (30); no exponential backoff is needed. Or your address holds the most open connections this server allows from one address (CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR): close idle ones, or wait Retry-After seconds (1). Or the API key, or all the keys of its account together, hold the most event streams, chat completions, request bodies being read or uploads a server allows them, or spent their time for estimates: the message says which; wait Retry-After seconds.",
	apperr.IdempotencyConflict: "The Idempotency-Key was used with a different request body within the last 24 hours. Use a new key for a new request.",
	apperr.InvalidAPIKey:       "The Authorization header is missing, is not 'Bearer <key>', or the key does not verify (this includes a wrong prefix).",
	apperr.KeyRevoked:          "The API key was revoked. Revocation is final: create a new key.",
	apperr.KeySuspended:        "An administrator suspended the API key. Contact support.",
	apperr.KeyDisabled:         "The key's owner disabled it. Enable it again to use it.",
	apperr.ServiceRestarting:   "The service is restarting, cannot reach its event store, or holds the most open connections it allows (CROSSCHECK_HTTP_MAX_CONNS). Resubmit with the same Idempotency-Key: the query is created once and charged once.",
	apperr.ProviderError:       "Every selected model failed. Retry after 1 s, then 5 s, then stop.",
	apperr.AggregationFailed:   "The models answered but the synthesis of one answer failed. Retry after 1 s, then 5 s, then stop.",
	apperr.NotFound:            "No such resource for this account. A query of another account is reported as not found.",
	apperr.ModelNotFound:       "POST /v1/chat/completions: model is not one of svc-unify, svc-justify, svc-verify (GET /v1/models lists them). Choose the providers with the crosscheck.models extension field instead.",
	apperr.Internal:            "An unexpected server error. It was logged; retry later.",
	apperr.MethodNotAllowed:    "The path exists but not with this HTTP method.",
	apperr.UnsupportedFileType: "POST /v1/files: the file's name has no accepted extension (png, jpg, jpeg, gif, webp, pdf, doc, docx, py, js, ts, html, htm, css, json, yaml, yml, sql, txt, md, csv, log, xml, toml), or its content, sniffed, is not what the extension says (an executable named .png, a zip named .docx that is not a Word document). Nothing was stored.",
	apperr.FileTooLarge:        "POST /v1/files: the file is larger than its kind allows: images 20 MB, PDF, DOC and DOCX 32 MB, text and code 10 MB. Nothing was stored.",
	apperr.InvalidFile:         "POST /v1/files: the file is empty, a text or code file is not valid UTF-8, or its text extraction failed (a malformed or hostile file, or one past the extraction's CPU, memory or time limits). Nothing was stored.",
	apperr.InvalidAdminToken:   "Admin API: the Authorization header does not carry the admin token.",
	apperr.InvalidTransition:   "Admin API: the key's state does not allow this action (for example, a revoked key stays revoked).",
	apperr.QueryEnded:          "POST /v1/queries/{id}/cancel: the query has ended (completed or failed), or its ending is being recorded, so there is nothing to cancel. GET /v1/queries/{id} returns its result.",
	apperr.Cancelled:           "The query's error code when it was cancelled (POST /v1/queries/{id}/cancel); its status is failed. It was charged for the model calls that had finished before the cancel was recorded, and at least the cancellation charge, a share of its reservation (10 % by default); the rest of its reservation was released. Submit it again to run it.",
	apperr.RequestTooLarge:     "Admin API: the request body is larger than the 64 KiB the admin API reads. Send the documented fields only.",
	apperr.QueryCrashed:        "The query's error code when the service stopped running it: its last runs (3 by default, CROSSCHECK_WORKER_MAX_CRASHES) each ended with the worker process that ran it (the process died, for example out of memory, or was killed) before any step of it was recorded, so running it again would likely end the same way. It was charged for the model calls that had finished, and the rest of its reservation was released. Do not resubmit it unchanged: if it uses a customer-owned model, check what that host answers (an answer is read to 1 MiB at most).",
	apperr.QueryTimeout:        "The query's error code when it ran longer than one query may (8 minutes by default, CROSSCHECK_QUERY_TIMEOUT, from its start): the model calls still running were ended. The answers that came back are in the result, and it was charged for them; the rest of its reservation was released. A model host that answers slowly or never (a customer-owned model, a vendor in trouble) is the usual cause: see each model's latency_ms and error in the result.",
	apperr.ConnectionFailed:    "Admin API: the connection test of a customer-owned model failed: the host rejected the API key, does not know the model, refused the test call, or cannot be reached (then allow_unverified: true saves it as unverified). The message says which; fix the connection and try again.",
}

func (s *Server) errorDoc(w http.ResponseWriter, r *http.Request) {
	code := chi.URLParam(r, "code")
	text, ok := errorDocs[code]
	if !ok {
		// The envelope, as for every unknown resource.
		s.writeError(w, r, apperr.New(apperr.NotFound, "no error code %q", clip(code, maxEchoedID)), "")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(code + "\n\n" + text + "\n"))
}
