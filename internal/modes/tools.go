package modes

import (
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// withTools gives req the tools the query offers and its tool choice: the
// answering calls propose tool calls, which the answer's synthesis turns
// into the calls the models agree on (events.AgreeToolCalls).
func (j *job) withTools(req providers.Request) providers.Request {
	j.read(func(q *events.Query) {
		if q.Submitted != nil {
			req.Tools, req.ToolChoice = q.Submitted.Tools, q.Submitted.ToolChoice
		}
	})
	return req
}
