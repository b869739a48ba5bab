package byom

import (
	"context"
	"fmt"
	"net/http"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/anthropic"
	"github.com/crosscheck/crosscheck/internal/providers/gemini"
	"github.com/crosscheck/crosscheck/internal/providers/openai"
	"github.com/crosscheck/crosscheck/internal/providers/openaicompat"
)

// Build returns the model backend of c: the backend the first-party
// providers use for its kind (each on its vendor's official SDK), sending
// to c.BaseURL through hc and nowhere else. An azure-openai deployment is
// called through the Chat Completions protocol at its deployment URL, hc
// adding its api-key header and api-version parameter.
func Build(ctx context.Context, c Connection, hc *http.Client) (providers.Provider, error) {
	switch c.Kind {
	case events.KindOpenAICompatible:
		return openaicompat.New(openaicompat.Config{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: hc}), nil
	case events.KindAzureOpenAI:
		return openaicompat.New(openaicompat.Config{BaseURL: c.BaseURL, HTTPClient: hc}), nil
	case events.KindOpenAI:
		return openai.New(openai.Config{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: hc}), nil
	case events.KindAnthropic:
		return anthropic.New(anthropic.Config{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: hc}), nil
	case events.KindGemini:
		return gemini.New(ctx, gemini.Config{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: hc})
	}
	return nil, fmt.Errorf("unknown kind %q", c.Kind)
}
