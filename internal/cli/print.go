package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// newTable returns a table writer whose cells wrap at a readable width.
func newTable(w io.Writer, header ...any) *tablewriter.Table {
	t := tablewriter.NewTable(w, tablewriter.WithRowMaxWidth(60))
	t.Header(header...)
	return t
}

// printQuery prints a query: its state, and once it ended its answer,
// conflicts, deliberation or claims, models and credits. With --json it
// prints the API's answer as is.
func (r *runner) printQuery(q *apiv1.Query, final bool) error {
	if r.json {
		return r.printJSON(q)
	}
	w := r.Stdout
	if !final || !client.Terminal(q.Status) {
		fmt.Fprintf(w, "%s  %s  %s  stage %s  %d%%  created %s\n", q.RequestID, q.Mode, q.Status, q.Stage, q.ProgressPercent, q.CreatedAt.Local().Format(time.DateTime))
		if !client.Terminal(q.Status) {
			return nil
		}
	}
	if q.Error != nil {
		fmt.Fprintf(r.Stderr, "query %s failed: %s: %s\n", q.RequestID, q.Error.Code, q.Error.Message)
	}
	if q.Answer != nil {
		fmt.Fprintf(w, "\nAnswer\n\n%s\n", indent(q.Answer.Text))
		if len(q.Answer.Conflicts) > 0 {
			fmt.Fprintf(w, "\nConflicts\n")
			for i, c := range q.Answer.Conflicts {
				fmt.Fprintf(w, "\n  %d. %s\n", i+1, c.Topic)
				for _, p := range c.Positions {
					fmt.Fprintf(w, "     - %s: %s\n", p.Model, p.Position)
				}
				if c.Resolution != "" {
					fmt.Fprintf(w, "     resolution: %s\n", c.Resolution)
				}
			}
		}
	}
	if q.Justify != nil && len(q.Justify.Disagreements) > 0 {
		fmt.Fprintf(w, "\nDisagreements\n")
		for i, d := range q.Justify.Disagreements {
			state := "unresolved"
			if d.Resolved {
				state = "resolved"
			}
			fmt.Fprintf(w, "\n  %d. %s (%s)\n", i+1, d.Topic, state)
			for _, s := range d.Positions {
				fmt.Fprintf(w, "     - %s: %s → %s\n", s.Model, s.Before, s.After)
			}
			if d.Resolution != "" {
				fmt.Fprintf(w, "     resolution: %s\n", d.Resolution)
			}
		}
	}
	if q.Verify != nil && len(q.Verify.Claims) > 0 {
		fmt.Fprintf(w, "\nClaims\n\n")
		t := newTable(w, "#", "Claim", "Verdict", "Confidence", "First source")
		for i, c := range q.Verify.Claims {
			verdict, conf, source := "-", "-", "-"
			if c.Verdict != nil {
				verdict = *c.Verdict
			}
			if c.Confidence != nil {
				conf = strconv.FormatFloat(*c.Confidence, 'f', 2, 64)
			}
			if len(c.Sources) > 0 {
				source = c.Sources[0].URL
			}
			_ = t.Append(strconv.Itoa(i+1), c.Text, verdict, conf, source)
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(q.Models) > 0 {
		fmt.Fprintf(w, "\nModels\n\n")
		header := []any{"Provider", "Model", "Status", "Credits", "Latency"}
		names := map[string]string{}
		for _, f := range q.Files {
			names[f.FileID] = f.Name
		}
		if len(q.Files) > 0 {
			header = append(header, "Files")
		}
		t := newTable(w, header...)
		for _, m := range q.Models {
			model := m.ModelID
			if m.CustomModel != "" {
				model = m.CustomModel
			}
			if m.Simulated {
				model += " (simulated)"
			}
			status := m.Status
			if m.Error != nil {
				status += ": " + m.Error.Class
			}
			row := []any{m.Provider, model, status, credits(m.Credits), fmt.Sprintf("%d ms", m.LatencyMS)}
			if len(q.Files) > 0 {
				// How the model received each file: native, text or none.
				seen := make([]string, 0, len(m.Files))
				for _, f := range m.Files {
					seen = append(seen, cmp.Or(names[f.FileID], f.FileID)+": "+f.Seen)
				}
				row = append(row, strings.Join(seen, ", "))
			}
			_ = t.Append(row...)
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(q.Missing) > 0 {
		fmt.Fprintf(w, "\nMissing\n\n")
		for _, m := range q.Missing {
			fmt.Fprintf(w, "  - %s\n", m)
		}
	}
	charged := "-"
	if q.Credits.Charged != nil {
		charged = credits(*q.Credits.Charged)
	}
	fmt.Fprintf(w, "\n%s %s, credits charged %s (estimated %s)\n", q.RequestID, q.Status, charged, credits(q.Credits.Estimated))
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}

func credits(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) }

func (r *runner) estimate(ctx context.Context, req apiv1.QueryRequest) error {
	est, err := r.c.Estimate(ctx, req)
	if err != nil {
		return err
	}
	if r.json {
		return r.printJSON(est)
	}
	t := newTable(r.Stdout, "Provider", "Model", "Role", "Input tokens", "Output tokens", "Credits")
	for _, c := range est.Calls {
		model := c.ModelID
		if c.CustomModel != "" {
			model = c.CustomModel
		}
		_ = t.Append(c.Provider, model, c.Role, strconv.Itoa(c.InputTokens), strconv.Itoa(c.OutputTokens), credits(c.Credits))
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintf(r.Stdout, "\n%s: about %s credits (with a %d%% margin); balance %s, reserved %s", est.Mode, credits(est.EstimatedCredits), est.MarginPercent, credits(est.Balance), credits(est.Reserved))
	if !est.Sufficient {
		fmt.Fprint(r.Stdout, " — not enough credits")
	}
	if !est.WithinCap {
		fmt.Fprint(r.Stdout, " — past the monthly cap")
	}
	fmt.Fprintln(r.Stdout)
	return nil
}

func (r *runner) models(ctx context.Context) error {
	cat, err := r.c.Models(ctx)
	if err != nil {
		return err
	}
	if r.json {
		return r.printJSON(cat)
	}
	t := newTable(r.Stdout, "Provider", "Model", "Name", "Tier", "Default", "Input price", "Output price")
	for _, g := range cat.Groups {
		for _, m := range g.Models {
			def := ""
			if m.Default {
				def = "yes"
			}
			_ = t.Append(g.Name, m.ModelID, m.Name, m.Tier, def, strconv.FormatInt(m.Pricing.InputPerMillion, 10), strconv.FormatInt(m.Pricing.OutputPerMillion, 10))
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintln(r.Stdout, "Prices are credits per million tokens; select a model with crosscheck ask --model provider=model.")
	return nil
}

func (r *runner) list(ctx context.Context, opts client.ListOptions, all bool) error {
	var rows []apiv1.QuerySummary
	var next *string
	var page *apiv1.QueryList
	if all {
		for q, err := range r.c.All(ctx, opts) {
			if err != nil {
				return err
			}
			rows = append(rows, q)
		}
	} else {
		var err error
		page, err = r.c.List(ctx, opts)
		if err != nil {
			return err
		}
		rows = page.Data
		if page.HasMore {
			next = page.NextAfter
		}
	}
	if r.json && page != nil {
		return r.printJSON(page)
	}
	if r.json {
		return r.printJSON(rows)
	}
	t := newTable(r.Stdout, "Request ID", "Mode", "Status", "Stage", "Created", "Credits")
	for _, q := range rows {
		c := "-"
		if q.Credits.Charged != nil {
			c = credits(*q.Credits.Charged)
		}
		_ = t.Append(q.RequestID, q.Mode, q.Status, q.Stage, q.CreatedAt.Local().Format(time.DateTime), c)
	}
	if err := t.Render(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(r.Stdout, "more: crosscheck list%s --after %s\n", listFlags(opts), *next)
	}
	return nil
}

// listFlags are the flags of a list command that lists with opts, but for
// --after: those that the next page's command repeats.
func listFlags(opts client.ListOptions) string {
	var b strings.Builder
	if opts.Status != "" {
		fmt.Fprintf(&b, " --status %s", opts.Status)
	}
	if opts.Mode != "" {
		fmt.Fprintf(&b, " --mode %s", opts.Mode)
	}
	if opts.Limit != 0 {
		fmt.Fprintf(&b, " --limit %d", opts.Limit)
	}
	return b.String()
}
