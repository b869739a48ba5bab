package extract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// ChildCommand is the hidden subcommand of the crosscheck binary (and of a
// test binary whose TestMain calls RunChildIfAsked) that extracts one file:
// the bytes on stdin, the Result as JSON on stdout.
const ChildCommand = "extract-file"

// Formats the child extracts.
const (
	FormatPDF      = "pdf"
	FormatDOCX     = "docx"
	FormatDOC      = "doc"
	FormatHTML     = "html"
	FormatMarkdown = "markdown"
	FormatText     = "text"
)

var formats = map[string]func([]byte) (Document, error){
	FormatPDF:      PDF,
	FormatDOCX:     DOCX,
	FormatDOC:      DOC,
	FormatHTML:     HTML,
	FormatMarkdown: Markdown,
	FormatText:     Text,
}

// Caps bounds what an extraction keeps of one file.
type Caps struct {
	// MaxPages is the number of pages (paragraphs of a PDF, one per page
	// with text) kept; 0: no bound.
	MaxPages int
	// MaxChars is the number of characters of text kept; 0: no bound.
	MaxChars int
}

// Result is what an extraction produced, within its caps.
type Result struct {
	Document
	// Pages is the number of pages of text kept from a PDF; 0 for the
	// formats without pages.
	Pages int `json:"pages"`
	// Chars is the number of characters of the text kept.
	Chars int `json:"chars"`
	// Truncated reports that a cap left text out.
	Truncated bool `json:"truncated"`
}

// Text returns the kept paragraphs separated by blank lines.
func (r Result) Text() string { return strings.Join(r.Paragraphs, "\n\n") }

// Extract reads data as format, in this process, and applies caps. Only the
// child runs it on untrusted files: a PDF can crash the process.
func Extract(format string, data []byte, caps Caps) (Result, error) {
	fn, ok := formats[format]
	if !ok {
		return Result{}, fmt.Errorf("unknown format %q", format)
	}
	doc, err := fn(data)
	if errors.Is(err, errNoPDFText) {
		err = nil // a PDF of scanned pages: read, without text
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Document: doc, Truncated: doc.Skipped > 0}
	if caps.MaxPages > 0 && format == FormatPDF && len(res.Paragraphs) > caps.MaxPages {
		res.Paragraphs, res.Truncated = res.Paragraphs[:caps.MaxPages], true
	}
	if format == FormatPDF {
		res.Pages = len(res.Paragraphs)
	}
	for i, p := range res.Paragraphs {
		n := utf8.RuneCountInString(p)
		if caps.MaxChars > 0 && res.Chars+n > caps.MaxChars {
			keep := caps.MaxChars - res.Chars
			cut := p
			for j := range p {
				if keep == 0 {
					cut = p[:j]
					break
				}
				keep--
			}
			res.Paragraphs = append(res.Paragraphs[:i], cut)
			if cut == "" {
				res.Paragraphs = res.Paragraphs[:i]
			}
			res.Chars, res.Truncated = caps.MaxChars, true
			break
		}
		res.Chars += n
	}
	return res, nil
}

// Errors of Runner.Run. Each leaves the file's content out of its message.
var (
	// ErrUnreadable: the child read the file and found it malformed.
	ErrUnreadable = errors.New("extract: file malformed")
	// ErrCrashed: the child died (a parser's stack overflow, a memory or
	// CPU limit) before it answered.
	ErrCrashed = errors.New("extract: extraction process died")
	// ErrTimeout: the child did not answer within the runner's Timeout.
	ErrTimeout = errors.New("extract: extraction timed out")
)

// Defaults of a Runner.
const (
	DefaultTimeout    = 30 * time.Second
	DefaultCPUSeconds = 20
	DefaultMemory     = 1 << 30
	DefaultParallel   = 4
	// childMaxStack bounds a goroutine's stack in the child, so that a
	// parser's unbounded recursion dies early rather than at Go's 1 GB.
	childMaxStack = 64 << 20
)

// Runner extracts files in child processes: a hostile file can crash,
// exhaust or hang only its child. The zero value runs the current
// executable with ChildCommand, under the defaults above.
type Runner struct {
	// Path and Args are the child's command; empty Path: this executable
	// with Args [ChildCommand].
	Path string
	Args []string
	// Timeout is the wall-clock bound of one child; CPUSeconds its CPU
	// time limit (RLIMIT_CPU); Memory its data-segment limit in bytes
	// (RLIMIT_DATA, which counts the heap Go maps; not applied in a binary
	// built with the race detector,
	// whose shadow memory needs terabytes).
	Timeout    time.Duration
	CPUSeconds int
	Memory     int64
	// Parallel bounds the children running at once.
	Parallel int

	once  sync.Once
	slots chan struct{}
}

