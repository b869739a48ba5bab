package events

import "strings"

// Failure classes of a model call: the one vocabulary of why a call failed,
// the same for every wire format and for customer-owned models, recorded
// as the class of model_failed, model_retried and step_failed. Each points
// at the knob that helps (docs/providers.md, "Failure classes"). The values
// are persisted and on the wire: never change one.
const (
	// ClassOutputLimit: the model stopped at the output bound (max_tokens)
	// before its answer was usable.
	ClassOutputLimit = "output_limit"
	// ClassContextOverflow: the prompt did not fit the model's context
	// window: the host refused it, or cut the answer when the prompt and the
	// output filled the window.
	ClassContextOverflow = "context_overflow"
	// ClassNotJSON: a structured reply held no JSON object.
	ClassNotJSON = "not_json"
	// ClassSchemaMismatch: a structured reply's object does not match the
	// step's schema.
	ClassSchemaMismatch = "schema_mismatch"
	// ClassEmpty: the host answered with no content.
	ClassEmpty = "empty"
	// ClassRefused: a safety refusal (the model's refusal, a content
	// filter, a blocked prompt).
	ClassRefused = "refused"
	// ClassHostError: the host answered with an error or could not be
	// reached (upstream_status says which, when it answered).
	ClassHostError = "host_error"
	// ClassTimeout: the call took longer than its bound.
	ClassTimeout = "timeout"
	// ClassRateLimited: the host limited the rate (HTTP 429).
	ClassRateLimited = "rate_limited"
)

// FailureClasses lists the failure classes of a model call.
var FailureClasses = []string{ClassOutputLimit, ClassContextOverflow, ClassNotJSON, ClassSchemaMismatch,
	ClassEmpty, ClassRefused, ClassHostError, ClassTimeout, ClassRateLimited}

// CurrentClass is the class of today's vocabulary for a class recorded by
// any build, with the message recorded beside it. Earlier builds recorded
// server_error, authentication and bad_request (now host_error, or
// context_overflow when the message is a host's context refusal),
// content_filtered (now refused) and invalid_output, which lumped together
// what output_limit, not_json, schema_mismatch, empty and host_error (a
// response too large to read) tell apart: its message says which. Any other
// class (today's, or a mode's own note such as file_unavailable) is
// returned as it is.
func CurrentClass(class, message string) string {
	m := strings.ToLower(message)
	switch class {
	case "server_error", "authentication":
		return ClassHostError
	case "bad_request":
		if contextRefusal(m) {
			return ClassContextOverflow
		}
		return ClassHostError
	case "content_filtered":
		return ClassRefused
	case "invalid_output":
		switch {
		case strings.Contains(m, "output token limit"), strings.Contains(m, "max_tokens"),
			strings.Contains(m, "max_output_tokens"), strings.Contains(m, "finish reason max_tokens"):
			return ClassOutputLimit
		case strings.Contains(m, "not json"), strings.Contains(m, "not valid json"):
			return ClassNotJSON
		case strings.Contains(m, "no text"), strings.Contains(m, "is empty"), strings.Contains(m, "no candidate"),
			strings.Contains(m, "no choices"):
			return ClassEmpty
		case strings.Contains(m, "schema"):
			return ClassSchemaMismatch
		}
		return ClassHostError
	}
	return class
}

// contextRefusal reports whether a lowercased message recorded by an
// earlier build is a host's refusal of a prompt too long for the model's
// context window, in the wording of OpenAI, vLLM, llama.cpp's server,
// Anthropic or Gemini.
func contextRefusal(m string) bool {
	for _, s := range []string{"context length", "context_length_exceeded", "context window", "context size",
		"exceed_context_size", "prompt is too long", "exceed context limit", "input token count"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
