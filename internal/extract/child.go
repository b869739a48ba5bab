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
	"os/signal"
	"runtime"
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

// Reasons of a refusal (an *Error) by Runner.Run. None of them, nor
// anything Run returns, holds the file's content.
var (
	// ErrUnreadable: the child read the file and found it malformed.
	ErrUnreadable = errors.New("extract: file malformed")
	// ErrCrashed: the child died before it answered, and no limit
	// explains it (a parser's stack overflow, say).
	ErrCrashed = errors.New("extract: extraction process died")
	// ErrTimeout: the child did not answer within the runner's Timeout.
	ErrTimeout = errors.New("extract: extraction timed out")
	// ErrCPU: the child used its CPU time limit.
	ErrCPU = errors.New("extract: CPU limit reached")
	// ErrMemory: the child ran out of its memory limit.
	ErrMemory = errors.New("extract: memory limit reached")
)

// Error is a file the extraction refused. errors.Is matches its Reason
// (ErrUnreadable, ErrCrashed, ErrTimeout, ErrCPU or ErrMemory) and, for a
// Word file that is not one, ErrNotWord.
type Error struct {
	Reason error
	// Limit is the limit reached, as a person reads it ("30s", "10
	// CPU-seconds", "256 MiB"), for ErrTimeout, ErrCPU and ErrMemory.
	Limit string
	// CPU is the CPU time the child used.
	CPU time.Duration

	detail error
}

func (e *Error) Error() string {
	if e.Limit != "" {
		return e.Reason.Error() + " (" + e.Limit + ")"
	}
	return e.Reason.Error()
}

func (e *Error) Unwrap() []error {
	if e.detail != nil {
		return []error{e.Reason, e.detail}
	}
	return []error{e.Reason}
}

// ErrSandbox is the child's failure to apply its sandbox to itself: the
// runner's fault (a kernel without seccomp, say), never the file's.
var ErrSandbox = errors.New("extract: the extraction process could not sandbox itself")

// ErrBusy is an extraction that waited Timeout for a child: the process
// ran as many as it may for all that time, each going to an account that
// ran fewer, or had waited longer.
var ErrBusy = errors.New("extract: every extraction process stayed busy")

// Defaults of a Runner.
const (
	DefaultTimeout = 30 * time.Second
	// DefaultCPUSeconds bounds one child's CPU time: the largest file a
	// kind allows, well formed, reads in 3 s of it.
	DefaultCPUSeconds = 10
	// DefaultMemory bounds one child's memory: the largest file a kind
	// allows, well formed, reads in about 150 MB.
	DefaultMemory = 256 << 20
	// MinMemory is the least memory a child is given, whatever the budget:
	// a Go child maps 80 to 120 MB writable (RLIMIT_DATA counts it) before
	// it reads anything, most of it never touched.
	MinMemory = 128 << 20
	// DefaultParallel bounds the children running at once whatever the
	// budget.
	DefaultParallel = 4
	// DefaultAccountCPU is the CPU time one account's children may use
	// in an hour.
	DefaultAccountCPU = 5 * time.Minute
	// childMaxStack bounds a goroutine's stack in the child, so that a
	// parser's unbounded recursion dies early rather than at Go's 1 GB.
	childMaxStack = 64 << 20
)

// Exit codes of the child beside 0 (it answered) and 2 (bad arguments, or
// the Go runtime's fatal errors).
const (
	exitCPU      = 3 // its CPU limit
	exitOrphaned = 4 // not the child of the process that started it
	exitSandbox  = 5 // its sandbox could not be set up
)

// Runner extracts files in child processes: a hostile file can crash,
// exhaust or hang only its child, and its child reaches nothing but the
// file (see lockdown). The zero value runs the current executable with
// ChildCommand, under the defaults above.
type Runner struct {
	// Path and Args are the child's command; empty Path: this executable
	// with Args [ChildCommand].
	Path string
	Args []string
	// Timeout is the wall-clock bound of one child; CPUSeconds its CPU
	// time limit (RLIMIT_CPU); Memory its memory limit in bytes
	// (RLIMIT_DATA, which counts the heap Go maps; not applied in a
	// binary built with the race detector, whose shadow memory needs
	// terabytes).
	Timeout    time.Duration
	CPUSeconds int
	Memory     int64
	// Budget is the memory, in bytes, that the children running at once
	// may take together: Budget/Memory of them run at once, at least one
	// (given at most Budget, and at least MinMemory), at most Parallel.
	// Zero: PlanMemory(0).Children.
	Budget int64
	// Parallel bounds the children running at once whatever the budget.
	Parallel int
	// AccountCPU is the CPU time the children of one account may use in
	// an hour, a bucket that refills continuously (zero:
	// DefaultAccountCPU; negative: no bound). The children go fairly
	// between accounts (see scheduler).
	AccountCPU time.Duration
	// Now is the clock of the accounts' buckets; nil: time.Now.
	Now func() time.Time

	once     sync.Once
	children int
	memory   int64
	sched    *scheduler
	cpu      *accountCPU
}

