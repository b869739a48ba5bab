package providers

import (
	"context"
	"unicode/utf8"
)

// MinOutputBudget is the output, in tokens, that Budget keeps room for in
// a model's context window before it cuts a prompt (or the model's whole
// maximum output when that is smaller).
const MinOutputBudget = 1024

// CutMarker stands where Budget cut a message to fit a context window.
const CutMarker = "\n\n[… part of this text was cut to fit the model's context window …]\n\n"

// Budget fits every call into its model's context window and output bound:
// Limits gives a model's context window and maximum output tokens (0 each
// when unknown: the call goes as it is), Count a text's tokens for that
// model. A prompt that leaves less than MinOutputBudget of the window (or
// the model's whole maximum output, when smaller) has its last user
// message — the question and the parts a step adds to it: other models'
// answers, evidence, claims — cut in the middle, its beginning and end
// kept, with CutMarker where text was taken out. The call's
// MaxOutputTokens is what the window leaves after the prompt, never above
// the model's maximum nor above what the request asked; ContextWindow is
// set, so that an answer cut when the window filled is context_overflow.
// A call that fails with context_overflow is made once more, fitted to a
// tighter budget: the window the host named, if smaller, scaled by how
// much more the host counted than Count did, less a tenth.
type Budget struct {
	Provider Provider
	Limits   func(model string) (window, maxOutput int)
	Count    func(model, text string) int
}

var _ Provider = (*Budget)(nil)

// Complete fits req and runs it, and once more fitted tighter when the
// host found the prompt too long.
func (b *Budget) Complete(ctx context.Context, req *Request) (*Response, error) {
	// The call waits in b.Provider.Complete, holding this frame: the
	// fitting is in fit and tighter, so the frame stays small.
	window, maxOut := b.Limits(req.Model)
	if window <= 0 && maxOut <= 0 {
		return b.Provider.Complete(ctx, req)
	}
	fitted, sent := b.fit(req, window, maxOut)
	resp, err := b.Provider.Complete(ctx, fitted)
	e, ok := Classified(err)
	if !ok || e.Class != ClassContextOverflow || window <= 0 || ctx.Err() != nil {
		return resp, err
	}
	retry, _ := b.fit(req, b.tighter(window, sent, e), maxOut)
	return b.Provider.Complete(ctx, retry)
}

// tighter is the window, in Count's tokens, of the retry after a context
// overflow e of a prompt sent that Count counted as sent tokens.
//
//go:noinline
func (b *Budget) tighter(window, sent int, e *Error) int {
	w := window
	if e.ContextWindow > 0 && e.ContextWindow < w {
		w = e.ContextWindow
	}
	if e.PromptTokens > sent && sent > 0 {
		w = int(int64(w) * int64(sent) / int64(e.PromptTokens))
	}
	return max(w-w/10, 1)
}

// fit returns req fitted into window and maxOut, and the tokens of the
// prompt it sends, as Count counts them.
//
//go:noinline
func (b *Budget) fit(req *Request, window, maxOut int) (*Request, int) {
	r := *req
	out := r.MaxOutputTokens
	if maxOut > 0 && (out <= 0 || out > maxOut) {
		out = maxOut
	}
	prompt := b.promptTokens(&r)
	if window > 0 {
		r.ContextWindow = window
		keep := MinOutputBudget
		if out > 0 {
			keep = min(keep, out)
		}
		if over := prompt + keep - window; over > 0 {
			prompt -= b.cut(&r, over)
		}
		if left := window - prompt; out <= 0 || left < out {
			out = max(left, 1)
		}
	}
	r.MaxOutputTokens = out
	return &r, prompt
}

// promptTokens counts what req sends: its messages, the text of its
// attachments, its tools and its schema, with a few tokens of each
// message's framing.
func (b *Budget) promptTokens(req *Request) int {
	n := 0
	for _, m := range req.Messages {
		n += b.Count(req.Model, m.Content) + 4
	}
	for _, a := range req.Attachments {
		n += b.Count(req.Model, a.Text)
	}
	for _, t := range req.Tools {
		n += b.Count(req.Model, t.Name+"\n"+t.Description+"\n"+t.Parameters)
	}
	if req.Schema != nil {
		n += b.Count(req.Model, string(req.Schema.JSON))
	}
	return n
}

// cut takes at least over tokens out of the middle of req's last user
// message (on a copy of the messages) and returns how many it took.
func (b *Budget) cut(req *Request, over int) int {
	last := -1
	for i, m := range req.Messages {
		if m.Role == RoleUser {
			last = i
		}
	}
	if last < 0 {
		return 0
	}
	msgs := append([]Message(nil), req.Messages...)
	text := msgs[last].Content
	had := b.Count(req.Model, text)
	marker := b.Count(req.Model, CutMarker)
	target := had - over - marker
	if target <= 0 {
		msgs[last].Content = CutMarker
		req.Messages = msgs
		return had - marker
	}
	// Keep a share of the bytes as large as the share of tokens kept, and
	// shrink again while the count is still above the target.
	keep := int(int64(len(text)) * int64(target) / int64(had))
	for range 8 {
		head, tail := keepEnds(text, keep)
		cut := head + CutMarker + tail
		if n := b.Count(req.Model, cut); n <= target+marker || keep == 0 {
			msgs[last].Content = cut
			req.Messages = msgs
			return had - n
		}
		keep -= keep / 8
	}
	msgs[last].Content = CutMarker
	req.Messages = msgs
	return had - marker
}

// keepEnds returns about keep bytes of text: its first half from the
// beginning and its second half from the end, each cut at a rune
// boundary.
func keepEnds(text string, keep int) (head, tail string) {
	h := keep / 2
	t := len(text) - (keep - h)
	for h > 0 && !utf8.RuneStart(text[h]) {
		h--
	}
	for t < len(text) && !utf8.RuneStart(text[t]) {
		t++
	}
	return text[:h], text[t:]
}