// Run extracts input as format in a child process, within caps, and
// returns its Result; ErrUnreadable, ErrCrashed or ErrTimeout (possibly
// wrapped) when the file could not be extracted; ctx ending stops the
// child. Any other error is the runner's or input's failure (the child
// could not start, input failed), not the file's.
func (r *Runner) Run(ctx context.Context, format string, input io.Reader, caps Caps) (Result, error) {
	if _, ok := formats[format]; !ok {
		return Result{}, fmt.Errorf("unknown format %q", format)
	}
	r.once.Do(func() {
		n := r.Parallel
		if n <= 0 {
			n = DefaultParallel
		}
		r.slots = make(chan struct{}, n)
	})
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	defer func() { <-r.slots }()

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, orDefault(r.Timeout, DefaultTimeout))
	defer cancel()
	path, args := r.Path, r.Args
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return Result{}, fmt.Errorf("extract: %w", err)
		}
		path, args = exe, []string{ChildCommand}
	}
	args = append(append([]string(nil), args...),
		"-format", format,
		"-max-pages", strconv.Itoa(caps.MaxPages),
		"-max-chars", strconv.Itoa(caps.MaxChars),
		"-cpu", strconv.Itoa(orDefault(r.CPUSeconds, DefaultCPUSeconds)),
		"-memory", strconv.FormatInt(orDefault(r.Memory, DefaultMemory), 10),
	)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = input
	var stdout bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: 64 << 20}
	cmd.Stderr = io.Discard // a crash's report may quote the file
	cmd.WaitDelay = time.Second
	cmd.Env = []string{"GOTRACEBACK=none"}
	err := cmd.Run()
	if parent.Err() != nil {
		return Result{}, parent.Err()
	}
	if ctx.Err() != nil {
		return Result{}, ErrTimeout
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return Result{}, ErrCrashed
		}
		// The child did not run, or its input failed to arrive (the
		// caller's reader failed).
		return Result{}, fmt.Errorf("extract: run child: %w", err)
	}
	var out childOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return Result{}, ErrCrashed
	}
	if out.Error != "" {
		if out.Error == errNotWordCode {
			return Result{}, fmt.Errorf("%w: %w", ErrUnreadable, ErrNotWord)
		}
		return Result{}, ErrUnreadable
	}
	return out.Result, nil
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// childOutput is the child's answer on stdout.
type childOutput struct {
	Result
	Error string `json:"error,omitempty"`
}

const errNotWordCode = "not_word"

// RunChildIfAsked runs the child and exits when the process was started as
// one (its first argument is ChildCommand); otherwise it returns. Call it
// first in main and in the TestMain of the packages whose tests extract.
func RunChildIfAsked() {
	if len(os.Args) > 1 && os.Args[1] == ChildCommand {
		os.Exit(ChildMain(os.Args[2:], os.Stdin, os.Stdout))
	}
}

// ChildMain is the child: it applies its limits to itself, reads the file
// from stdin (bounded by maxChildInput), extracts it and writes a
// childOutput to stdout. It returns the exit code: 0 when it answered,
// even with an error, 2 on bad arguments.
func ChildMain(args []string, stdin io.Reader, stdout io.Writer) int {
	fs := flag.NewFlagSet(ChildCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "", "")
	maxPages := fs.Int("max-pages", 0, "")
	maxChars := fs.Int("max-chars", 0, "")
	cpu := fs.Int("cpu", DefaultCPUSeconds, "")
	memory := fs.Int64("memory", DefaultMemory, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	limitSelf(*cpu, *memory)
	data, err := io.ReadAll(io.LimitReader(stdin, maxChildInput))
	if err != nil {
		return 2
	}
	var out childOutput
	out.Result, err = Extract(*format, data, Caps{MaxPages: *maxPages, MaxChars: *maxChars})
	switch {
	case errors.Is(err, ErrNotWord):
		out = childOutput{Error: errNotWordCode}
	case err != nil:
		out = childOutput{Error: "malformed"}
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return 1
	}
	return 0
}

// maxChildInput bounds the bytes a child reads: above every upload limit.
const maxChildInput = 64 << 20

// limitSelf applies the child's limits to its own process.
func limitSelf(cpuSeconds int, memory int64) {
	debug.SetMaxStack(childMaxStack)
	debug.SetMemoryLimit(memory / 2)
	cpu := uint64(cpuSeconds)
	_ = syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1})
	if !raceEnabled && memory > 0 {
		m := uint64(memory)
		_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: m, Max: m})
	}
}

// limitedWriter keeps at most n bytes and fails beyond.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errors.New("extract: child output too large")
	}
	l.n -= len(p)
	return l.w.Write(p)
}
