package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/openai/openai-go/v3"

	"github.com/crosscheck/crosscheck/internal/providers"
)

// maxMessage bounds an upstream error message kept in a *providers.Error.
const maxMessage = 500

// ClassifyError turns a failed SDK call into what providers.Provider promises:
// the context's error when ctx ended, else a *providers.Error classified from
// the upstream's status, headers and error body. raw is the HTTP response the
// SDK captured with option.WithResponseInto (nil when none arrived); secret is
// removed from every message. It serves every backend built on the OpenAI SDK.
func ClassifyError(ctx context.Context, err error, raw *http.Response, secret string) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	if pe, ok := providers.Classified(err); ok {
		return pe
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) && raw == nil {
		raw = apiErr.Response
	}
	if raw == nil || raw.StatusCode < 400 {
		// No HTTP answer: a connection failure, which may pass on retry.
		return &providers.Error{Class: providers.ClassHostError, Message: Redact(err.Error(), secret)}
	}
	status := raw.StatusCode
	var msg, code string
	if apiErr != nil {
		msg = apiErr.Message
		code = apiErr.Code + " " + apiErr.Type
	}
	if msg == "" {
		msg = bodyMessage(raw)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e := StatusError(status, code, Redact(msg, secret))
	e.RetryAfter = providers.RetryAfter(raw.Header, time.Now())
	return e
}

// StatusError is the classified failure of a host's error answer: its HTTP
// status, the vendor's error code or type (may be empty) and its message
// (providers.HTTPClass), with the prompt's tokens and the window of a
// context refusal that gives them.
func StatusError(status int, code, msg string) *providers.Error {
	e := &providers.Error{Class: providers.HTTPClass(status, code, msg), Status: status, Message: msg}
	if e.Class == providers.ClassContextOverflow {
		e.PromptTokens, e.ContextWindow, _ = providers.ContextRefusal(code, msg)
	}
	return e
}

// bodyMessage reads an error message from a non-OpenAI error body, in the
// shapes compatible hosts use: {"error":"..."}, {"message":"..."},
// {"detail":"..."}, or plain text.
func bodyMessage(raw *http.Response) string {
	if raw.Body == nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(raw.Body, 64<<10))
	if err != nil {
		return ""
	}
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil {
		var s string
		var inner struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case v.Message != "":
			return v.Message
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return s
		case len(v.Detail) > 0:
			return string(v.Detail)
		}
	}
	return strings.TrimSpace(string(b))
}

// Redact removes secret from msg and bounds its length.
func Redact(msg, secret string) string {
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	if len(msg) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}