// init settles the runner's bounds at its first use.
func (r *Runner) init() {
	r.once.Do(func() {
		budget := r.Budget
		if budget <= 0 {
			budget = PlanMemory(0).Children
		}
		r.memory = min(orDefault(r.Memory, DefaultMemory), max(budget, MinMemory))
		n := int(min(int64(orDefault(r.Parallel, DefaultParallel)), max(budget/r.memory, 1)))
		r.children, r.sched = n, newScheduler(n)
		now := r.Now
		if now == nil {
			now = time.Now
		}
		r.cpu = newAccountCPU(r.AccountCPU, now)
		childrenMax.Set(float64(n))
		memoryBudget.Set(float64(int64(n) * r.memory))
	})
}

// Children returns the number of children that run at most at once, and
// the memory limit of each.
func (r *Runner) Children() (n int, memory int64) {
	r.init()
	return r.children, r.memory
}

// Run extracts input as format in a child process, within caps, and
// returns its Result; an *Error when the file could not be extracted
// (malformed, a crash, or a limit reached); for account (empty: the
// service's own files, whose CPU time is not bounded) an *AccountError
// when the account used its CPU time; ErrBusy when no child came within
// Timeout; ctx ending stops the child. Any other error
// is the runner's or input's failure (the child could not start or sandbox
// itself, input failed), not the file's.
func (r *Runner) Run(ctx context.Context, account, format string, input io.Reader, caps Caps) (Result, error) {
	if _, ok := formats[format]; !ok {
		return Result{}, fmt.Errorf("unknown format %q", format)
	}
	r.init()
	if err := r.cpu.admit(account); err != nil {
		return Result{}, err
	}
	timeout := orDefault(r.Timeout, DefaultTimeout)
	if err := r.sched.acquire(ctx, account, timeout); err != nil {
		return Result{}, err
	}
	defer r.sched.release(account)
	childrenRunning.Inc()
	defer childrenRunning.Dec()

	res, cpu, err := r.run(ctx, format, input, caps, timeout)
	r.cpu.spend(account, cpu)
	extractCPU.WithLabelValues(format).Add(cpu.Seconds())
	var refused *Error
	switch {
	case err == nil:
		extractions.WithLabelValues(format, "ok").Inc()
	case errors.As(err, &refused):
		extractions.WithLabelValues(format, outcome(refused.Reason)).Inc()
	}
	return res, err
}

