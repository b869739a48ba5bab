// Package pricing holds what a model call costs: the pre-flight estimate of a
// query, priced from the catalog over the calls its mode's plan lists, and the
// metered cost of a call's reported usage. It learns a mode's calls through
// the Planner interface, so it links none of the modes' dependencies.
package pricing

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
)

// Estimation constants: the framing a call adds around its input, the
// heading of each answer quoted in a prompt, and the margin a reservation
// keeps above the estimate so that a real cost rarely exceeds it.
const (
	framingTokens       = 4
	perAnswerHeadingTok = 12
	// toolsFramingTokens is what offering tools adds to a call beside the
	// tools' own text: the largest of the vendors' additions, Anthropic's
	// tool-use system prompt (about 350 tokens).
	toolsFramingTokens = 350
	// MarginPercent is the margin a reservation keeps above the estimate.
	MarginPercent = 25
)

// Step is one model call of a mode's pipeline as a pre-flight estimate sees
// it: what goes into it and what comes out, counted in the models' expected
// answers where the size follows theirs.
type Step struct {
	// Role names the step (events.Step*): answer, synthesis, revise,
	// find_disagreements, rewrite, research, extract_claims, merge_claims,
	// assess_claims. It is the role of the estimate's calls on the wire.
	Role string
	// Each is true for a call every model makes, false for one the first
	// selected model makes.
	Each bool
	// Instructions is the system text the call sends.
	Instructions string
	// Prompt is whether the user's prompt is in its input.
	Prompt bool
	// Answers is how many model answers its input holds.
	Answers float64
	// Context is the rest of its input in tokens: search results, evidence.
	Context int
	// Files is whether the call carries the query's attached files.
	Files bool
	// Tools is whether the call carries the query's tools.
	Tools bool
	// Output is its output, in expected answers.
	Output float64
}

// Planner lists the steps a mode makes with models selected, the same
// pipeline the mode runs when every call succeeds.
type Planner interface {
	Plan(mode string, models int) []Step
}

// PlanFunc adapts a function to a Planner.
type PlanFunc func(mode string, models int) []Step

// Plan returns f(mode, models).
func (f PlanFunc) Plan(mode string, models int) []Step { return f(mode, models) }

// Call is one model call of an estimate.
type Call struct {
	Role         string // the step of the mode (Step.Role)
	Model        events.ModelRef
	InputTokens  int
	OutputTokens int
	Micros       int64
}

// Estimate is the pre-flight cost of a query.
type Estimate struct {
	Calls []Call
	// Micros is the sum of the calls plus the margin: what is reserved.
	Micros int64
}

// Estimator prices queries from the catalog over the calls Planner lists.
type Estimator struct {
	Catalog *catalog.Catalog
	Planner Planner
}

// Estimate prices a query of mode over the selected models and attached
// files: every call the mode's pipeline makes (Planner), each model
// answering at its expected length, the calls of the whole query made by
// the first selected model. Input tokens are counted with tiktoken for
// OpenAI-family models, in pieces of at most MaxPieceBytes bytes and each
// distinct text once per tokenizer, and approximated as one token per four
// bytes for the others; each call that carries the files adds FileTokens for
// each file as the calling model receives it, and each call that carries the
// tools their names, descriptions and parameters' schemas with
// toolsFramingTokens. A customer-owned model costs nothing.
func (e *Estimator) Estimate(mode, prompt string, tools []events.Tool, selected []events.ModelRef, files []events.FileRef) Estimate {
	var out Estimate
	if len(selected) == 0 {
		return out
	}
	var answerLen float64 // the mean expected answer of the selected models
	for _, m := range selected {
		model, _ := e.Catalog.Model(m.Provider, m.ModelID)
		answerLen += float64(model.ExpectedOutput) / float64(len(selected))
	}
	// Each distinct text is counted once per tokenizer, however many calls
	// of the plan send it.
	tokens := counter{}
	var toolText strings.Builder
	for _, t := range tools {
		toolText.WriteString(t.Name + "\n" + t.Description + "\n" + t.Parameters + "\n")
	}
	for _, step := range e.Planner.Plan(mode, len(selected)) {
		callers := selected[:1]
		if step.Each {
			callers = selected
		}
		for _, m := range callers {
			model, _ := e.Catalog.Model(m.Provider, m.ModelID)
			in := framingTokens + step.Context + int(step.Answers*(answerLen+perAnswerHeadingTok))
			if step.Instructions != "" {
				in += instructionTokens(model.Tokenizer, step.Instructions)
			}
			if step.Prompt {
				in += tokens.count(model.Tokenizer, prompt)
			}
			if step.Files {
				for _, f := range files {
					in += FileTokens(f, f.SeenBy(m.Key()))
				}
			}
			if step.Tools && len(tools) > 0 {
				in += toolsFramingTokens + tokens.count(model.Tokenizer, toolText.String())
			}
			c := Call{Role: step.Role, Model: m, InputTokens: in, OutputTokens: int(step.Output * float64(model.ExpectedOutput))}
			c.Micros = price(m, model, c.InputTokens, c.OutputTokens)
			out.Calls = append(out.Calls, c)
		}
	}
	var sum int64
	for _, c := range out.Calls {
		sum += c.Micros
	}
	out.Micros = sum + sum*MarginPercent/100
	return out
}

