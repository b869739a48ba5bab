package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/files"
)

// readingFiles is a file service that reads each upload to its end.
type readingFiles struct{}

func (readingFiles) Upload(_ context.Context, _ accounts.Caller, name, _ string, body io.Reader) (files.Meta, error) {
	n, err := io.Copy(io.Discard, body)
	if err != nil {
		return files.Meta{}, err
	}
	return files.Meta{ID: "file_01M7Z5ZWVQ401ZYRSQ5ZF59AJE", Name: name, Bytes: n}, nil
}
func (readingFiles) Get(context.Context, string, string) (files.Meta, error) {
	return files.Meta{}, nil
}
func (readingFiles) List(context.Context, string, int, string) (files.Page, error) {
	return files.Page{}, nil
}
func (readingFiles) Delete(context.Context, string, string) error { return nil }

// FuzzUpload feeds POST /v1/files arbitrary multipart bodies: it must
// answer 201 or an error envelope, never panic.
func FuzzUpload(f *testing.F) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.SetBoundary("fuzzboundary")
	mw.WriteField("name", "notes.py")
	fw, _ := mw.CreateFormFile("file", "a.py")
	fw.Write([]byte("print(1)\n"))
	mw.Close()
	f.Add(b.Bytes())
	f.Add([]byte("--fuzzboundary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--fuzzboundary--"))
	f.Add([]byte("--fuzzboundary--"))
	s := &Server{Files: readingFiles{}, DocsURL: "http://docs"}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/v1/files", bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=fuzzboundary")
		req = req.WithContext(context.WithValue(req.Context(), callerKey{}, accounts.Caller{AccountID: "acct_x"}))
		w := httptest.NewRecorder()
		s.upload(w, req)
		if w.Code != http.StatusCreated {
			var e ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%d answered without the error envelope: %s", w.Code, w.Body)
			}
		}
	})
}
