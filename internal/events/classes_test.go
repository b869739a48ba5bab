package events

import "testing"

// TestCurrentClass: the classes earlier builds recorded read as the class
// of today's vocabulary that names the same failure, the message telling
// apart what one old class lumped together; today's classes and the
// modes' own notes read as they are.
func TestCurrentClass(t *testing.T) {
	for _, c := range []struct{ class, message, want string }{
		{"server_error", "boom", ClassHostError},
		{"authentication", "who are you", ClassHostError},
		{"bad_request", "bad", ClassHostError},
		{"bad_request", "request (1321 tokens) exceeds the available context size (1024 tokens)", ClassContextOverflow},
		{"bad_request", "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens.", ClassContextOverflow},
		{"bad_request", "invalid_request_error: prompt is too long: 208656 tokens > 200000 maximum", ClassContextOverflow},
		{"bad_request", "INVALID_ARGUMENT: The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).", ClassContextOverflow},
		{"content_filtered", "the model refused: no", ClassRefused},
		{"invalid_output", "the answer hit the output token limit", ClassOutputLimit},
		{"invalid_output", "the response is incomplete: max_output_tokens", ClassOutputLimit},
		{"invalid_output", "structured output \"synthesis\": the model did not call the tool (the answer hit max_tokens)", ClassOutputLimit},
		{"invalid_output", "structured output is not valid JSON (finish reason MAX_TOKENS)", ClassOutputLimit},
		{"invalid_output", "the structured output is not valid JSON", ClassNotJSON},
		{"invalid_output", "the output is not valid for the schema \"claims\" after one repair attempt: not JSON: invalid character", ClassNotJSON},
		{"invalid_output", "the output is not valid for the schema \"claims\" after one repair attempt: jsonschema validation failed", ClassSchemaMismatch},
		{"invalid_output", "the response has no text", ClassEmpty},
		{"invalid_output", "the answer has no text (finish reason STOP)", ClassEmpty},
		{"invalid_output", "the answer is empty", ClassEmpty},
		{"invalid_output", "the host's response is larger than the 4194304 bytes the service reads of one model response", ClassHostError},
		{ClassOutputLimit, "x", ClassOutputLimit},
		{ClassRateLimited, "x", ClassRateLimited},
		{ClassTimeout, "x", ClassTimeout},
		{"file_unavailable", "x", "file_unavailable"},
		{"not_enough_answers", "x", "not_enough_answers"},
	} {
		if got := CurrentClass(c.class, c.message); got != c.want {
			t.Errorf("CurrentClass(%q, %q) = %q, want %q", c.class, c.message, got, c.want)
		}
	}
}
