package modes

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// fakeFile is a file of the fake source: its bytes and extracted text.
type fakeFile struct {
	data []byte
	text string
}

// fakeSource is a FileSource over files built in the test.
type fakeSource map[string]fakeFile

func (s fakeSource) Content(_ context.Context, id string) ([]byte, error) {
	f, ok := s[id]
	if !ok {
		return nil, errors.New("no such file")
	}
	return f.data, nil
}

func (s fakeSource) Text(_ context.Context, id string) (string, error) {
	f, ok := s[id]
	if !ok {
		return "", errors.New("no such file")
	}
	return f.text, nil
}

// The planted fact: a sentence only the attached PDF states, on its second
// page.
const (
	plantedFact = "The Kestrel reactor runs at 7,431 kelvin."
	factFigure  = "7,431"
	question    = "At what temperature does the Kestrel reactor run?"
	pdfID       = "file_01KPDF00000000000000000001"
	pngID       = "file_01KPNG00000000000000000002"
	pyID        = "file_01KPY000000000000000000003"
)

func pngBytes(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range 8 {
		img.Set(i, i, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// attachedQuery returns a query of mode over the four simulated providers
// with a PDF, a PNG and a .py file attached, routed as the simulated
// catalog says, and the source that holds them.
func attachedQuery(t *testing.T, mode string) (*events.Query, fakeSource) {
	pdfText := "Operations manual, page one.\f" + plantedFact + " It was commissioned in 2019."
	src := fakeSource{
		pdfID: {data: extracttest.MinimalPDF("Manual", "Operations manual, page one.", plantedFact), text: pdfText},
		pngID: {data: pngBytes(t)},
		pyID:  {data: []byte("def kelvin():\n    return 7431\n"), text: "def kelvin():\n    return 7431\n"},
	}
	cat := catalog.Simulated()
	var models []events.ModelRef
	for _, p := range cat.Providers {
		models = append(models, events.ModelRef{Provider: p.Key, ModelID: p.Default().ID, Simulated: true})
	}
	files := []events.FileRef{
		{ID: pdfID, Name: "manual.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: int64(len(src[pdfID].data)), Pages: 2, TextChars: len(pdfText)},
		{ID: pngID, Name: "photo.png", Kind: catalog.KindImage, MediaType: "image/png", Bytes: int64(len(src[pngID].data))},
		{ID: pyID, Name: "kelvin.py", Kind: catalog.KindText, MediaType: "text/x-python", Bytes: int64(len(src[pyID].data)), TextChars: len(src[pyID].text)},
	}
	for i, f := range files {
		for _, m := range models {
			if model, _ := cat.Model(m.Provider, m.ModelID); model.Native(f.Kind) {
				files[i].NativeFor = append(files[i].NativeFor, m.Key())
			}
		}
	}
	q := &events.Query{}
	q.Apply(events.Record{Seq: 1, Event: events.QuerySubmitted{RequestID: "req_01KFILES00000000000000000" + mode[:1], AccountID: "acct_x",
		Mode: mode, Prompt: question, Models: models, Files: files}})
	return q, src
}

// recording wraps a backend and keeps every request it is sent.
type recording struct {
	providers.Provider
	mu   sync.Mutex
	reqs []providers.Request
}

func (r *recording) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, *req)
	r.mu.Unlock()
	return r.Provider.Complete(ctx, req)
}

func (r *recording) byPurpose(purpose string) []providers.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []providers.Request
	for _, q := range r.reqs {
		if q.Purpose == purpose {
			out = append(out, q)
		}
	}
	return out
}

func simulatedModels(src FileSource) (Models, map[string]*recording) {
	recs := map[string]*recording{}
	set := providers.Set{}
	for _, key := range catalog.ProviderKeys {
		recs[key] = &recording{Provider: simulated.New(key, 0)}
		set[key] = recs[key]
	}
	est := &pricing.Estimator{Catalog: catalog.Simulated(), Planner: pricing.PlanFunc(Plan)}
	return Models{Providers: set, Price: est.Cost, Files: src}, recs
}

type runner interface {
	Run(ctx context.Context, q *events.Query, emit Emit) (events.Event, error)
}

// runAll runs q to its end and returns its events, the submission first.
func runAll(t *testing.T, r runner, q *events.Query) []events.Record {
	recs := []events.Record{{Seq: 1, Event: *q.Submitted}}
	var mu sync.Mutex
	end, err := r.Run(context.Background(), q, func(_ context.Context, ev events.Event) error {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, events.Record{Seq: uint64(len(recs) + 1), Event: ev})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := end.(events.QueryCompleted); !ok {
		t.Fatalf("the query ended with %+v", end)
	}
	return append(recs, events.Record{Seq: uint64(len(recs) + 1), Event: end})
}

// checkRouting checks that each answering call carried the files as its
// model reads them: provider_a to _c the PDF and the PNG natively and the
// code as text; provider_d (no vision, no PDF) the PDF's text under its
// name and a note that it cannot see the image.
func checkRouting(t *testing.T, recs map[string]*recording, purpose string) {
	t.Helper()
	for key, rec := range recs {
		reqs := rec.byPurpose(purpose)
		if len(reqs) == 0 {
			t.Fatalf("%s made no %s call", key, purpose)
		}
		req := reqs[0]
		user := req.Messages[len(req.Messages)-1].Content
		var types []string
		for _, a := range req.Attachments {
			types = append(types, a.MediaType)
		}
		if !strings.Contains(user, "## File: kelvin.py ("+pyID+"), as extracted text\ndef kelvin():") {
			t.Errorf("%s %s: the code is not in the prompt under its name:\n%s", key, purpose, user)
		}
		if key == catalog.ProviderD {
			if len(types) != 0 || !strings.Contains(user, "## File: manual.pdf ("+pdfID+"), as extracted text\nOperations manual") ||
				!strings.Contains(user, "photo.png ("+pngID+") is not visible to you") {
				t.Errorf("%s %s: attachments %v, prompt:\n%s\nwant the PDF's text and the image named as not visible", key, purpose, types, user)
			}
			continue
		}
		block, _, _ := strings.Cut(user, filesEndMarker)
		if !slices.Equal(types, []string{"application/pdf", "image/png"}) || strings.Contains(block, plantedFact) {
			t.Errorf("%s %s: attachments %v; want the PDF and the PNG natively, and not the PDF's text in the prompt", key, purpose, types)
		}
	}
}

func TestUnifyAnswersFromAnAttachedFile(t *testing.T) {
	q, src := attachedQuery(t, events.ModeUnify)
	models, recs := simulatedModels(src)
	out := runAll(t, &Unify{Models: models}, q)
	checkRouting(t, recs, events.StepAnswer)
	doc := projections.FoldQuery(out)
	if doc.Result.Answer == nil || !strings.Contains(doc.Result.Answer.Text, factFigure) {
		t.Fatalf("the answer %+v does not state the planted fact", doc.Result.Answer)
	}
	for _, m := range doc.Result.Models {
		want := []projections.ModelFile{{FileID: pdfID, Seen: "native"}, {FileID: pngID, Seen: "native"}, {FileID: pyID, Seen: "text"}}
		if m.Provider == catalog.ProviderD {
			want[0].Seen, want[1].Seen = "text", "none"
		}
		if !slices.Equal(m.Files, want) {
			t.Errorf("%s files %+v, want %+v", m.Provider, m.Files, want)
		}
	}
	if len(doc.Result.Missing) != 1 || !strings.Contains(doc.Result.Missing[0], "provider_d") || !strings.Contains(doc.Result.Missing[0], pngID) {
		t.Errorf("missing %q; want the image provider_d could not see", doc.Result.Missing)
	}
}

func TestJustifyRoundTwoSeesTheFilesAgain(t *testing.T) {
	q, src := attachedQuery(t, events.ModeJustify)
	models, recs := simulatedModels(src)
	out := runAll(t, &Justify{Models: models}, q)
	checkRouting(t, recs, events.StepAnswer)
	checkRouting(t, recs, events.StepRevise)
	doc := projections.FoldQuery(out)
	if doc.Result.Answer == nil || !strings.Contains(doc.Result.Answer.Text, factFigure) {
		t.Fatalf("the answer %+v does not state the planted fact", doc.Result.Answer)
	}
}

func TestVerifyGroundsAClaimInAnAttachedFile(t *testing.T) {
	q, src := attachedQuery(t, events.ModeVerify)
	models, recs := simulatedModels(src)
	out := runAll(t, &Verify{Models: models}, q)
	checkRouting(t, recs, events.StepResearch)
	checkRouting(t, recs, events.StepAssessClaims)
	doc := projections.FoldQuery(out)
	var found bool
	for _, c := range doc.Result.Verify.Claims {
		if !strings.Contains(c.Text, factFigure) || !strings.Contains(c.Text, "Kestrel") {
			continue
		}
		found = true
		if c.Verdict == nil || *c.Verdict != events.VerdictSupported {
			t.Errorf("claim %q: verdict %v, want supported", c.Text, c.Verdict)
		}
		if !slices.ContainsFunc(c.Sources, func(s events.Citation) bool { return s.URL == "file://"+pdfID+"#page=2" && s.Title == "manual.pdf" }) {
			t.Errorf("claim %q: sources %+v, want file://%s#page=2", c.Text, c.Sources, pdfID)
		}
	}
	if !found {
		t.Fatalf("no claim states the planted fact: %+v", doc.Result.Verify.Claims)
	}
	// The file's content is in no event: evidence names the file and page.
	for _, r := range out {
		if ev, ok := r.Event.(events.EvidenceRetrieved); ok {
			for _, s := range ev.Sources {
				if strings.HasPrefix(s.URL, "file://") && s.Snippet != "" {
					t.Errorf("evidence %+v carries the file's text", s)
				}
			}
		}
	}
}

// The estimate counts the files each call carries, as each model receives
// them, so that the reservation covers what the run is charged.
func TestEstimateCountsFilesAndCoversTheCharge(t *testing.T) {
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		t.Run(mode, func(t *testing.T) {
			q, src := attachedQuery(t, mode)
			est := &pricing.Estimator{Catalog: catalog.Simulated(), Planner: pricing.PlanFunc(Plan)}
			sub := q.Submitted
			without := est.Estimate(mode, sub.Prompt, nil, sub.Models, nil)
			with := est.Estimate(mode, sub.Prompt, nil, sub.Models, sub.Files)
			if with.Micros <= without.Micros {
				t.Fatalf("estimate with files %d, without %d: the files are not counted", with.Micros, without.Micros)
			}
			models, _ := simulatedModels(src)
			var r runner = &Unify{Models: models}
			switch mode {
			case events.ModeJustify:
				r = &Justify{Models: models}
			case events.ModeVerify:
				r = &Verify{Models: models}
			}
			var charged int64
			for _, rec := range runAll(t, r, q) {
				if _, _, cost, ok := events.Charged(rec.Event); ok {
					charged += cost
				}
			}
			if charged == 0 || charged > with.Micros {
				t.Fatalf("charged %d micro-credits, reserved %d: the reservation does not cover the charge", charged, with.Micros)
			}
		})
	}
}
