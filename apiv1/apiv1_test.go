package apiv1_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/handlers"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// fill sets every field reachable from v to a value that is not its zero
// value, so that no omitempty hides a field: every pointer set, every slice
// and map with one element.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(0.5)
	}
}

// sameJSON checks that what the service encodes as served decodes into
// want's apiv1 type with no unknown field and encodes back to the same
// bytes: the two types agree field for field.
func sameJSON[T any](t *testing.T, served any) {
	t.Helper()
	fill(reflect.ValueOf(served).Elem(), 0)
	raw, err := json.Marshal(served)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var got T
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%T does not decode into %T: %v\n%s", served, got, err, raw)
	}
	back, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, back) {
		t.Fatalf("%T and %T differ:\nserved %s\napiv1  %s", served, got, raw, back)
	}
}

func TestQueryIsTheServedResult(t *testing.T) {
	sameJSON[apiv1.Query](t, &projections.Result{})
}

func TestQueryRequestIsTheDecodedBody(t *testing.T) {
	sameJSON[apiv1.QueryRequest](t, &queries.Request{})
}

func TestErrorBodyIsTheEnvelope(t *testing.T) {
	sameJSON[apiv1.ErrorBody](t, &handlers.ErrorBody{})
	// And a real envelope, as the handlers build it.
	env := handlers.Envelope(&apperr.Error{Code: apperr.RateLimited, Message: "slow down", RetryAfter: 3}, "req_1", "https://h/docs")
	raw, _ := json.Marshal(env)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var got apiv1.ErrorBody
	if err := dec.Decode(&got); err != nil || got.Error.Code != apperr.RateLimited || got.Error.RetryAfterSeconds == nil || *got.Error.RetryAfterSeconds != 3 {
		t.Fatalf("%s: %+v, %v", raw, got, err)
	}
}

func TestAcceptedIsTheSubmitResponse(t *testing.T) {
	sameJSON[apiv1.Accepted](t, &handlers.SubmitResponse{})
}

func TestEstimateIsTheServedEstimate(t *testing.T) {
	sameJSON[apiv1.Estimate](t, &handlers.EstimateResponse{})
}

func TestCatalogIsTheServedCatalog(t *testing.T) {
	sameJSON[apiv1.Catalog](t, &handlers.ModelsResponse{})
}

func TestStreamEventsAreTheServedData(t *testing.T) {
	sameJSON[apiv1.Progress](t, &handlers.Progress{})
	sameJSON[apiv1.StreamError](t, &handlers.StreamError{})
}

func TestFileIsTheServedFile(t *testing.T) {
	sameJSON[apiv1.File](t, &handlers.FileObject{})
}