// Bounds of what an attached file adds to a call's input, in tokens, for
// the estimate; the charge follows the usage each vendor reports.
const (
	// ImageTokens bounds a natively read image: OpenAI counts at most
	// about 2,490 (patch-based models; tile-based ones at most 1,445 at
	// high detail), Anthropic about 1,600 after resizing an image to 1.15
	// megapixels, Gemini 258 per 768×768 tile (ten tiles fit the bound).
	ImageTokens = 2600
	// PDFPageTokens is each page's image of a natively read PDF, on top
	// of its text: Anthropic and OpenAI send every page as text and image,
	// Gemini counts 258 per page.
	PDFPageTokens = 1600
	// PDFBytesPerPage guesses the pages of a PDF whose page count is not
	// known: one per 64 KiB.
	PDFBytesPerPage = 64 << 10
	// CharsPerToken bounds extracted text's tokens from below: at least
	// one per three characters, code and non-English text included.
	CharsPerToken = 3
	// FileHeadingTokens is the heading a file's text, or the note about a
	// file a model cannot see, adds to the prompt.
	FileHeadingTokens = 32
)

// FileTokens bounds the input tokens f adds to a call of a model that
// receives it as seen says (events.FileSeen*): a native image ImageTokens;
// a native PDF its text plus PDFPageTokens per page; extracted text one
// token per CharsPerToken characters with its heading; a file a model
// cannot see, the note that says so.
func FileTokens(f events.FileRef, seen string) int {
	text := (f.TextChars + CharsPerToken - 1) / CharsPerToken
	switch {
	case seen == events.FileSeenNative && f.Kind == catalog.KindImage:
		return ImageTokens
	case seen == events.FileSeenNative && f.Kind == catalog.KindPDF:
		pages := f.Pages
		if pages <= 0 {
			pages = int(f.Bytes/PDFBytesPerPage) + 1
		}
		return text + pages*PDFPageTokens
	case seen == events.FileSeenNative:
		return text + FileHeadingTokens
	case seen == events.FileSeenText:
		return text + FileHeadingTokens
	}
	return FileHeadingTokens
}

// Cost is the metered price of a call's reported usage.
func (e *Estimator) Cost(m events.ModelRef, usage events.Usage) int64 {
	model, _ := e.Catalog.Model(m.Provider, m.ModelID)
	return price(m, model, usage.InputTokens, usage.OutputTokens)
}

// Price is the price of a call of model m, in credits per million tokens: 0
// for a customer-owned model.
func (e *Estimator) Price(m events.ModelRef) catalog.Pricing {
	if m.CustomModel != "" {
		return catalog.Pricing{}
	}
	model, _ := e.Catalog.Model(m.Provider, m.ModelID)
	return model.Pricing
}

func price(m events.ModelRef, model catalog.Model, in, out int) int64 {
	if m.CustomModel != "" {
		return 0 // BYOM: the customer pays their host; no variable credits
	}
	return model.Pricing.MicroCredits(in, out)
}

// UsageEncoding is the tiktoken encoding that counts the usage of a call to
// a model whose catalog row names none (Tokens).
const UsageEncoding = "o200k_base"

// Tokens counts text's tokens as a call of model (a catalog model id of the
// provider, or a customer-owned model's name) is charged for them when its
// host reports no usage: with the model's tiktoken encoding, or
// UsageEncoding when it names none (or e has no catalog), in time linear in
// the text's length.
func (e *Estimator) Tokens(provider, model, text string) int {
	enc := UsageEncoding
	if e.Catalog == nil {
		return countTokens(enc, text)
	}
	if m, ok := e.Catalog.Model(provider, model); ok && m.Tokenizer != "" {
		enc = m.Tokenizer
	}
	return countTokens(enc, text)
}

var (
	loaderOnce sync.Once
	encodings  sync.Map // name → *tiktoken.Tiktoken
)