// run runs one child, and returns the CPU time it used too.
func (r *Runner) run(ctx context.Context, format string, input io.Reader, caps Caps, timeout time.Duration) (Result, time.Duration, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path, args := r.Path, r.Args
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return Result{}, 0, fmt.Errorf("extract: %w", err)
		}
		path, args = exe, []string{ChildCommand}
	}
	cpuLimit := orDefault(r.CPUSeconds, DefaultCPUSeconds)
	args = append(append([]string(nil), args...),
		"-format", format,
		"-max-pages", strconv.Itoa(caps.MaxPages),
		"-max-chars", strconv.Itoa(caps.MaxChars),
		"-cpu", strconv.Itoa(cpuLimit),
		"-memory", strconv.FormatInt(r.memory, 10),
		"-parent", strconv.Itoa(os.Getpid()),
	)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = input
	var stdout bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: 64 << 20}
	// A crash's report may quote the file: it is read for the Go
	// runtime's words on running out of memory, never logged.
	var stderr headWriter
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	// The child inherits nothing of this process's environment (its
	// settings and secrets), nor its working directory.
	cmd.Env = []string{"GOTRACEBACK=none", "GOMAXPROCS=1"}
	cmd.Dir = "/"
	cmd.SysProcAttr = childAttr()
	err := startAndWait(cmd)
	var cpu time.Duration
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	refuse := func(reason error, limit string) (Result, time.Duration, error) {
		return Result{}, cpu, &Error{Reason: reason, Limit: limit, CPU: cpu}
	}
	if parent.Err() != nil {
		return Result{}, cpu, parent.Err()
	}
	if ctx.Err() != nil {
		return refuse(ErrTimeout, timeout.String())
	}
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			// The child did not run, or its input failed to arrive (the
			// caller's reader failed).
			return Result{}, cpu, fmt.Errorf("extract: run child: %w", err)
		}
		switch status, _ := exit.Sys().(syscall.WaitStatus); {
		case exit.ExitCode() == exitCPU,
			status.Signaled() && (status.Signal() == syscall.SIGKILL || status.Signal() == syscall.SIGXCPU) && cpu >= time.Duration(cpuLimit)*time.Second:
			return refuse(ErrCPU, fmt.Sprintf("%d CPU-seconds", cpuLimit))
		case exit.ExitCode() == exitSandbox:
			return Result{}, cpu, ErrSandbox
		case outOfMemory(stderr.b):
			return refuse(ErrMemory, fmt.Sprintf("%d MiB", r.memory>>20))
		}
		return refuse(ErrCrashed, "")
	}
	var out childOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return refuse(ErrCrashed, "")
	}
	if out.Error != "" {
		e := &Error{Reason: ErrUnreadable, CPU: cpu}
		if out.Error == errNotWordCode {
			e.detail = ErrNotWord
		}
		return Result{}, cpu, e
	}
	return out.Result, cpu, nil
}

// startAndWait starts cmd and waits for it on a thread of its own: the
// child's death signal (childAttr) fires when the thread that started it
// ends, which must not be before the child does.
func startAndWait(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			done <- err
			return
		}
		done <- cmd.Wait()
	}()
	return <-done
}

// outOfMemory reports whether the head of a dead child's stderr is the Go
// runtime's report of a failed allocation: of the heap or its metadata
// ("out of memory", "cannot allocate memory"), or of a thread's stack
// (ENOMEM; with cgo, glibc's EAGAIN: the child's process bound, its
// user's threads plus childThreads, is far above the few it needs).
func outOfMemory(stderr []byte) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "errno=12)", "pthread_create failed: Resource temporarily unavailable"} {
		if bytes.Contains(stderr, []byte(s)) {
			return true
		}
	}
	return false
}

// outcome is the outcome label of a refusal's reason.
func outcome(reason error) string {
	switch reason {
	case ErrUnreadable:
		return "malformed"
	case ErrTimeout:
		return "timeout"
	case ErrCPU:
		return "cpu"
	case ErrMemory:
		return "memory"
	}
	return "crashed"
}

// headWriter keeps the first 8 KiB written to it and drops the rest.
type headWriter struct{ b []byte }

func (h *headWriter) Write(p []byte) (int, error) {
	if room := 8<<10 - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
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

// ChildMain is the child: it checks that its parent is the process that
// started it, locks itself down (see lockdown), reads the file from stdin
// (bounded by maxChildInput), extracts it and writes a childOutput to
// stdout. It returns the exit code: 0 when it answered, even with an
// error, 2 on bad arguments, exitOrphaned or exitSandbox.
func ChildMain(args []string, stdin io.Reader, stdout io.Writer) int {
	fs := flag.NewFlagSet(ChildCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "", "")
	maxPages := fs.Int("max-pages", 0, "")
	maxChars := fs.Int("max-chars", 0, "")
	cpu := fs.Int("cpu", DefaultCPUSeconds, "")
	memory := fs.Int64("memory", DefaultMemory, "")
	parent := fs.Int("parent", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The parent asked the kernel for this child's death with its own;
	// one that died before the child was told is seen here.
	if *parent != 0 && os.Getppid() != *parent {
		return exitOrphaned
	}
	if err := lockdown(*cpu, *memory); err != nil {
		return exitSandbox
	}
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

// limitGo applies the child's limits that the Go runtime keeps: its
// stacks, its collector's target, and its CPU limit's signal, on which it
// exits with exitCPU (the kernel kills it a second later otherwise).
func limitGo(memory int64) {
	debug.SetMaxStack(childMaxStack)
	debug.SetMemoryLimit(memory / 2)
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	go func() {
		<-xcpu
		os.Exit(exitCPU)
	}()
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
