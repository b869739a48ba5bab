package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// ask submits the query and follows it to its end.
func (r *runner) ask(ctx context.Context, req apiv1.QueryRequest) error {
	acc, err := r.c.Submit(ctx, req)
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(r.Stderr, "\ninterrupted before the service answered: the query may have been accepted; crosscheck list shows it")
		return errDetached
	}
	if err != nil {
		return err
	}
	if !r.json {
		fmt.Fprintf(r.Stderr, "query %s submitted (%s)\n", acc.RequestID, req.Mode)
	}
	return r.follow(ctx, acc.RequestID)
}

// follow streams the query with its progress shown, then prints it. When
// ctx ends first (Ctrl-C) it says how to pick the query up again and
// returns errDetached.
func (r *runner) follow(ctx context.Context, id string) error {
	p := r.newProgress()
	q, err := r.c.Stream(ctx, id, func(ev client.Event) {
		if ev.Progress != nil {
			p.update(ev.Progress.Stage, ev.Progress.ProgressPercent)
		}
	})
	p.done(q)
	if ctx.Err() != nil {
		fmt.Fprintf(r.Stderr, "\ndetached from %s; it goes on.\n  follow it: crosscheck watch %s\n  stop it:   crosscheck cancel %s\n", id, id, id)
		return errDetached
	}
	if q == nil {
		return err
	}
	if perr := r.printQuery(q, true); perr != nil {
		return perr
	}
	var e *client.Error
	if errors.As(err, &e) {
		return errQueryFailed // printQuery said why
	}
	return err
}

// progress shows a query's stages: a bar on a terminal, a line per stage
// elsewhere.
type progress struct {
	bar   *progressbar.ProgressBar
	out   io.Writer // the bar's
	lines io.Writer
	stage string
}

func (r *runner) newProgress() *progress {
	if r.json {
		return &progress{}
	}
	if r.terminal() {
		return &progress{out: r.Stdout, bar: progressbar.NewOptions(100,
			progressbar.OptionSetWriter(r.Stdout),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetDescription("queued"),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
		)}
	}
	return &progress{lines: r.Stderr}
}

func (p *progress) update(stage string, percent int) {
	switch {
	case p.bar != nil:
		p.bar.Describe(stage)
		_ = p.bar.Set(percent)
	case p.lines != nil && stage != p.stage:
		fmt.Fprintf(p.lines, "[%3d%%] %s\n", percent, stage)
	}
	p.stage = stage
}

// done ends the display: the bar filled (or left where it stopped) and
// its line ended.
func (p *progress) done(q *apiv1.Query) {
	switch {
	case p.bar != nil:
		if q != nil && q.Status == client.StatusCompleted {
			p.bar.Describe("done")
			_ = p.bar.Finish()
		}
		fmt.Fprintln(p.out)
	case p.lines != nil && q != nil:
		fmt.Fprintf(p.lines, "[%3d%%] %s\n", q.ProgressPercent, q.Status)
	}
}