// MaxPieceBytes bounds the pieces a text is split into before tiktoken counts
// them. Byte-pair encoding a piece costs time quadratic in its length when it
// holds no split point of the encoding's own (one character repeated, or
// bytes that are not UTF-8), so counting pieces of bounded size keeps a
// text's count linear in its length.
const MaxPieceBytes = 128

// encode counts the tokens of one piece of text; tests observe it.
var encode = func(enc *tiktoken.Tiktoken, piece string) int {
	return len(enc.Encode(piece, nil, nil))
}

// counter counts texts' tokens for one estimate, each distinct text once per
// encoding.
type counter map[[2]string]int

// count is countTokens(encoding, text), remembered for the estimate.
func (c counter) count(encoding, text string) int {
	k := [2]string{encoding, text}
	n, ok := c[k]
	if !ok {
		n = countTokens(encoding, text)
		c[k] = n
	}
	return n
}

// instructionCounts remembers the token counts of the plans' instructions by
// encoding and text: the same few texts in every estimate, counted once per
// process. It keeps at most maxInstructionCounts.
var instructionCounts struct {
	sync.Mutex
	n map[[2]string]int
}

// maxInstructionCounts bounds instructionCounts: the plans name a few
// constant texts, so a count past the bound is made, not kept.
const maxInstructionCounts = 256

// instructionTokens is countTokens(encoding, text) for a step's
// instructions, remembered for the process.
func instructionTokens(encoding, text string) int {
	k := [2]string{encoding, text}
	instructionCounts.Lock()
	n, ok := instructionCounts.n[k]
	instructionCounts.Unlock()
	if ok {
		return n
	}
	n = countTokens(encoding, text)
	instructionCounts.Lock()
	if instructionCounts.n == nil {
		instructionCounts.n = map[[2]string]int{}
	}
	if len(instructionCounts.n) < maxInstructionCounts {
		instructionCounts.n[k] = n
	}
	instructionCounts.Unlock()
	return n
}

// LoadTokenizers loads the tiktoken encoding of every model of the catalog
// that names one, and UsageEncoding (offline BPE files shipped in the
// module), so that no estimate or usage count pays the load: a process calls it once before it serves. It
// returns an error naming each encoding that cannot be loaded; the
// estimates of those models approximate one token per four bytes, as they
// would without the call.
func (e *Estimator) LoadTokenizers() error {
	var errs []error
	seen := map[string]bool{UsageEncoding: true}
	if _, err := loadEncoding(UsageEncoding); err != nil {
		errs = append(errs, fmt.Errorf("tokenizer %q of the usage counts: %w", UsageEncoding, err))
	}
	for _, p := range e.Catalog.Providers {
		for _, m := range p.Models {
			if m.Tokenizer == "" || seen[m.Tokenizer] {
				continue
			}
			seen[m.Tokenizer] = true
			if _, err := loadEncoding(m.Tokenizer); err != nil {
				errs = append(errs, fmt.Errorf("tokenizer %q of %s/%s: %w", m.Tokenizer, p.Key, m.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// loadEncoding returns the named tiktoken encoding, loading it on first use.
func loadEncoding(name string) (*tiktoken.Tiktoken, error) {
	if enc, ok := encodings.Load(name); ok {
		return enc.(*tiktoken.Tiktoken), nil
	}
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })
	e, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, err
	}
	enc, _ := encodings.LoadOrStore(name, e)
	return enc.(*tiktoken.Tiktoken), nil
}

// countTokens counts text's tokens with the named tiktoken encoding (offline
// BPE files shipped in the module), or approximates one per four bytes. The
// text is counted in pieces (nextPiece), in time linear in its length.
func countTokens(encoding, text string) int {
	if encoding != "" {
		if enc, err := loadEncoding(encoding); err == nil {
			n := 0
			for rest := text; rest != ""; {
				piece := nextPiece(rest)
				n += encode(enc, piece)
				rest = rest[len(piece):]
			}
			return n
		}
	}
	return (len(text) + 3) / 4
}

// nextPiece is the first of the consecutive pieces of at most MaxPieceBytes
// bytes that text is counted in: it ends before the last whitespace byte
// inside its window when there is one after its start, else before the last
// UTF-8 rune start inside it, else (bytes that are not UTF-8) at the window's
// end. A word's leading space stays with the word, as the tokenizers split
// it.
func nextPiece(text string) string {
	if len(text) <= MaxPieceBytes {
		return text
	}
	// The next piece starts at a byte of text[1:MaxPieceBytes+1].
	for i := MaxPieceBytes; i > 0; i-- {
		switch text[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			return text[:i]
		}
	}
	for i := MaxPieceBytes; i > 0; i-- {
		if utf8.RuneStart(text[i]) {
			return text[:i]
		}
	}
	return text[:MaxPieceBytes]
}
